"""What reaches the terminal (docs/contracts.md): text that came from outside (a run's label and model
name, an imported run, a server's error body, a file name) never reaches stdout or stderr with its
control characters live, and a huge value is shown clipped; ``--json`` keeps the value complete and
exact. The Markdown and HTML reports follow the same rule.

The hostile runs are real runs (the golden store, written by a real gpuledger) exported and imported
back with a hostile label and model name: ``gpuledger import`` is how a run from elsewhere arrives."""

from __future__ import annotations

import json
import re
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from aiohttp import web
from rich.table import Table
from rich.text import Text

from gpuledger.cli.common import make_console
from gpuledger.cli.main import main
from gpuledger.textsafe import MAX_DISPLAY_CHARS, neutralise

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "golden"
IDS = json.loads((GOLDEN / "ids.json").read_text())

# Clear screen, set the window title (OSC 0 ... BEL), a CSI introducer as one C1 byte, a right-to-left
# override, a carriage return that would overwrite the line, DEL.
HOSTILE = "lab\x1b[2J\x1b]0;pwned\x07el\x9b31m\u202eevil\rX\x7f"
# What may reach a terminal: no C0 but newline, no DEL, no C1, no bidi controls.
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# What rich itself writes to a colour terminal: styles (SGR), and a status spinner's cursor hiding,
# line erasing and carriage returns.
RICH_OWN = re.compile(r"\x1b\[[0-9;]*m|\x1b\[\?25[lh]|\x1b\[\d*A|\x1b\[2K|\r")


@pytest.fixture
def golden_db(tmp_path: Path) -> str:
    shutil.copy(GOLDEN / "store-v1.sqlite", tmp_path / "golden.sqlite")
    return f"sqlite:///{tmp_path / 'golden.sqlite'}"


def _import_with(golden_db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], *, label: str,
                 model: str, run: str = "h200") -> str:
    """Export a golden run, give it ``label`` and ``model``, import it into the test's own store."""
    assert main(["export", IDS[run], "--db", golden_db]) == 0
    doc = orjson.loads(capsys.readouterr().out)
    doc["run"]["label"], doc["run"]["model"] = label, model
    path = tmp_path / f"hostile-{run}.json"
    path.write_bytes(orjson.dumps(doc))
    assert main(["import", str(path), "--json"]) == 0
    imported: str = orjson.loads(capsys.readouterr().out)["imported"]
    return imported


