"""A run's report in all three formats, read back for what it says: the terminal's text, the Markdown file and
the HTML file's own words (its inlined plotly.js and plot data left out: they are the library's words, and a
plot's title is in its caption; an image run's thumbnails, ``data:`` URIs, left out too: about 60 kB of
base64 holds a given three letters, "E2E" or "ITL", one time in five). Used by the tests that hold an image
or a training run's report to saying nothing that belongs to inference."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

# What only an inference report says: its latency metrics, its token rates and prices, its sweep advice,
# the lines its sections print for a run that has none of them.
INFERENCE_WORDS = (
    "TTFT",
    "TPOT",
    "ITL",
    "E2E",
    "output tok",
    "tokens per request",
    "--sweep",
    "concurrency is not recorded",
    "per output token",
    "unit of work: token",
)

CLI = Callable[..., tuple[int, str, str]]
_SCRIPT = re.compile(r"<script\b.*?</script>", re.S)
_DATA_URI = re.compile(r"data:[\w/+.-]+;base64,[A-Za-z0-9+/=]*")


# A CPU run priced as a cloud instance of this machine's architecture (the runs the tests make are CPU runs):
# the answer and the cost section show a price.
CPU_PROFILE = "cpu-cloud-x86_64"


def report_texts(cli: CLI, run_ids: list[str], tmp_path: Path) -> dict[str, str]:
    """``gpuledger report RUN... --profile CPU_PROFILE`` on the terminal, with ``--md`` and with ``--html``:
    format -> text."""
    md, html = tmp_path / "report.md", tmp_path / "report.html"
    files = ("--md", str(md), "--html", str(html))
    code, terminal, err = cli("report", *run_ids, "--profile", CPU_PROFILE, *files)
    assert code == 0, err
    return {
        "terminal": terminal,
        "markdown": md.read_text(encoding="utf-8"),
        "html": _DATA_URI.sub("data:", _SCRIPT.sub("", html.read_text(encoding="utf-8"))),
    }


def inference_words_in(texts: dict[str, str]) -> dict[str, list[str]]:
    """Format -> the inference words it contains (none, for a report of runs that are not inference)."""
    return {fmt: [w for w in INFERENCE_WORDS if w in text] for fmt, text in texts.items()}
