"""The server's own view during a bench (``server.state``): read from real /metrics captures, sampled
live from a loopback server, summarised per stage, and turned into the reasons behind the numbers."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from stream_server import Scenario, StreamServer

from gpuledger.bench.server_state import ServerStateSampler, StateStats, summarize_state
from gpuledger.cli.main import main
from gpuledger.engines.server_metrics import EngineMetricsError, StatePoint, parse_state

Serve = Callable[..., StreamServer]
TESTS = Path(__file__).resolve().parents[1]
RECORDED = TESTS / "bench" / "real" / "recorded"


def bench(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[dict[str, Any], str]:
    code = main(["bench", "--no-telemetry", "--no-progress", "--json", *args])
    out = capsys.readouterr()
    assert code == 0, out.err
    doc: dict[str, Any] = json.loads(out.out)
    return doc, out.err


# ------------------------------------------------------------------------------ real captures


def test_vllm_v1_series_are_read_from_a_real_vllm_0_32_metrics_page() -> None:
    p = parse_state((RECORDED / "vllm-0.32.0.metrics.txt").read_text(), "vllm", 1.5)
    assert (p.t, p.running, p.waiting, p.kv_usage_ratio, p.preemptions_total) == (1.5, 0.0, 0.0, 0.0, 0.0)
    # The queue-time histogram of the 3 requests that page had served.
    assert p.queue_count == 3.0 and p.queue_seconds_sum == pytest.approx(0.000185358, rel=1e-6)


def test_vllm_v0_names_the_kv_cache_gpu_cache_usage_perc(fixtures_dir: Path) -> None:
    text = (fixtures_dir / "servers/vllm/datadog-metrics-v0.4.3-opt-125m.txt").read_text()
    p = parse_state(text, "vllm", 0.0)
    assert p.running == 0.0 and p.waiting == 0.0 and p.kv_usage_ratio == 0.0
    assert p.preemptions_total is not None


def test_sglang_running_queue_and_token_usage_come_from_its_documented_page() -> None:
    text = (TESTS / "monitor/fixtures/sglang-docs-llama-3.1-8b.metrics.txt").read_text()
    p = parse_state(text, "sglang", 0.0)
    assert (p.running, p.waiting, p.kv_usage_ratio, p.preemptions_total) == (162.0, 2826.0, 0.28, None)


def test_llamacpp_builds_with_and_without_the_kv_cache_ratio(fixtures_dir: Path) -> None:
    with_kv = parse_state(
        (fixtures_dir / "servers/llamacpp/ik-llama-cpp-pr695-metrics.txt").read_text(), "llamacpp", 0.0
    )
    assert (with_kv.running, with_kv.waiting, with_kv.kv_usage_ratio) == (0.0, 0.0, pytest.approx(0.491063))
    recorded = next(RECORDED.glob("llamacpp-*.metrics.txt"))
    without = parse_state(recorded.read_text(), "llamacpp", 0.0)
    assert without.running == 0.0 and without.kv_usage_ratio is None


def test_a_page_that_is_not_prometheus_text_is_an_engine_metrics_error() -> None:
    with pytest.raises(EngineMetricsError):
        parse_state('vllm:num_requests_running{model_name="x" 1\n', "vllm", 0.0)


# ------------------------------------------------------------------------------ the summary


def _sampler(
    points: list[StatePoint], edges: list[StatePoint], interval: float | None = 1.0
) -> ServerStateSampler:
    s = ServerStateSampler("vllm", "http://127.0.0.1:1/metrics", interval)
    s.points, s.edges = points, edges
    return s


def edge(t: float, preemptions: float, queue_s: float, queued: float) -> StatePoint:
    return StatePoint(t, 0, 0, 0.0, preemptions, queue_s, queued)


def test_the_counters_come_from_the_idle_edges_and_name_queueing_and_preemptions() -> None:
    st = summarize_state(_sampler([], [edge(0.0, 10, 1.0, 4), edge(9.0, 16, 4.0, 24)], interval=None))
    assert st.preemptions == 6 and st.queued_requests == 20
    assert st.queue_time_ms_mean == pytest.approx(150.0)  # (4.0 - 1.0) s over 20 requests
    assert st.running is None and st.gauges_reason is not None
    assert "not sampled during the window" in st.gauges_reason
    assert st.edges == 2 and st.scrapes == 0 and st.source == "vLLM GET http://127.0.0.1:1/metrics"
    notes = "\n".join(st.notes)
    assert "requests waited 150 ms on average in vLLM's queue" in notes and "not prefill" in notes
    assert "preempted sequences 6 times" in notes


def test_sampled_gauges_show_queueing_and_a_full_kv_cache() -> None:
    pts = [StatePoint(0.0, 2, 0, 0.30, 10), StatePoint(1.0, 8, 6, 0.97, 12), StatePoint(2.0, 8, 2, 0.99, 15)]
    st = summarize_state(_sampler(pts, [edge(0.0, 10, 0, 0), edge(2.5, 10, 0.0, 12)]))
    assert st.running == StateStats(mean=6.0, max=8) and st.waiting == StateStats(mean=8 / 3, max=6)
    assert st.kv_cache_usage_ratio is not None and st.kv_cache_usage_ratio.max == 0.99
    assert "gauges_reason" not in st.model_dump(mode="json")  # sampled: the stored state says no reason
    notes = "\n".join(st.notes)
    assert "waiting in its queue (up to 6" in notes and "KV cache was full (up to 99%)" in notes
    assert "queue before it began" not in notes  # 0 ms of queue time by the histogram


def test_an_idle_headroom_server_gets_no_reasons() -> None:
    st = summarize_state(
        _sampler([StatePoint(0.0, 4, 0, 0.2, 0)], [edge(0, 0, 0.0, 0), edge(1, 0, 0.004, 8)])
    )
    assert st.notes == [] and st.preemptions == 0 and st.queue_time_ms_mean == pytest.approx(0.5)


def test_a_sweep_is_summarised_per_stage_between_its_edges() -> None:
    pts = [
        StatePoint(0.5, 1, 0, 0.1, 0),
        StatePoint(1.5, 1, 0, 0.1, 0),
        StatePoint(2.5, 4, 3, 0.5, 0),
        StatePoint(3.5, 4, 5, 0.6, 0),
    ]
    edges = [edge(0.0, 0, 0.0, 0), edge(2.0, 0, 0.01, 10), edge(4.0, 0, 3.01, 20)]
    st = summarize_state(_sampler(pts, edges), [("c=1", 0.0, 2.0), ("c=8", 2.0, 4.0)])
    per_stage = [
        (b.stage, b.scrapes, b.waiting.max if b.waiting else None, b.queue_time_ms_mean)
        for b in st.stages or []
    ]
    assert per_stage == [("c=1", 2, 0, pytest.approx(1.0)), ("c=8", 2, 5, pytest.approx(300.0))]
    assert all(n.startswith("stage c=8: ") for n in st.notes) and len(st.notes) == 2


def test_a_failed_edge_read_leaves_the_per_stage_counters_unknown_not_wrong() -> None:
    edges = [edge(0.0, 0, 0.0, 0), edge(4.0, 3, 1.0, 20)]  # the read between the stages failed
    st = summarize_state(_sampler([], edges, None), [("c=1", 0.0, 2.0), ("c=8", 2.0, 4.0)])
    assert [b.preemptions for b in st.stages or []] == [None, None] and st.preemptions == 3


# ------------------------------------------------------------------------------ live, end to end


def test_the_server_is_read_only_where_it_is_idle_and_queueing_is_named(
    serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    srv = serve(Scenario(identity="vllm", itl_s=0.01, metrics=True, capacity=2))
    doc, _ = bench(
        capsys,
        "--base-url",
        srv.url,
        "--output-len",
        "20",
        "--input-len",
        "8",
        "--sweep",
        "2,6",
        "--num-requests",
        "6",
        "--warmup",
        "0",
        "--server-metrics",
    )
    st = doc["server"]["state"]
    assert (
        srv.metrics_scrapes == 3 and st["edges"] == 3
    )  # before the window, after each stage; none under load
    assert st["scrapes"] == 0 and st["interval_s"] is None and st["running"] is None
    c2, c6 = st["stages"]
    assert c2["queue_time_ms_mean"] == pytest.approx(0.0, abs=2.0) and c2["preemptions"] == 0
    assert c6["queue_time_ms_mean"] > 20 and c6["preemptions"] >= 1  # 6 in flight, 2 slots
    assert any(n.startswith("stage c=6: requests waited") for n in st["notes"])

    code = main(["show", doc["id"]])
    out = capsys.readouterr().out
    assert code == 0 and "server state (vLLM GET" in out and "why: stage c=6: requests waited" in out


def test_an_interval_samples_the_gauges_during_the_load(
    serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    srv = serve(Scenario(identity="vllm", itl_s=0.01, metrics=True, capacity=2))
    doc, _ = bench(
        capsys,
        "--base-url",
        srv.url,
        "--output-len",
        "40",
        "--input-len",
        "8",
        "--num-requests",
        "12",
        "--concurrency",
        "6",
        "--warmup",
        "0",
        "--server-metrics",
        "--server-metrics-interval",
        "0.1",
    )
    st = doc["server"]["state"]
    assert st["scrapes"] >= 3 and st["failed_scrapes"] == 0 and srv.metrics_scrapes == st["scrapes"] + 2
    assert st["running"]["max"] == 2  # the server's capacity, not the client's concurrency
    assert st["waiting"]["max"] >= 1 and st["preemptions"] >= 1
    assert any("waiting in its queue" in n for n in st["notes"])
    assert doc["config"]["server_metrics_interval_s"] == 0.1


def test_the_human_summary_prints_the_state_and_its_reasons(
    serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    srv = serve(Scenario(identity="llamacpp", itl_s=0.01, metrics=True, capacity=1))
    code = main(
        [
            "bench",
            "--no-telemetry",
            "--no-progress",
            "--base-url",
            srv.url,
            "--output-len",
            "20",
            "--num-requests",
            "4",
            "--concurrency",
            "3",
            "--warmup",
            "0",
            "--server-metrics",
            "--server-metrics",
            "--server-metrics-interval",
            "0.1",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "server state (llama.cpp GET " in out and "queue time n/a" in out
    assert "during the window (every 0.1 s" in out and "running " in out and "waiting " in out
    assert "why: llama.cpp kept requests waiting in its queue" in out


def test_without_the_flag_the_server_is_not_read(serve: Serve, capsys: pytest.CaptureFixture[str]) -> None:
    srv = serve(Scenario(identity="vllm", metrics=True))
    doc, _ = bench(capsys, "--base-url", srv.url, "--output-len", "4", "--num-requests", "2")
    assert "state" not in doc["server"] and srv.metrics_scrapes == 0


def test_no_server_metrics_samples_nothing(serve: Serve, capsys: pytest.CaptureFixture[str]) -> None:
    srv = serve(Scenario(identity="vllm", metrics=True))
    doc, _ = bench(
        capsys, "--base-url", srv.url, "--output-len", "4", "--num-requests", "2", "--no-server-metrics"
    )
    assert "state" not in doc["server"] and srv.metrics_scrapes == 0


def test_a_server_without_metrics_says_why_and_the_run_goes_on(
    serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    srv = serve(Scenario(identity="llamacpp", metrics=False))
    doc, _ = bench(
        capsys, "--base-url", srv.url, "--output-len", "4", "--num-requests", "2", "--server-metrics"
    )
    assert doc["status"] == "complete"
    reason = doc["server"]["state"]["reason"]
    assert reason.startswith("not sampled: GET ") and "404" in reason and "--metrics" in reason


def test_servers_without_scheduler_metrics_are_not_asked(
    serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    srv = serve(Scenario(identity="tgi", metrics=True))
    doc, _ = bench(
        capsys, "--base-url", srv.url, "--output-len", "4", "--num-requests", "2", "--server-metrics"
    )
    assert "state" not in doc["server"] and srv.metrics_scrapes == 0