@pytest.fixture
def hostile_run(golden_db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    return _import_with(golden_db, tmp_path, capsys, label=HOSTILE, model=f"Qwen{HOSTILE}")


COMMANDS = {
    "runs": lambda r: ["runs"],
    "show": lambda r: ["show", r],
    "report": lambda r: ["report", r],
    "cost": lambda r: ["cost", r, "--no-save"],
    "estimate": lambda r: ["estimate", r, "--gpu", "mi300x"],
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_hostile_label_and_model_name_reach_the_terminal_inert(
    command: str, hostile_run: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    assert main(COMMANDS[command](hostile_run)) == 0
    captured = capsys.readouterr()
    for stream in (captured.out, captured.err):
        assert RAW_CONTROL.search(stream) is None, repr(RAW_CONTROL.search(stream))
    if command in ("show", "report"):
        assert "lab␛[2J␛]0;pwned" in captured.out  # shown, visibly, not acted on


@pytest.mark.parametrize("command", list(COMMANDS))
def test_on_a_colour_terminal_only_gpuledgers_own_styles_are_escape_codes(
    command: str, hostile_run: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """FORCE_COLOR makes rich emit its styles (SGR ``ESC [ … m``) as on a real terminal: those may be
    there; the label's clear-screen, window title, C1 CSI and bidi override may not."""
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("NO_COLOR", raising=False)
    from gpuledger.cli import common

    monkeypatch.setattr(common, "console", make_console())
    monkeypatch.setattr(common, "err_console", make_console(stderr=True))
    for module in ("store_cmds", "report_cmd", "cost_cmds", "cost_render", "bench_render"):
        mod = __import__(f"gpuledger.cli.{module}", fromlist=["console"])
        monkeypatch.setattr(mod, "console", common.console, raising=False)
        monkeypatch.setattr(mod, "err_console", common.err_console, raising=False)
    assert main(COMMANDS[command](hostile_run)) == 0
    captured = capsys.readouterr()
    for stream in (captured.out, captured.err):
        without_own = RICH_OWN.sub("", stream)
        assert RAW_CONTROL.search(without_own) is None, repr(without_own[:2000])
        assert "\x1b[2J" not in stream and "\x1b]0;" not in stream and "\x07" not in stream


MARKUP = "lab[/red][link=https://evil.example]click here[/link]"


@pytest.mark.parametrize("command", list(COMMANDS))
def test_markup_in_a_label_neither_crashes_a_command_nor_makes_a_hyperlink(
    command: str, golden_db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A label is interpolated into rich markup strings: "[/red]" used to raise MarkupError (exit 70 in
    `cost` and `estimate`), and a [link=…] tag would write an OSC 8 hyperlink to a colour terminal."""
    run = _import_with(golden_db, tmp_path, capsys, label=MARKUP, model=f"m{MARKUP}")
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")
    for module in ("common", "store_cmds", "report_cmd", "cost_cmds", "cost_render", "bench_render"):
        mod = __import__(f"gpuledger.cli.{module}", fromlist=["console"])
        monkeypatch.setattr(mod, "console", make_console(), raising=False)
        monkeypatch.setattr(mod, "err_console", make_console(stderr=True), raising=False)
    assert main(COMMANDS[command](run)) == 0
    captured = capsys.readouterr()
    assert "\x1b]8;" not in captured.out + captured.err


def test_json_keeps_the_label_exact(hostile_run: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", hostile_run, "--json"]) == 0
    out = capsys.readouterr().out
    assert RAW_CONTROL.search(out) is None  # JSON escapes control characters (C1 and bidi too) ...
    doc = json.loads(out)
    assert doc["label"] == HOSTILE and doc["model"] == f"Qwen{HOSTILE}"  # ... and keeps every one


def test_the_markdown_and_html_reports_carry_no_raw_control_characters(
    hostile_run: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    md, html = tmp_path / "r.md", tmp_path / "r.html"
    assert main(["report", hostile_run, "--md", str(md), "--html", str(html)]) == 0
    capsys.readouterr()
    from plotly.offline import get_plotlyjs

    for path in (md, html):
        # plotly.js, inlined as is, holds a PNG signature with control bytes in a JS string: not ours
        text = path.read_text(encoding="utf-8").replace(get_plotlyjs(), "")
        assert RAW_CONTROL.search(text) is None, (path.name, repr(RAW_CONTROL.search(text)))
        assert "lab␛" in text and "0;pwned" in text


def test_a_100kb_label_is_clipped_on_screen_and_complete_in_json(
    golden_db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue: a 100 KB label made `report` print 15 MB in 16 s."""
    monkeypatch.setenv("COLUMNS", "120")
    label = "L" * 100_000
    run = _import_with(golden_db, tmp_path, capsys, label=label, model="m" * 100_000)
    md = tmp_path / "r.md"
    t0 = time.perf_counter()
    assert main(["report", run, "--md", str(md)]) == 0
    elapsed = time.perf_counter() - t0
    out = capsys.readouterr().out
    assert elapsed < 10, elapsed
    assert len(out) < 200_000, len(out)
    assert "more characters; the full value is in --json" in out
    assert len(md.read_text()) < 200_000
    assert main(["show", run, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["label"] == label


def test_the_console_lays_out_a_10mb_value_in_a_table_at_the_cost_of_500_characters() -> None:
    """Why a 10 MB profile name made `cost` take 190 s: rich wrapped the whole string into every table
    cell and title it appeared in (millions of lines of segments). The console clips before layout."""
    import io

    console = make_console()
    console.file = io.StringIO()
    huge = "x" * 10_000_000
    table = Table(title=f"Cost per 1M tokens (profile {huge})")
    table.add_column("profile")
    table.add_column("value")
    table.add_row(huge, Text(huge))
    t0 = time.perf_counter()
    console.print(table)
    console.print(f"profile {huge}")
    elapsed = time.perf_counter() - t0
    out = console.file.getvalue()
    assert elapsed < 2, elapsed
    assert len(out) < 20 * MAX_DISPLAY_CHARS, len(out)
    assert "(10,000,000 more characters" not in out and "9,999,500 more characters" in out


def test_a_profile_with_a_10mb_name_is_refused_at_once_without_echoing_it(
    golden_db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = tmp_path / "big.yaml"
    profile.write_text(f"extends: h200-own\nname: {'x' * 10_000_000}\n")
    t0 = time.perf_counter()
    assert main(["cost", IDS["h200"], "--db", golden_db, "--profile", str(profile), "--no-save"]) == 4
    assert time.perf_counter() - t0 < 5
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err) < 1_000, captured.err[:300]
    assert "larger than 1,000,000 bytes" in captured.err


def test_a_long_profile_description_is_clipped_by_the_console(
    golden_db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = tmp_path / "long.yaml"
    profile.write_text(f"extends: h200-own\ndescription: {'d' * 2_000}\n")
    assert main(["cost", IDS["h200"], "--db", golden_db, "--profile", str(profile), "--no-save"]) == 0
    out = capsys.readouterr().out
    assert "d" * 2_000 not in out and "more characters; the full value is in --json" in out
    assert main(["cost", IDS["h200"], "--db", golden_db, "--profile", str(profile), "--no-save",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["profile"]["description"] == "d" * 2_000


def test_an_error_line_naming_a_hostile_path_is_inert_and_one_line(
    golden_db: str, capsys: pytest.CaptureFixture[str],
) -> None:
    profile = "/nonexistent/\x1b[2J\x1b]0;t\x07\nx.yaml"
    assert main(["cost", IDS["h200"], "--db", golden_db, "--profile", profile, "--no-save"]) == 3
    err = capsys.readouterr().err
    assert RAW_CONTROL.search(err) is None
    assert "␛[2J" in err
    assert len([ln for ln in err.splitlines() if ln.startswith("error:")]) == 1


def test_a_usage_error_echoing_a_hostile_option_is_inert(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "--\x1b[2Jbogus"]) == 2
    err = capsys.readouterr().err
    assert RAW_CONTROL.search(err) is None and "bogus" in err


# ---- a server whose error body is hostile ---------------------------------------------------------


@pytest.fixture
def hostile_server() -> Iterator[str]:
    """A real HTTP server on loopback that answers every request 500 with an escape-laden body."""
    body = f"{{\"error\": {{\"message\": \"model exploded {HOSTILE}\"}}}}"

    async def handler(request: web.Request) -> web.Response:
        return web.Response(status=500, text=body, content_type="application/json")

    import asyncio

    loop = asyncio.new_event_loop()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.run_until_complete(runner.cleanup())
        loop.close()


def test_a_servers_hostile_error_body_reaches_stderr_inert(
    hostile_server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["bench", "--base-url", hostile_server, "--model", "m", "--num-requests", "2",
                 "--no-telemetry", "--no-progress"])
    captured = capsys.readouterr()
    assert code != 0
    assert "model exploded lab␛[2J" in captured.err + captured.out  # the body is shown, inert
    for stream in (captured.out, captured.err):
        assert RAW_CONTROL.search(stream) is None, repr(stream[:2000])


def test_neutralise_keeps_newlines_tabs_and_width() -> None:
    text = "a\tb\nc\x1bd\x9be\u202ef"
    safe = neutralise(text)
    assert safe == "a\tb\nc␛d\ufffde\ufffdf" and len(safe) == len(text)
    assert neutralise("plain text") == "plain text"
