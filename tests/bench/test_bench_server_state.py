"""The server's own view during a bench (``server.state``): read from real /metrics captures, sampled
live from a loopback server, summarised per stage, and turned into the reasons behind the numbers."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from stream_server import Scenario, StreamServer

from gpuledger.bench.server_state import ServerStateSampler, StatePoint, parse_state, summarize_state
from gpuledger.cli.main import main
from gpuledger.monitor.engine import EngineMetricsError

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
    assert p == StatePoint(1.5, running=0.0, waiting=0.0, kv_usage_ratio=0.0, preemptions_total=0.0)


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
    with_kv = parse_state((fixtures_dir / "servers/llamacpp/ik-llama-cpp-pr695-metrics.txt").read_text(),
                          "llamacpp", 0.0)
    assert (with_kv.running, with_kv.waiting, with_kv.kv_usage_ratio) == (0.0, 0.0, pytest.approx(0.491063))
    recorded = next(RECORDED.glob("llamacpp-*.metrics.txt"))
    without = parse_state(recorded.read_text(), "llamacpp", 0.0)
    assert without.running == 0.0 and without.kv_usage_ratio is None


def test_a_page_that_is_not_prometheus_text_is_an_engine_metrics_error() -> None:
    with pytest.raises(EngineMetricsError):
        parse_state('vllm:num_requests_running{model_name="x" 1\n', "vllm", 0.0)


# ------------------------------------------------------------------------------ the summary


def _sampler(points: list[StatePoint], final: StatePoint | None = None) -> ServerStateSampler:
    s = ServerStateSampler("vllm", "http://127.0.0.1:1/metrics", 1.0)
    s.points, s.final = points, final
    return s


def test_queueing_a_full_kv_cache_and_preemptions_are_each_named_as_a_reason() -> None:
    pts = [
        StatePoint(0.0, 2, 0, 0.30, 10),
        StatePoint(1.0, 8, 6, 0.97, 12),
        StatePoint(2.0, 8, 2, 0.99, 15),
    ]
    st = summarize_state(_sampler(pts, final=StatePoint(2.4, 0, 0, 0.0, 16)))
    assert st["running"] == {"mean": 6.0, "max": 8} and st["waiting"] == {"mean": 8 / 3, "max": 6}
    assert st["kv_cache_usage_ratio"]["max"] == 0.99
    assert st["preemptions"] == 6  # 16 at the window's end - 10 at its start
    assert st["scrapes"] == 3 and st["source"] == "vLLM GET http://127.0.0.1:1/metrics"
    notes = "\n".join(st["notes"])
    assert "waiting in its queue (up to 6" in notes and "TTFT includes the queueing time" in notes
    assert "KV cache was full (up to 99%)" in notes
    assert "preempted sequences 6 times" in notes


def test_an_idle_headroom_server_gets_no_reasons() -> None:
    st = summarize_state(_sampler([StatePoint(0.0, 4, 0, 0.2, 0), StatePoint(1.0, 4, 0, 0.25, 0)]))
    assert st["notes"] == [] and st["preemptions"] == 0


def test_a_sweep_is_summarised_per_stage_and_the_reasons_name_the_stage() -> None:
    pts = [StatePoint(0.5, 1, 0, 0.1, 0), StatePoint(1.5, 1, 0, 0.1, 0),
           StatePoint(2.5, 4, 3, 0.5, 0), StatePoint(3.5, 4, 5, 0.6, 0)]
    st = summarize_state(_sampler(pts), [("c=1", 0.0, 2.0), ("c=8", 2.0, 4.0)])
    per_stage = [(b["stage"], b["scrapes"], b["waiting"]["max"]) for b in st["stages"]]
    assert per_stage == [("c=1", 2, 0), ("c=8", 2, 5)]
    assert len(st["notes"]) == 1 and st["notes"][0].startswith("stage c=8: vLLM kept requests waiting")


# ------------------------------------------------------------------------------ live, end to end


def test_a_saturated_server_shows_requests_waiting_and_the_run_says_why(
    serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    srv = serve(Scenario(identity="vllm", itl_s=0.01, metrics=True, capacity=2))
    doc, _ = bench(
        capsys, "--base-url", srv.url, "--output-len", "40", "--input-len", "8", "--num-requests", "12",
        "--concurrency", "6", "--warmup", "0", "--server-metrics-interval", "0.1",
    )
    st = doc["server"]["state"]
    assert st["scrapes"] >= 3 and st["failed_scrapes"] == 0 and srv.metrics_scrapes >= st["scrapes"]
    assert st["running"]["max"] == 2  # the server's capacity, not the client's concurrency
    assert st["waiting"]["max"] >= 1
    assert st["preemptions"] >= 1
    assert any("waiting in its queue" in n for n in st["notes"])
    assert doc["config"]["server_metrics_interval_s"] == 0.1

    code = main(["show", doc["id"]])
    out = capsys.readouterr().out
    assert code == 0 and "server state (vLLM GET" in out and "why: vLLM kept requests waiting" in out


def test_the_human_summary_prints_the_state_and_its_reasons(
    serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    srv = serve(Scenario(identity="llamacpp", itl_s=0.01, metrics=True, capacity=1))
    code = main([
        "bench", "--no-telemetry", "--no-progress", "--base-url", srv.url, "--output-len", "20",
        "--num-requests", "4", "--concurrency", "3", "--warmup", "0", "--server-metrics-interval", "0.1",
    ])
    out = capsys.readouterr().out
    assert code == 0
    assert "server state (llama.cpp GET " in out and "running " in out and "waiting " in out
    assert "why: llama.cpp kept requests waiting in its queue" in out


def test_no_server_metrics_samples_nothing(serve: Serve, capsys: pytest.CaptureFixture[str]) -> None:
    srv = serve(Scenario(identity="vllm", metrics=True))
    doc, _ = bench(capsys, "--base-url", srv.url, "--output-len", "4", "--num-requests", "2",
                   "--no-server-metrics")
    assert "state" not in doc["server"] and srv.metrics_scrapes == 0


def test_a_server_without_metrics_says_why_and_the_run_goes_on(
    serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    srv = serve(Scenario(identity="llamacpp", metrics=False))
    doc, _ = bench(capsys, "--base-url", srv.url, "--output-len", "4", "--num-requests", "2")
    assert doc["status"] == "complete"
    reason = doc["server"]["state"]["reason"]
    assert reason.startswith("not sampled: GET ") and "404" in reason and "--metrics" in reason


def test_servers_without_scheduler_metrics_are_not_asked(
    serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    srv = serve(Scenario(identity="tgi", metrics=True))
    doc, _ = bench(capsys, "--base-url", srv.url, "--output-len", "4", "--num-requests", "2")
    assert "state" not in doc["server"] and srv.metrics_scrapes == 0
