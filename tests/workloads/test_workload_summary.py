"""What the workloads add to the text-generation summary, computed by ``summarize`` from stored requests:
goodput in tokens (the unit ``good_output_token``), and the server's prefix-cache hit ratio from SGLang's
counters (the names of its documented /metrics page)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuledger.bench.metrics import summarize
from gpuledger.bench.server_state import ServerStateSampler, summarize_state
from gpuledger.engines.server_metrics import parse_state
from gpuledger.records import RequestRecord


def request(i: int, ttft: float, out: int) -> RequestRecord:
    """A finished request sent at i seconds: first token after ``ttft`` s, then 10 ms a token."""
    times = [i + ttft + 0.01 * k for k in range(out)]
    return RequestRecord(index=i, t_send=float(i), t_first=times[0], t_end=times[-1], chunk_times=times,
                         input_tokens=10, output_tokens=out, token_source="server_usage")


def test_goodput_in_tokens_is_the_output_of_the_requests_that_met_every_slo_over_the_window() -> None:
    records = [request(0, 0.1, 20), request(1, 0.9, 30), request(2, 0.2, 40)]  # the second breaks ttft
    s = summarize(records, slo={"ttft_ms": 500.0})
    assert s.slo is not None and s.slo.met == 2
    assert s.good_output_tokens_total == 60
    assert s.goodput_output_tokens_per_s == pytest.approx(60 / s.window_s)
    work = s.work()
    assert work["good_output_token"].count == 60
    assert "good_output_token" in s.price_units() and "answer_token" not in s.price_units()
    assert ("good_output_token", "goodput_output_tokens_per_s") in s.rate_keys()
    faster = s.with_window(2.0)
    assert faster.goodput_output_tokens_per_s == pytest.approx(2 * (s.goodput_output_tokens_per_s or 0))


def test_a_run_without_slos_or_reasoning_has_none_of_the_new_fields() -> None:
    s = summarize([request(0, 0.1, 20), request(1, 0.2, 30)])
    dumped = s.to_dict()
    for key in ("good_output_tokens_total", "goodput_output_tokens_per_s", "answer_tokens_total",
                "answer_tokens_per_s", "reasoning", "sessions"):
        assert key not in dumped
    assert "good_output_token" not in s.work() and s.rate_keys() == [
        ("output_token", "output_tokens_per_s"), ("input_token", "input_tokens_per_s"),
        ("token", "total_tokens_per_s"), ("request", "requests_per_s"),
        ("good_request", "goodput_requests_per_s"),
    ]
    assert "answer_tokens_per_s" not in s.with_window(2.0).to_dict()


def test_sglang_counts_prompt_tokens_and_those_its_cache_served() -> None:
    # SGLang's docs/references/production_metrics.md: sglang:prompt_tokens_total (counter) and
    # sglang:cached_tokens_total (counter, by cache_source: device/host/storage).
    def page(prompt: float, device: float, host: float) -> str:
        return "\n".join([
            "# HELP sglang:prompt_tokens_total Number of prefill tokens processed.",
            "# TYPE sglang:prompt_tokens_total counter",
            f'sglang:prompt_tokens_total{{model_name="m"}} {prompt}',
            "# HELP sglang:cached_tokens_total Number of cached prompt tokens.",
            "# TYPE sglang:cached_tokens_total counter",
            f'sglang:cached_tokens_total{{cache_source="device",model_name="m"}} {device}',
            f'sglang:cached_tokens_total{{cache_source="host",model_name="m"}} {host}',
            "# HELP sglang:num_running_reqs The number of running requests.",
            "# TYPE sglang:num_running_reqs gauge",
            'sglang:num_running_reqs{model_name="m"} 0.0',
            "",
        ])

    before = parse_state(page(1000.0, 100.0, 0.0), "sglang", 0.0)
    after = parse_state(page(5000.0, 2100.0, 1000.0), "sglang", 1.0)
    state = summarize_state(ServerStateSampler("sglang", "http://127.0.0.1:9/metrics", edges=[before, after]))
    assert state.prefix_cache_hit_ratio == 3000.0 / 4000.0


def test_sglangs_older_page_without_cached_tokens_gives_no_ratio() -> None:
    page = Path(__file__).resolve().parents[1] / "monitor/fixtures/sglang-docs-llama-3.1-8b.metrics.txt"
    text = page.read_text()
    edges = [parse_state(text, "sglang", 0.0), parse_state(text, "sglang", 1.0)]
    assert edges[0].prefix_queries is not None and edges[0].prefix_hits is None
    state = summarize_state(ServerStateSampler("sglang", "http://127.0.0.1:9/metrics", edges=edges))
    assert "prefix_cache_hit_ratio" not in state.model_dump(mode="json")  # absent, not null
