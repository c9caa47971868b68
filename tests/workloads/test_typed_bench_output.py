"""What ``gpuledger bench`` prints is read from the run's typed models, not from a dumped dict by key: each
figure on the terminal equals the attribute of the stored run's model it comes from — the text summary
(``TextGenerationSummary`` and its ``Latency``, ``SloOutcome``, ``ReasoningSummary``, ``SessionSummary``
blocks), the server's state over the window (``bench.server_state.ServerState``) and the views of the run's
server, client and workload records (``bench.rundocs``). The renderers (cli/bench_render.py,
cli/bench_workloads.py) read attributes, so mypy holds them to the models' fields: a renamed field is a type
error there, not a "n/a" on the terminal. Every run here is a real bench against a loopback server."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from stream_server import Scenario, StreamServer
from test_workload_reasoning import delta_of, payloads
from test_workload_sessions import conversations
from test_workload_traces import mooncake
from workload_helpers import ReplayServer

from gpuledger.bench.rundocs import ClientView, ServerView, WorkloadView
from gpuledger.bench.server_state import ServerState, StateUnavailable
from gpuledger.cli.main import main
from gpuledger.kinds.text.summary import TextGenerationSummary
from gpuledger.records import RunInfo
from gpuledger.records.itemstats import Latency
from gpuledger.store import open_store


def bench_text(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[str, RunInfo]:
    """``gpuledger bench ARGS`` on the terminal (200 columns: nothing wraps inside a cell), and the run it
    stored."""
    code = main(["bench", "--no-telemetry", "--no-progress", *args])
    out = capsys.readouterr().out
    assert code == 0, out
    run_id = out.strip().splitlines()[-1].removeprefix("run id: ")
    with open_store(None) as store:
        return out, store.get_run(run_id)


def cells(out: str) -> dict[str, list[str]]:
    """Each row of the tables printed: its first cell -> the other cells (the first row of that name)."""
    rows: dict[str, list[str]] = {}
    for line in out.splitlines():
        if line.startswith(("│", "┃")):
            parts = [c.strip() for c in re.split("[│┃]", line)[1:-1]]
            if parts and parts[0]:
                rows.setdefault(parts[0], parts[1:])
    return rows


def text_of(out: str) -> str:
    """The output with its line wrapping and indentation folded to single spaces (paragraphs)."""
    return " ".join(out.split())


def latency_cells(block: Latency) -> list[str]:
    assert block.n > 0 and None not in (block.mean, block.p50, block.p90, block.p99, block.std)
    figures = (block.mean, block.p50, block.p90, block.p99, block.std)
    return [*(f"{v:.2f}" for v in figures), f"{block.n:,}"]


def text_summary(info: RunInfo) -> TextGenerationSummary:
    s = info.summary
    assert isinstance(s, TextGenerationSummary)
    return s


def test_a_sweeps_tables_and_server_state_are_the_stored_models_figures(
    serve: Callable[..., StreamServer], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    srv = serve(Scenario(identity="vllm", itl_s=0.01, metrics=True, capacity=2))
    out, info = bench_text(capsys, "--base-url", srv.url, "--output-len", "20", "--input-len", "8", "--sweep",
                           "2,6", "--num-requests", "6", "--warmup", "0", "--server-metrics", "--slo",
                           "ttft_ms=5000")
    s = text_summary(info)
    rows = cells(out)
    assert rows["requests ok / failed"] == [f"{s.num_ok} / {s.num_failed}"] and s.num_ok == 12
    assert rows["window"] == [f"{s.window_s:.2f} s"]
    assert rows["output tokens"] == [f"{s.output_tokens_total:,}"]
    assert rows["output throughput, every stage together"] == [f"{s.output_tokens_per_s:,.1f} tok/s"]
    assert rows["total throughput (in+out)"] == [f"{s.total_tokens_per_s:,.1f} tok/s"]
    assert rows["requests/s"] == [f"{s.requests_per_s:.3f} req/s"]
    assert s.slo is not None and s.slo.ttft_ms == 5000
    assert rows["goodput (ttft_ms≤5000)"] == [f"{s.goodput_requests_per_s:.3f} req/s  ({s.slo.met} met)"]
    assert rows["token counts from"] == [", ".join(f"{k}: {v}" for k, v in s.token_source.items())]
    for label, block in (("TTFT", s.ttft_ms), ("TPOT", s.tpot_ms), ("ITL (per token)", s.itl_ms),
                         ("E2E", s.e2e_ms)):
        assert rows[label] == latency_cells(block)
    # The server's own view: the typed state the run stored, line by line.
    server = ServerView.of(info.server)
    state = server.state
    assert isinstance(state, ServerState) and state.queued_requests and state.preemptions
    assert server.who() in text_of(out)
    assert (
        f"server state ({state.source}): queue time {state.queue_time_ms_mean:.1f} ms mean over "
        f"{state.queued_requests:g} requests, preemptions {state.preemptions:g}"
    ) in text_of(out)
    assert state.gauges_reason is not None
    assert f"running / waiting / KV cache: {state.gauges_reason}" in text_of(out)
    assert state.notes  # 6 in flight on 2 slots: the c=6 stage queued
    for note in state.notes:
        assert f"why: {note}" in text_of(out)


def test_a_server_that_cannot_be_read_prints_the_stored_reason(
    serve: Callable[..., StreamServer], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    srv = serve(Scenario(identity="vllm", metrics=False))
    out, info = bench_text(capsys, "--base-url", srv.url, "--output-len", "8", "--num-requests", "3",
                           "--warmup", "0", "--server-metrics")
    state = ServerView.of(info.server).state
    assert isinstance(state, StateUnavailable) and "404" in state.reason
    assert f"server state: {state.reason}" in text_of(out)
    client = ClientView.of(info.client)
    user, system, wall = client.cpu_user_s, client.cpu_system_s, client.wall_s
    assert client.cpu_util_ratio is not None and user is not None and system is not None and wall is not None
    assert (
        f"client CPU: {client.cpu_util_ratio:.0%} of one core ({user + system:.2f} s CPU over {wall:.2f} s)"
    ) in text_of(out)


def test_reasoning_and_goodput_in_tokens_are_the_summarys_blocks(
    replay: Callable[..., ReplayServer], fixtures_dir: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    chunks = payloads(fixtures_dir)
    first_answer = next(i for i, p in enumerate(chunks) if delta_of(p).get("content"))
    delays = [0.02 if i == 0 else 0.05 if i == first_answer else 0.001 for i in range(len(chunks))]
    srv = replay(chunks, delays)
    out, info = bench_text(capsys, "--base-url", srv.url, "--model", "deepseek-reasoner", "--endpoint",
                           "chat", "--num-requests", "3", "--concurrency", "1", "--warmup", "0", "--slo",
                           "ttft_ms=5000,tpot_ms=500")
    s = text_summary(info)
    r = s.reasoning
    assert r is not None and r.reasoning_share is not None and s.good_output_tokens_total is not None
    rows = cells(out)
    assert rows["goodput (ttft_ms≤5000, tpot_ms≤500)"] == [
        f"{s.goodput_requests_per_s:.3f} req/s  ({s.slo.met if s.slo else None} met)"
    ]
    assert rows["goodput in tokens"] == [
        f"{s.goodput_output_tokens_per_s:,.1f} tok/s  ({s.good_output_tokens_total:,} output tokens of good "
        "requests)"
    ]
    assert rows["answer tokens"] == [
        f"{s.answer_tokens_per_s:,.1f} tok/s  ({r.answer_tokens_total:,} answer, "
        f"{r.reasoning_tokens_total:,} reasoning, {r.reasoning_share:.0%} of generated)"
    ]
    assert rows["TTFT reasoning"] == latency_cells(r.ttft_reasoning_ms)
    assert rows["TTFT answer"] == latency_cells(r.ttft_answer_ms)


def test_sessions_by_turn_are_the_summarys_turns(
    serve: Callable[..., StreamServer], tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    srv = serve(Scenario(tokens=4))
    out, info = bench_text(capsys, "--base-url", srv.url, "--endpoint", "chat", "--dataset", "jsonl",
                           "--dataset-path", str(conversations(tmp_path)), "--turns", "all",
                           "--concurrency", "2", "--num-requests", "12", "--warmup", "0")
    sessions = text_summary(info).sessions
    assert sessions is not None and sessions.turns_per_session_mean is not None
    assert (
        f"sessions: {sessions.sessions} sessions, {sessions.complete} sent all their turns, "
        f"{sessions.turns_per_session_mean:.1f} turns each on average"
    ) in text_of(out)
    rows = cells(out)
    assert [t.turn for t in sessions.by_turn] == [1, 2, 3]
    for t in sessions.by_turn:
        assert t.ttft_ms.p50 is not None and t.ttft_ms.p99 is not None and t.input_tokens_mean is not None
        assert rows[str(t.turn)] == [f"{t.num_ok} / {t.requests}", f"{t.ttft_ms.p50:.1f}",
                                     f"{t.ttft_ms.p99:.1f}", f"{t.input_tokens_mean:,.0f}"]


def test_a_traces_line_is_its_workload_record_and_the_clients_send_schedule(
    serve: Callable[..., StreamServer], tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    srv = serve(Scenario())
    out, info = bench_text(capsys, "--base-url", srv.url, "--trace", str(mooncake(tmp_path)), "--warmup", "0")
    trace = WorkloadView.of(info.workload).trace
    schedule = ClientView.of(info.client).send_schedule
    assert trace is not None and trace.span_s is not None and trace.arrivals == 40
    assert schedule is not None and schedule.lag_ms.p99 is not None and schedule.lag_ms.max is not None
    assert (
        f"trace: {trace.arrivals:,} arrivals over {trace.span_s:,.1f} s ({trace.format}) replayed at 1x; "
        f"lateness p99 {schedule.lag_ms.p99:.2f} ms, max {schedule.lag_ms.max:.2f} ms"
    ) in text_of(out)


def test_the_reports_provenance_is_the_runs_like_origin_and_client_view(
    serve: Callable[..., StreamServer], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuledger.report import fmt
    from gpuledger.report.build import build_report

    monkeypatch.setenv("COLUMNS", "200")
    srv = serve(Scenario())
    _, base = bench_text(capsys, "--base-url", srv.url, "--output-len", "8", "--num-requests", "4",
                         "--warmup", "0", "--label", "base")
    _, again = bench_text(capsys, "--base-url", srv.url, "--like", base.id, "--concurrency", "2", "--label",
                          "again")
    like = again.config.like
    assert like is not None and like.run_id == base.id and like.overridden == ["concurrency"]
    with open_store(None) as store:
        data = build_report(store, [base.id, again.id])
    section = data.section("how_measured")
    table = next(t for t in section.tables if t.key == "provenance")
    rows = {row[0]: dict(zip(table.columns, row, strict=True)) for row in table.rows}
    assert rows["again"]["workload"] == f"workload of base (run {like.run_id}), overridden: --concurrency"
    assert rows["base"]["workload"] == "its own; repeated by again"
    assert section.notes == (
        f"same workload: again repeats the workload of base (run {base.id}) with bench --like; except: again "
        "overrode --concurrency",
    )
    for name, info in (("base", base), ("again", again)):
        share = ClientView.of(info.client).cpu_share_percent()
        assert share is not None and rows[name]["client CPU (%)"] == fmt.num(share)
