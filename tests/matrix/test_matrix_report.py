"""``gpuledger report --matrix ID`` in every format: a matrix run for real (``--ray none``: the cells in this
process, against two programmable loopback servers, into a SQLite store), then read back as the terminal
report, the Markdown twin (the cheapest target per load level), the self-contained HTML file (the Pareto
fronts as plotly plots, drawn from the same figures ``--json`` gives) and the JSON document."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import yaml
from stream_server import Scenario, StreamServer

from gpuledger.cli.main import main
from gpuledger.report.markdown import md_escape

Serve = Callable[..., StreamServer]
HOSTILE = "<b>x</b>|[y](z)"


def _plan(tmp_path: Path, urls: dict[str, str], *, profile: str = "cpu-cloud") -> Path:
    plan = {
        "name": "two servers",
        "bench": {"dataset": "random", "input_len": 8, "output_len": 16, "num_requests": 8, "warmup": 0,
                  "telemetry": False},
        "matrix": {"target": [{"name": n, "base_url": u, "engine": "openai", "model": "test-model",
                               "profile": profile} for n, u in urls.items()],
                   "concurrency": [1, 4]},
        "repeat": 1,
    }
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return path


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    code = main([*args, "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    doc: dict[str, Any] = json.loads(out.out)
    return doc


class _Scripts(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "script":
            self.found.append(dict(attrs))


def _scripts(html: str) -> list[dict[str, str | None]]:
    parser = _Scripts()
    parser.feed(html)
    return parser.found


def _figures(html: str) -> dict[str, dict[str, Any]]:
    """The plotly figures the page draws, by the id of the div each is drawn into."""
    found = re.search(r'<script type="application/json" id="gl-figures">(.*?)</script>', html, re.S)
    assert found is not None
    figures: list[dict[str, Any]] = json.loads(found.group(1))
    divs = re.findall(r'<div class="plot" id="(fig-[^"]+)"', html)
    assert sorted(divs) == sorted(f["id"] for f in figures)
    return {f["id"]: f for f in figures}


@pytest.fixture
def matrix(serve: Serve, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    fast, slow = serve(Scenario(itl_s=0.001)), serve(Scenario(itl_s=0.004))
    plan = _plan(tmp_path, {"fast": fast.url, HOSTILE: slow.url})
    done = _json(capsys, "matrix", str(plan), "--ray", "none")
    assert done["counts"]["complete"] == 4
    matrix_id: str = done["matrix_id"]
    return matrix_id


def test_report_matrix_writes_the_html_with_the_pareto_plots_the_markdown_and_the_json(
    matrix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    html_path, md_path = tmp_path / "m.html", tmp_path / "m.md"
    doc = _json(capsys, "report", "--matrix", matrix, "--html", str(html_path), "--md", str(md_path))
    assert doc["files"] == {"html": str(html_path), "md": str(md_path)}
    assert {c["target"] for c in doc["cells"]} == {"fast", HOSTILE}
    assert set(doc["cost_pareto"]) == set(doc["pareto"]) == {"fast", HOSTILE}
    assert all(doc["cost_pareto"].values()) and all(doc["pareto"].values())

    html = html_path.read_text()
    figures = _figures(html)
    assert list(figures) == ["fig-cost_vs_interactivity", "fig-throughput_vs_latency"]
    # Self-contained: plotly.js inlined, then the figures' data and the script drawing them; nothing fetched.
    scripts = _scripts(html)
    assert len(scripts) == 3 and not any("src" in attrs for attrs in scripts)
    assert "connect-src &#x27;none&#x27;" in html  # the page's CSP: no request leaves it

    # The cost plot draws each target's cells at (tok/s per user, cost), and its front through the cells the
    # JSON names: the plot is the document's figures.
    cells = {c["key"]: c for c in doc["cells"]}
    traces = {t["name"]: t for t in figures["fig-cost_vs_interactivity"]["data"]}
    escaped = "&lt;b&gt;x&lt;/b&gt;|[y](z)"  # plotly draws a few tags: a target's name is shown as written
    assert set(traces) == {"fast", "fast: Pareto front", escaped, f"{escaped}: Pareto front"}
    for target, name in (("fast", "fast"), (HOSTILE, escaped)):
        own = [c for c in cells.values() if c["target"] == target]
        assert sorted(zip(traces[name]["x"], traces[name]["y"], strict=True)) == sorted(
            (c["tokens_per_s_per_user"], c["cost"]["mean"]) for c in own)
        front = sorted((cells[k]["tokens_per_s_per_user"], cells[k]["cost"]["mean"])
                       for k in doc["cost_pareto"][target])
        line = traces[f"{name}: Pareto front"]
        assert list(zip(line["x"], line["y"], strict=True)) == front
        assert traces[name]["mode"] == "markers" and line["mode"] == "lines"
    layout = figures["fig-cost_vs_interactivity"]["layout"]
    assert layout["yaxis"]["title"]["text"] == "cost (USD per 1M output tokens)"
    throughput = {t["name"]: t for t in figures["fig-throughput_vs_latency"]["data"]}
    assert sorted(throughput["fast"]["y"]) == sorted(
        c["figures"]["output_tokens_per_s"]["mean"] for c in cells.values() if c["target"] == "fast")
    assert "<b>x</b>" not in html  # the hostile name is escaped in the markup too

    # The Markdown lists the cheapest target of every load level, in the document's currency and unit.
    md = md_path.read_text()
    assert "**Cheapest target per load level (USD per 1M output tokens)**" in md
    for entry in doc["cheapest"]:
        row = f"| {md_escape(entry['load_level'])} | {md_escape(entry['cheapest'])} | {entry['cost']:.4g} |"
        assert row in md, row
    assert "<b>" not in md and md_escape(HOSTILE) in md
    assert "Plots in the HTML report: Cost vs tokens/s per user, per target; Throughput vs TPOT p50" in md


def test_the_terminal_report_and_show_say_the_fronts_and_the_cheapest_target(
    matrix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", "--matrix", matrix]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "Cheapest target per load level (USD per 1M output tokens)" in text
    assert "Pareto front of fast (throughput vs TPOT p50): target=fast,concurrency=" in text
    assert "Cost front of fast (cost vs tok/s per user): target=fast,concurrency=" in text
    assert "2 plot(s) in the HTML report (--html FILE)" in text
    assert "Cells × repeats" not in text
    assert main(["matrix", "show", matrix]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "Cells × repeats" in shown and f"gpuledger matrix {matrix} — two servers" in shown


def test_the_markdown_goes_to_stdout_and_refusals_come_before_anything_is_read(
    matrix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", "--matrix", matrix, "--md", "-"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"# gpuledger matrix {matrix} — two servers\n")
    assert main(["report", "--matrix", matrix, "--md", "-", "--json"]) == 2
    assert "both want stdout" in capsys.readouterr().err
    assert main(["report", "--matrix", matrix, "--profile", "cpu-cloud"]) == 2
    assert "give no run ids or --profile" in capsys.readouterr().err
    missing_dir = tmp_path / "nowhere" / "m.html"
    assert main(["report", "--matrix", "m-nothere", "--html", str(missing_dir)]) == 4
    assert not missing_dir.parent.exists()


def test_a_matrix_whose_cells_cannot_be_priced_draws_throughput_and_says_why_not_cost(
    serve: Serve, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = serve(Scenario(itl_s=0.001))
    plan = _plan(tmp_path, {"a": a.url}, profile=str(tmp_path / "gone.yaml"))
    matrix_id = _json(capsys, "matrix", str(plan), "--ray", "none")["matrix_id"]
    html_path = tmp_path / "m.html"
    doc = _json(capsys, "report", "--matrix", matrix_id, "--html", str(html_path))
    assert all(c["cost"] is None and "not priced" in c["cost_note"] for c in doc["cells"])
    assert doc["cost_pareto"] == {"a": []}
    assert [e["note"] for e in doc["cheapest"]] == ["no target was priced at this load level"] * 2
    html = html_path.read_text()
    assert list(_figures(html)) == ["fig-throughput_vs_latency"]
    assert "cost vs tok/s per user: no cell has both a cost and a TPOT p50" in html
