"""Engine /metrics: real exposition texts of vLLM, SGLang and llama.cpp parsed into counters, garbage
refused with a reason, and the sliding window turning two scrapes into cost per token and
GPU-seconds per request."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from monitor_helpers import HERE, RECORDED

from gpuledger.engines.server_metrics import normalise_engine_url
from gpuledger.monitor import EngineCounters, EngineMetricsError, EngineWindow, parse_engine_metrics
from gpuledger.monitor.engine import EnginePoint


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def test_vllm_032_real_recording_gives_the_tokens_and_requests_the_recorder_sent() -> None:
    # SOURCES.md: three requests, usage 5+14+24 prompt and 16+32+24 completion tokens.
    c = parse_engine_metrics(_read(RECORDED / "vllm-0.32.0.metrics.txt"))
    assert c.kind == "vllm"
    assert (c.prompt_tokens, c.output_tokens, c.requests) == (43.0, 72.0, 3.0)
    assert c.e2e_count == 3.0
    assert c.e2e_sum_s == pytest.approx(0.9510617256164551)
    assert c.models == ("tiny-llama",)


def test_vllm_043_v0_engine_scrape_parses(fixtures_dir: Path) -> None:
    c = parse_engine_metrics(_read(fixtures_dir / "servers/vllm/datadog-metrics-v0.4.3-opt-125m.txt"))
    assert (c.kind, c.prompt_tokens, c.output_tokens, c.requests) == ("vllm", 5.0, 7.0, 1.0)
    assert c.e2e_sum_s == pytest.approx(0.5034303665161133)
    assert c.models == ("facebook/opt-125m",)


def test_llamacpp_metrics_give_tokens_and_say_there_is_no_request_counter(fixtures_dir: Path) -> None:
    c = parse_engine_metrics(_read(fixtures_dir / "servers/llamacpp/ik-llama-cpp-pr695-metrics.txt"))
    assert (c.kind, c.prompt_tokens, c.output_tokens) == ("llamacpp", 6886.0, 3469.0)
    assert c.requests is None
    assert c.requests_reason is not None and "no finished-request counter" in c.requests_reason
    assert c.e2e_sum_s is None


def test_sglang_without_num_requests_counts_requests_from_the_e2e_histogram() -> None:
    c = parse_engine_metrics(_read(HERE / "fixtures" / "sglang-docs-llama-3.1-8b.metrics.txt"))
    assert (c.kind, c.prompt_tokens, c.output_tokens) == ("sglang", 8128902.0, 7557572.0)
    assert c.requests == 11228.0
    assert c.e2e_sum_s == pytest.approx(3.116093850019932e06)
    assert c.models == ("meta-llama/Llama-3.1-8B-Instruct",)


@pytest.mark.parametrize("path", sorted(RECORDED.glob("*.metrics.txt")), ids=lambda p: p.name)
def test_every_recorded_real_server_text_parses_as_its_engine(path: Path) -> None:
    c = parse_engine_metrics(_read(path))
    assert c.kind == path.name.split("-", 1)[0]
    assert c.output_tokens is not None and c.output_tokens > 0
    assert c.prompt_tokens is not None and c.prompt_tokens > 0


@pytest.mark.parametrize(("text", "match"), [
    ("<html><body><h1>502 Bad Gateway</h1></body></html>\n", "not Prometheus exposition text"),
    ('{"object": "error", "message": "Not Found"}', "not Prometheus exposition text"),
    ("# HELP node_load1 1m load average.\n# TYPE node_load1 gauge\nnode_load1 0.21\n",
     "no vLLM, SGLang or llama.cpp token counters"),
    ("", "no vLLM, SGLang or llama.cpp token counters"),
])
def test_garbage_or_a_non_engine_endpoint_is_refused_with_the_reason(text: str, match: str) -> None:
    with pytest.raises(EngineMetricsError, match=match):
        parse_engine_metrics(text)


def test_an_engine_url_without_a_path_gets_metrics() -> None:
    assert normalise_engine_url("http://127.0.0.1:8000") == "http://127.0.0.1:8000/metrics"
    assert normalise_engine_url("http://127.0.0.1:8000/") == "http://127.0.0.1:8000/metrics"
    assert normalise_engine_url("http://h:1/custom/metrics") == "http://h:1/custom/metrics"


# --------------------------------------------------------------------------- sliding window


def counters(prompt: float, output: float, requests: float | None, e2e_sum: float | None = None,
             kind: str = "vllm") -> EngineCounters:
    e2e_count = requests if e2e_sum is not None else None
    return EngineCounters(kind, prompt, output, requests, e2e_sum, e2e_count)  # type: ignore[arg-type]


def point(t: float, c: EngineCounters, cost: float | None, busy: float, devices: int = 2) -> EnginePoint:
    return EnginePoint(t, c, cost, busy, devices)


def test_cost_per_million_tokens_is_the_cost_accrued_over_the_window_per_token() -> None:
    w = EngineWindow(60.0)
    w.add(point(0.0, counters(1000, 4000, 10, 5.0), cost=1.00, busy=0.0))
    w.add(point(30.0, counters(3000, 12000, 30, 25.0), cost=1.03, busy=45.0))
    s = w.stats()
    assert s is not None
    assert s.span_s == 30.0
    # 0.03 USD over 2000 prompt + 8000 output tokens
    assert s.cost_per_million_total() == pytest.approx(0.03 / 10000 * 1e6)
    assert s.cost_per_million_output() == pytest.approx(0.03 / 8000 * 1e6)
    # 2 GPUs x 30 s allocated, 45 busy GPU-seconds, 20 requests
    assert s.device_seconds_per_request() == pytest.approx(60.0 / 20)
    assert s.busy_seconds_per_request() == pytest.approx(45.0 / 20)
    assert s.e2e_mean_s == pytest.approx(20.0 / 20)
    assert s.rate(s.output_tokens) == pytest.approx(8000 / 30)


def test_the_window_keeps_one_point_older_than_its_length_so_it_spans_it() -> None:
    w = EngineWindow(10.0)
    for t in range(0, 31, 5):
        w.add(point(float(t), counters(t, 2 * t, t), cost=t / 100, busy=0.0))
    s = w.stats()
    assert s is not None
    assert s.span_s == 10.0
    assert s.output_tokens == 20.0


def test_no_tokens_or_no_requests_in_the_window_is_a_reason_never_zero_or_infinity() -> None:
    w = EngineWindow(60.0)
    w.add(point(0.0, counters(100, 100, 5), cost=1.0, busy=0.0))
    w.add(point(10.0, counters(100, 100, 5), cost=1.01, busy=0.0))
    s = w.stats()
    assert s is not None
    assert s.cost_per_million_total() is None
    assert s.device_seconds_per_request() is None
    reasons = s.status().reasons
    assert "no tokens in the last 10 s" in reasons["cost_per_million_tokens"]
    assert "no request finished" in reasons["device_seconds_per_request"]


def test_llamacpp_window_has_cost_per_token_but_no_per_request_figure() -> None:
    w = EngineWindow(60.0)
    c1 = EngineCounters("llamacpp", 100, 200, None, None, None, (), "llama.cpp exports no request counter")
    c2 = EngineCounters("llamacpp", 150, 400, None, None, None, (), "llama.cpp exports no request counter")
    w.add(point(0.0, c1, cost=0.0, busy=0.0))
    w.add(point(10.0, c2, cost=0.01, busy=5.0))
    s = w.stats()
    assert s is not None
    assert s.cost_per_million_output() == pytest.approx(0.01 / 200 * 1e6)
    assert s.busy_seconds_per_request() is None
    assert "no request counter" in s.status().reasons["busy_device_seconds_per_request"]


def test_without_a_cost_profile_cost_per_token_is_absent_with_the_reason() -> None:
    w = EngineWindow(60.0)
    w.add(point(0.0, counters(0, 0, 0), cost=None, busy=0.0))
    w.add(point(5.0, counters(10, 10, 1), cost=None, busy=1.0))
    s = w.stats()
    assert s is not None
    assert s.cost_per_million_total() is None
    assert "no cost profile" in s.status().reasons["cost_per_million_tokens"]
    assert s.busy_seconds_per_request() == 1.0


def test_counters_going_backwards_restart_the_window() -> None:
    w = EngineWindow(60.0)
    w.add(point(0.0, counters(500, 500, 50), cost=1.0, busy=0.0))
    w.add(point(5.0, counters(600, 600, 60), cost=1.1, busy=0.0))
    note = w.add(point(10.0, counters(3, 7, 1), cost=1.2, busy=0.0))
    assert note is not None and "went backwards" in note and "restarted" in note
    assert w.stats() is None  # one point since the restart
    w.add(point(15.0, counters(13, 27, 2), cost=1.3, busy=0.0))
    s = w.stats()
    assert s is not None and s.output_tokens == 20.0


@given(st.text(max_size=300))
@settings(max_examples=150, deadline=None)
def test_any_text_either_parses_or_is_refused_with_an_engine_metrics_error(text: str) -> None:
    try:
        parse_engine_metrics(text)
    except EngineMetricsError:
        pass


@given(st.lists(st.sampled_from(_read(RECORDED / "vllm-0.32.0.metrics.txt").splitlines()), max_size=40))
@settings(max_examples=100, deadline=None)
def test_truncated_or_shuffled_real_lines_never_crash_the_parser(lines: list[str]) -> None:
    try:
        parse_engine_metrics("\n".join(lines))
    except EngineMetricsError:
        pass


def test_an_engine_url_with_a_password_is_used_but_never_shown() -> None:
    """`monitor --engine-url http://user:pass@host` (issue 16, item 5): the events, the status document and
    the errors say `user:***@`."""
    import asyncio

    import aiohttp

    from gpuledger.engines.server_metrics import EngineMetricsError, fetch_engine_metrics

    async def refused() -> str:
        async with aiohttp.ClientSession() as session:
            try:
                await fetch_engine_metrics(session, "http://bob:s3cret@127.0.0.1:9/metrics", 1.0)
            except EngineMetricsError as exc:
                return str(exc)
        return ""

    message = asyncio.run(refused())
    assert "s3cret" not in message and "bob:***@127.0.0.1:9" in message
