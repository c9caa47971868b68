"""The server's own view in a report (``RunInfo.server.state``) and where a run's workload came from
(``RunInfo.config.like``): in the built report, in every renderer, and from a real bench of a loopback
server that serves /metrics."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest
import test_report_chromium as chromium
from report_factory import CPU, MI300X, make_run, server_of, server_state, synth_requests
from rich.console import Console

from gpuledger.cli.main import main
from gpuledger.report import ReportData, build_report, render_html, render_markdown, render_terminal
from gpuledger.report.model import Table
from gpuledger.store import Store

SWEEP = (1, 4, 16)
STAGES = [{"stage": f"c={c}", "concurrency": c} for c in SWEEP]
# Readings once a second, 5 s per stage (the stage windows of the sweep requests below): at c=16 the
# server runs 8 at once, keeps 8 waiting, fills its KV cache and starts preempting.
READINGS = [
    (
        t + 0.5,
        *(
            (1.0, 0.0, 0.05, 0.0)
            if t < 5
            else (4.0, 0.0, 0.30, 0.0)
            if t < 10
            else (8.0, 8.0, 0.97, float(t - 10))
        ),
    )
    for t in range(15)
]
STAGE_WINDOWS = [("c=1", 0.0, 5.0), ("c=4", 5.0, 10.0), ("c=16", 10.0, 15.0)]

RUNNING = "running (requests, mean / max)"
WAITING = "waiting (requests, mean / max)"
KV = "KV cache used (%, mean / max)"
PREEMPTIONS = "preemptions (count)"
NOT_EXPORTED = "n/a — not exported by this server"


def _sweep_requests() -> list[Any]:
    reqs: list[Any] = []
    for i, c in enumerate(SWEEP):
        reqs += synth_requests(30, concurrency=c, stage=f"c={c}", first_index=30 * i, start=5.0 * i, seed=i)
    return reqs


def _sweep_run(store: Store, label: str = "mi300x-sweep", **kw: Any) -> str:
    config = {"load": {"kind": "sweep", "stages": STAGES}, "server_metrics": True, **kw.pop("config", {})}
    return make_run(
        store,
        _sweep_requests(),
        label=label,
        devices=(MI300X, CPU),
        stages=STAGES,
        config=config,
        server=kw.pop("server", server_of("vllm", server_state("vllm", READINGS, stages=STAGE_WINDOWS))),
        **kw,
    )


def _table(data: ReportData, section: str, key: str) -> Table:
    return next(t for t in data.section(section).tables if t.key == key)


def _rows(t: Table) -> list[dict[str, str]]:
    return [dict(zip(t.columns, row, strict=True)) for row in t.rows]


# ------------------------------------------------------------------------------------ the section


def test_a_sweep_with_server_state_gets_a_section_after_throughput_with_a_row_per_stage(store: Store) -> None:
    data = build_report(store, [_sweep_run(store)])
    keys = [s.key for s in data.sections]
    assert keys.index("server_state") == keys.index("throughput") + 1
    t = _table(data, "server_state", "server_state")
    assert t.columns == (
        "run", "stage", RUNNING, WAITING, "queue time (ms, mean)", KV, PREEMPTIONS, "scrapes", "source"
    )
    rows = _rows(t)
    assert [r["stage"] for r in rows] == ["all stages", "c=1", "c=4", "c=16"]
    whole, c1, c4, c16 = rows
    assert (c1[RUNNING], c1[WAITING], c1[KV], c1[PREEMPTIONS]) == ("1 / 1", "0 / 0", "5.0 / 5.0", "0")
    assert (c4[RUNNING], c4[KV]) == ("4 / 4", "30.0 / 30.0")
    assert (c16[RUNNING], c16[WAITING], c16[KV], c16[PREEMPTIONS]) == ("8 / 8", "8 / 8", "97.0 / 97.0", "4")
    # the whole window: means over all 15 scrapes, the counter's increase from first to last scrape
    assert (whole[RUNNING], whole[WAITING], whole[KV], whole[PREEMPTIONS]) == (
        "4.33 / 8",
        "2.67 / 8",
        "44.0 / 97.0",
        "4",
    )
    assert [r["scrapes"] for r in rows] == ["15", "5", "5", "5"]
    assert whole["source"] == "vLLM GET http://127.0.0.1:18000/metrics, every 1 s"
    assert "KV cache used = % of the KV cache in use" in t.provenance


def test_the_servers_notes_become_why_lines_below_the_table(store: Store) -> None:
    data = build_report(store, [_sweep_run(store)])
    notes = data.section("server_state").notes
    assert any(
        n.startswith("why: stage c=16: vLLM kept requests waiting in its queue (up to 8") for n in notes
    )
    assert any(n.startswith("why: stage c=16: vLLM's KV cache was full (up to 97%)") for n in notes)
    assert any(n.startswith("why: stage c=16: vLLM preempted sequences 4 times") for n in notes)
    assert not any("c=1:" in n or "c=4:" in n for n in notes)  # nothing to explain at low load


def test_with_several_runs_each_why_line_names_its_run(store: Store) -> None:
    a = make_run(store, synth_requests(40), label="h200-single")
    b = _sweep_run(store)
    data = build_report(store, [a, b])
    notes = data.section("server_state").notes
    assert notes and all(n.startswith("mi300x-sweep — why: ") for n in notes)
    # the run without a state is listed with the reason it has none
    assert data.section("server_state").not_measured == (
        "h200-single server state: made before gpuledger sampled the server's /metrics",
    )


def test_waiting_vs_concurrency_is_drawn_per_stage_with_the_running_peak(store: Store) -> None:
    data = build_report(store, [_sweep_run(store)])
    (fig,) = data.section("server_state").figures
    assert fig.key == "waiting_vs_concurrency" and fig.x_log
    series = {s.name: s for s in fig.series}
    assert list(series) == ["waiting (max)", "waiting (mean)", "running (max)"]
    assert all(s.x == (1.0, 4.0, 16.0) for s in fig.series)
    assert series["waiting (max)"].y == (0.0, 0.0, 8.0)
    assert series["waiting (mean)"].y == (0.0, 0.0, 8.0)
    assert series["running (max)"].y == (1.0, 4.0, 8.0)
    assert fig.x_title == "concurrent requests" and "requests" in fig.y_title


def test_the_html_report_carries_the_figure_with_its_series(store: Store) -> None:
    html = render_html(build_report(store, [make_run(store, synth_requests(30)), _sweep_run(store)]))
    assert '<section id="server_state"><h2>Server state</h2>' in html
    assert 'id="fig-waiting_vs_concurrency"' in html
    payload = re.search(r'<script type="application/json" id="gl-figures">(.*?)</script>', html, re.S)
    assert payload is not None
    figs = {f["id"]: f for f in json.loads(payload.group(1))}
    traces = figs["fig-waiting_vs_concurrency"]["data"]
    assert [t["name"] for t in traces] == [
        "mi300x-sweep — waiting (max)",
        "mi300x-sweep — waiting (mean)",
        "mi300x-sweep — running (max)",
    ]
    assert traces[0]["x"] == [1.0, 4.0, 16.0] and traces[0]["y"] == [0.0, 0.0, 8.0]
    assert [t["line"]["dash"] for t in traces] == ["solid", "dash", "dot"]
    assert figs["fig-waiting_vs_concurrency"]["layout"]["xaxis"]["type"] == "log"


def test_markdown_and_terminal_show_the_table_and_the_why_lines(store: Store) -> None:
    data = build_report(store, [_sweep_run(store)])
    md = render_markdown(data)
    assert "## Server state" in md
    row = (
        "| mi300x-sweep | c=16 | 8 / 8 | 8 / 8 | n/a — not read from the server's /metrics | 97.0 / 97.0 "
        "| 4 | 5 |"
    )
    assert row in md
    assert "- why: stage c=16: vLLM kept requests waiting" in md
    assert "Plots in the HTML report: Waiting requests vs concurrency." in md
    console = Console(record=True, width=300)
    render_terminal(data, console)
    text = console.export_text()
    assert "Server state over the measured window" in text
    assert "why: stage c=16: vLLM's KV cache was full (up to 97%)" in text


def test_a_single_load_level_gets_one_row_and_no_figure(store: Store) -> None:
    readings = [(t + 0.5, 4.0, 0.0, 0.4, None) for t in range(6)]
    run = make_run(
        store,
        synth_requests(40),
        label="sglang",
        server=server_of("sglang", server_state("sglang", readings)),
    )
    data = build_report(store, [run])
    (row,) = _rows(_table(data, "server_state", "server_state"))
    assert (row["stage"], row[RUNNING], row[WAITING], row[KV]) == (
        "whole run",
        "4 / 4",
        "0 / 0",
        "40.0 / 40.0",
    )
    assert row[PREEMPTIONS] == NOT_EXPORTED  # SGLang has no preemption counter
    assert row["source"].startswith("SGLang GET ")
    assert data.section("server_state").figures == ()
    assert data.section("server_state").notes == ()  # no queue, KV cache not full: nothing to explain


def test_a_series_the_server_does_not_export_says_so(store: Store) -> None:
    readings = [(t + 0.5, 1.0, 0.0, None, None) for t in range(4)]  # a llama.cpp build without the KV ratio
    run = make_run(
        store,
        synth_requests(20),
        label="llama",
        server=server_of("llamacpp", server_state("llamacpp", readings)),
    )
    (row,) = _rows(_table(build_report(store, [run]), "server_state", "server_state"))
    assert row[KV] == NOT_EXPORTED and row[PREEMPTIONS] == NOT_EXPORTED and row[RUNNING] == "1 / 1"


def test_a_stage_shorter_than_the_scrape_interval_says_it_had_no_scrape(store: Store) -> None:
    readings = [r for r in READINGS if not 5.0 <= r[0] <= 10.0]  # nothing scraped during c=4
    state = server_state("vllm", readings, stages=STAGE_WINDOWS)
    data = build_report(store, [_sweep_run(store, server=server_of("vllm", state))])
    c4 = next(r for r in _rows(_table(data, "server_state", "server_state")) if r["stage"] == "c=4")
    assert c4[RUNNING] == c4[WAITING] == c4[KV] == c4[PREEMPTIONS] == "n/a — no scrape in this stage"
    assert c4["scrapes"] == "0"
    (fig,) = data.section("server_state").figures
    assert fig.series[0].x == (1.0, 16.0)  # the stage without a reading is not drawn as a zero


def test_failed_scrapes_are_counted_and_their_last_error_named(store: Store) -> None:
    state = server_state("vllm", READINGS, stages=STAGE_WINDOWS, failures=2, last_error="timed out after 5 s")
    data = build_report(store, [_sweep_run(store, server=server_of("vllm", state))])
    whole = _rows(_table(data, "server_state", "server_state"))[0]
    assert whole["scrapes"] == "15 (2 failed)"
    assert (
        "2 of 17 scrapes of /metrics failed (last: timed out after 5 s); means and peaks are over the 15 "
        "that answered" in data.section("server_state").notes
    )


def test_a_run_whose_server_was_not_sampled_shows_the_stored_reason(store: Store) -> None:
    reason = (
        "not sampled: GET http://127.0.0.1:8080/metrics answered HTTP 404 "
        "(llama.cpp serves it with --metrics)"
    )
    run = make_run(store, synth_requests(20), label="llama", server=server_of("llamacpp", {"reason": reason}))
    data = build_report(store, [run])
    section = data.section("server_state")
    assert section.tables == () and section.figures == ()
    assert section.not_measured == (f"llama server state: {reason}",)
    assert f"llama server state: {reason}" in render_markdown(data).replace("\\", "")


def test_no_state_in_any_run_is_one_line_saying_why_and_no_section(store: Store) -> None:
    old = make_run(store, synth_requests(20), label="old")
    data = build_report(store, [old])
    assert "server_state" not in [s.key for s in data.sections]
    lines = [m for m in data.section("throughput").not_measured if m.startswith("server state")]
    assert lines == [
        "server state (the server's own /metrics: requests running and waiting, KV cache, preemptions): "
        "made before gpuledger sampled the server's /metrics"
    ]


def test_the_one_line_names_each_runs_reason_when_they_differ(store: Store) -> None:
    torch_run = make_run(store, synth_requests(10), label="torch-cpu", engine="torch")
    off = make_run(
        store,
        synth_requests(10),
        label="no-metrics",
        config={
            "load": {"kind": "concurrency", "stages": [{"stage": "c=4", "concurrency": 4}]},
            "server_metrics": False,
        },
    )
    ollama = make_run(
        store,
        synth_requests(10),
        label="ollama",
        engine="ollama",
        server=server_of("ollama", None),
        config={"server_metrics": True},
    )
    data = build_report(store, [torch_run, off, ollama])
    (line,) = [m for m in data.section("throughput").not_measured if m.startswith("server state")]
    assert "torch-cpu: torch run: no server, the model ran in-process" in line
    assert "no-metrics: benched without --server-metrics" in line
    assert (
        "ollama: gpuledger reads the scheduler state of vLLM, SGLang, llama.cpp servers; this one is ollama"
        in line
    )


def test_the_state_is_not_repeated_as_environment_rows_and_is_in_the_json_numbers(store: Store) -> None:
    run = _sweep_run(store)
    data = build_report(store, [run])
    env = _table(data, "environment", "environment")
    assert not any(row[0].startswith("server: state") for row in env.rows)
    assert any(row[0] == "engine" for row in env.rows)
    numbers = data.numbers.runs[0]
    assert numbers.server_state == store.get_run(run).server["state"]
    assert numbers.workload_like is None
    assert "workload_like" not in numbers.model_dump(mode="json")


# -------------------------------------------------------------------------------- workload origin


def test_a_like_run_shows_whose_workload_it_ran_and_what_it_overrode(store: Store) -> None:
    a = make_run(store, synth_requests(40), label="h200-vllm")
    b = _sweep_run(store, config={"like": {"run_id": a, "overridden": ["sweep", "num_requests"]}})
    data = build_report(store, [a, b])
    t = _table(data, "how_measured", "provenance")
    assert t.columns[:2] == ("run", "workload")
    rows = {r["run"]: r for r in _rows(t)}
    assert (
        rows["mi300x-sweep"]["workload"]
        == f"workload of h200-vllm (run {a}), overridden: --sweep, --num-requests"
    )
    assert rows["h200-vllm"]["workload"] == "its own; repeated by mi300x-sweep"
    assert "bench --like RUN" in t.provenance
    same = data.section("how_measured").notes
    assert same == (
        f"same workload: mi300x-sweep repeats the workload of h200-vllm (run {a}) with bench --like; "
        "except: mi300x-sweep overrode --sweep, --num-requests",
    )
    like = data.numbers.runs[1].workload_like
    assert like is not None and (like.run_id, like.overridden) == (a, ["sweep", "num_requests"])
    console = Console(record=True, width=300)
    render_terminal(data, console)
    assert "same workload: mi300x-sweep repeats the workload of h200-vllm" in console.export_text()


def test_two_runs_repeating_the_same_stored_run_are_the_same_workload(store: Store) -> None:
    origin = make_run(store, synth_requests(10), label="origin")  # not in the report
    a = make_run(
        store, synth_requests(20), label="box-a", config={"like": {"run_id": origin, "overridden": []}}
    )
    b = make_run(
        store, synth_requests(20), label="box-b", config={"like": {"run_id": origin, "overridden": []}}
    )
    data = build_report(store, [a, b])
    rows = {r["run"]: r for r in _rows(_table(data, "how_measured", "provenance"))}
    assert rows["box-a"]["workload"] == f"workload of run {origin}, nothing overridden"
    assert data.section("how_measured").notes == (
        f"same workload: box-a and box-b all repeat the workload of run {origin} with bench --like; "
        "nothing overridden",
    )


def test_runs_without_like_keep_the_provenance_table_as_it_was(store: Store) -> None:
    data = build_report(store, [make_run(store, synth_requests(10), label="plain")])
    t = _table(data, "how_measured", "provenance")
    assert "workload" not in t.columns and "bench --like" not in t.provenance
    assert data.section("how_measured").notes == ()


# ------------------------------------------------------------------------------ from a real bench

SERVER_FILE = Path(__file__).resolve().parents[1] / "bench" / "stream_server.py"


def _server_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("report_state_stream_server", SERVER_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture()
def metrics_server() -> Iterator[Any]:
    mod = _server_module()
    # vLLM-like /metrics; serves one request at a time, the others wait in its queue
    with mod.StreamServer(mod.Scenario(ttft_s=0.01, itl_s=0.01, tokens=12, metrics=True, capacity=1)) as srv:
        yield srv


def test_a_benched_sweep_against_a_server_with_metrics_reports_its_state_per_stage(
    metrics_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "bench",
            "--engine",
            "openai",
            "--base-url",
            metrics_server.url,
            "--model",
            "test-model",
            "--sweep",
            "1,3",
            "--num-requests",
            "8",
            "--server-metrics",
            "--server-metrics-interval",
            "0.05",
            "--label",
            "queued",
            "--no-telemetry",
            "--no-progress",
            "--json",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    run_id = orjson.loads(out)["id"]
    like_code = main(
        [
            "bench",
            "--like",
            run_id,
            "--base-url",
            metrics_server.url,
            "--model",
            "test-model",
            "--sweep",
            "3",
            "--label",
            "again",
            "--no-telemetry",
            "--no-progress",
            "--json",
        ]
    )
    again = orjson.loads(capsys.readouterr().out)["id"]
    assert like_code == 0
    assert main(["report", run_id, again, "--json"]) == 0
    doc = orjson.loads(capsys.readouterr().out)
    sections = {s["key"]: s for s in doc["sections"]}
    table = sections["server_state"]["tables"][0]
    queued = [r for r in table["rows"] if r[0] == "queued"]
    assert [r[1] for r in queued] == ["all stages", "c=1", "c=3"]
    assert all(r[-1].startswith(f"vLLM GET {metrics_server.url}/metrics") for r in queued)
    assert [f["key"] for f in sections["server_state"]["figures"]] == ["waiting_vs_concurrency"]
    provenance = {r[0]: r[1] for r in sections["how_measured"]["tables"][0]["rows"]}
    assert provenance["again"] == f"workload of queued (run {run_id}), overridden: --sweep"
    assert any(
        n.startswith("same workload: again repeats the workload of queued")
        for n in sections["how_measured"]["notes"]
    )


# --------------------------------------------------------------------------------------- Chromium

browser = chromium.browser


@pytest.mark.chromium
def test_the_waiting_figure_draws_in_chromium(browser: Any, store: Store, tmp_path: Path) -> None:
    data = build_report(store, [_sweep_run(store)])
    path = tmp_path / "state.html"
    path.write_text(render_html(data))
    n = sum(len(s.figures) for s in data.sections)
    page = chromium._assert_report_drew(browser, path, n, tmp_path)
    legend = page.evaluate(
        "Array.from(document.querySelectorAll('#fig-waiting_vs_concurrency .legendtext'))"
        ".map(e => e.textContent)"
    )
    assert legend == ["waiting (max)", "waiting (mean)", "running (max)"]
    page.close()
