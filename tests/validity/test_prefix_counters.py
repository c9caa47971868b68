"""The server's prefix-cache counters (vLLM v1 ``vllm:prefix_cache_queries_total`` /
``vllm:prefix_cache_hits_total``, in prompt tokens) read at the window's idle edges give the share of the
prompt tokens the cache served; the verdict's ``prefix_cache`` check takes it as its figure."""

from __future__ import annotations

from gpuledger.bench.server_state import ServerStateSampler, summarize_state
from gpuledger.engines.server_metrics import parse_state


def exposition(queries: float, hits: float, queue_count: float) -> str:
    """A vLLM v1 /metrics page in its own series names (two engines: label sets are summed)."""
    return "\n".join(
        [
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
            'vllm:num_requests_running{engine="0",model_name="m"} 0.0',
            "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
            "# TYPE vllm:num_requests_waiting gauge",
            'vllm:num_requests_waiting{engine="0",model_name="m"} 0.0',
            "# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of queried tokens.",
            "# TYPE vllm:prefix_cache_queries_total counter",
            f'vllm:prefix_cache_queries_total{{engine="0",model_name="m"}} {queries / 2}',
            f'vllm:prefix_cache_queries_total{{engine="1",model_name="m"}} {queries / 2}',
            "# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.",
            "# TYPE vllm:prefix_cache_hits_total counter",
            f'vllm:prefix_cache_hits_total{{engine="0",model_name="m"}} {hits / 2}',
            f'vllm:prefix_cache_hits_total{{engine="1",model_name="m"}} {hits / 2}',
            "# HELP vllm:request_queue_time_seconds Histogram of time spent in WAITING phase for request.",
            "# TYPE vllm:request_queue_time_seconds histogram",
            f'vllm:request_queue_time_seconds_bucket{{engine="0",le="+Inf",model_name="m"}} {queue_count}',
            f'vllm:request_queue_time_seconds_count{{engine="0",model_name="m"}} {queue_count}',
            f'vllm:request_queue_time_seconds_sum{{engine="0",model_name="m"}} {queue_count * 0.001}',
            "",
        ]
    )


def test_the_prefix_cache_hit_ratio_is_the_counters_increase_between_the_edges() -> None:
    before = parse_state(exposition(1000.0, 200.0, 10.0), "vllm", 0.0)
    after = parse_state(exposition(9000.0, 6200.0, 110.0), "vllm", 5.0)
    assert (before.prefix_queries, before.prefix_hits) == (1000.0, 200.0)
    sampler = ServerStateSampler("vllm", "http://127.0.0.1:9/metrics", edges=[before, after])
    state = summarize_state(sampler)
    assert state.prefix_cache_hit_ratio == 6000.0 / 8000.0
    assert state.queue_time_ms_mean == 1.0


def test_a_server_without_prefix_counters_reports_no_ratio() -> None:
    text = exposition(0.0, 0.0, 1.0).replace("prefix_cache", "other_cache")
    edges = [parse_state(text, "vllm", 0.0), parse_state(text, "vllm", 1.0)]
    state = summarize_state(ServerStateSampler("vllm", "http://127.0.0.1:9/metrics", edges=edges))
    assert "prefix_cache_hit_ratio" not in state.model_dump(mode="json")  # absent, not null
