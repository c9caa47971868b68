"""Metric definitions (docs/design.md) as pure functions over request timestamps."""

from __future__ import annotations

import math
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuledger.bench.metrics import (
    e2e_s,
    itl_s,
    meets_slo,
    parse_slo,
    percentile,
    stats,
    summarize,
    tpot_s,
    ttft_s,
)
from gpuledger.errors import UsageError
from gpuledger.records import RequestRecord, dump_summary

LATENCY_KEYS = {"mean", "p50", "p90", "p95", "p99", "std", "min", "max", "n"}


def req(
    index: int = 0,
    t_send: float = 0.0,
    times: list[float] | None = None,
    out: int | None = None,
    k: list[int] | None = None,
    error: str | None = None,
    inp: int | None = 10,
    **kw: object,
) -> RequestRecord:
    times = times or []
    return RequestRecord(
        index=index,
        t_send=t_send,
        t_first=times[0] if times else None,
        t_end=(times[-1] + 0.001) if times else t_send + 0.5,
        chunk_times=times,
        chunk_tokens=k,
        input_tokens=inp,
        output_tokens=out if out is not None else len(times),
        error=error,
        **kw,  # type: ignore[arg-type]
    )


def test_ttft_is_first_content_token_minus_send() -> None:
    assert ttft_s(req(t_send=1.0, times=[1.25, 1.5])) == pytest.approx(0.25)
    assert ttft_s(req(times=[])) is None


def test_e2e_is_last_token_minus_send_not_the_stream_end() -> None:
    r = req(t_send=1.0, times=[1.2, 1.4, 1.9])
    r.t_end = 2.5  # [DONE] and usage arrived later: not a token
    assert e2e_s(r) == pytest.approx(0.9)


def test_tpot_is_decode_time_over_output_tokens_minus_one() -> None:
    # 5 tokens: first at 0.2, last at 1.0 -> (1.0 - 0.2) / 4
    r = req(times=[0.2, 0.4, 0.6, 0.8, 1.0])
    assert tpot_s(r) == pytest.approx(0.2)
    # Server usage says 9 tokens arrived in those 5 chunks: TPOT uses the token count.
    r.output_tokens = 9
    assert tpot_s(r) == pytest.approx(0.1)
    assert tpot_s(req(times=[0.3])) is None  # a single token has no TPOT


def test_itl_counts_a_chunk_of_k_tokens_as_k_gaps_of_gap_over_k() -> None:
    r = req(times=[1.0, 1.1, 1.4, 1.5], k=[1, 1, 3, 1], out=6)
    assert itl_s(r) == pytest.approx([0.1, 0.1, 0.1, 0.1, 0.1])
    # Without chunk sizes every chunk is one token.
    assert itl_s(req(times=[1.0, 1.1, 1.4])) == pytest.approx([0.1, 0.3])
    assert itl_s(req(times=[1.0])) == []


def test_itl_mean_equals_tpot_when_every_token_is_in_a_chunk() -> None:
    r = req(times=[0.1, 0.15, 0.3, 0.31, 0.5], k=[1, 1, 2, 1, 3], out=8)
    values = itl_s(r)
    assert len(values) == 8 - 1
    assert sum(values) / len(values) == pytest.approx(tpot_s(r))  # type: ignore[arg-type]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False), min_size=2, max_size=200),
    st.sampled_from([1, 25, 50, 90, 95, 99]),
)
def test_percentiles_interpolate_linearly_between_order_statistics(values: list[float], q: int) -> None:
    # statistics' "inclusive" method is numpy's default linear interpolation.
    expected = statistics.quantiles(values, n=100, method="inclusive")[q - 1]
    assert percentile(sorted(values), q) == pytest.approx(expected, rel=1e-9, abs=1e-6)


def test_percentile_ends_are_min_and_max() -> None:
    assert percentile([3.0], 50) == 3.0
    assert percentile([1.0, 2.0, 9.0], 0) == 1.0 and percentile([1.0, 2.0, 9.0], 100) == 9.0


def test_stats_block_has_every_key_and_population_std() -> None:
    s = stats([1.0, 2.0, 3.0, 4.0])
    assert set(s.model_dump(exclude_unset=True)) == LATENCY_KEYS  # every key is written
    assert s.mean == 2.5 and s.p50 == 2.5 and s.min == 1.0 and s.max == 4.0 and s.n == 4
    assert s.std == pytest.approx(math.sqrt(1.25))
    empty = stats([])
    assert set(empty.model_dump(exclude_unset=True)) == LATENCY_KEYS
    assert empty.n == 0 and empty.mean is None


def test_summary_window_throughput_and_error_rate() -> None:
    recs = [
        req(0, t_send=0.0, times=[0.1, 0.2, 0.3], inp=5),
        req(1, t_send=0.5, times=[0.7, 0.9, 1.1, 1.3, 1.5], inp=7),
        req(2, t_send=1.0, error="HTTP 500: boom", times=[]),
    ]
    recs[1].t_end = 2.0  # the last finish closes the window
    s = summarize(recs)
    assert s.window_s == pytest.approx(2.0)
    assert s.num_requests == 3 and s.num_ok == 2 and s.num_failed == 1
    assert s.error_rate == pytest.approx(1 / 3)
    assert s.output_tokens_total == 8 and s.input_tokens_total == 12
    assert s.output_tokens_per_s == pytest.approx(4.0)
    assert s.total_tokens_per_s == pytest.approx(10.0)
    assert s.requests_per_s == pytest.approx(1.0)
    assert s.ttft_ms.n == 2 and s.ttft_ms.mean == pytest.approx(150.0)
    doc = dump_summary(s)
    assert doc["errors"] == {"HTTP 500": 1}
    assert doc["error_examples"] == [{"index": 2, "error": "HTTP 500: boom"}]
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        assert set(doc[key]) == LATENCY_KEYS


def test_goodput_counts_requests_meeting_every_slo_over_the_window() -> None:
    fast = req(0, t_send=0.0, times=[0.1, 0.11, 0.12])  # ttft 100 ms, tpot 10 ms
    slow_first = req(1, t_send=0.0, times=[0.6, 0.61, 0.62])  # ttft 600 ms
    slow_decode = req(2, t_send=0.0, times=[0.1, 0.5, 0.9])  # tpot 400 ms
    failed = req(3, t_send=0.0, error="timeout: x")
    recs = [fast, slow_first, slow_decode, failed]
    slo = parse_slo("ttft_ms=500,tpot_ms=50")
    assert [meets_slo(r, slo) for r in recs] == [True, False, False, False]
    s = summarize(recs, slo=slo)
    assert s.slo is not None and s.slo.met == 1
    assert s.goodput_requests_per_s == pytest.approx(1 / s.window_s)
    without = summarize(recs)
    assert without.slo is None and without.goodput_requests_per_s is None
    assert "goodput_requests_per_s" not in dump_summary(without)


def test_single_token_request_cannot_break_a_tpot_limit() -> None:
    assert meets_slo(req(times=[0.1]), {"tpot_ms": 1.0})


@pytest.mark.parametrize("text", ["ttft=5", "ttft_ms", "ttft_ms=abc", "tpot_ms=-1", "foo_ms=3", "e2e_ms=nan"])
def test_bad_slo_text_is_a_usage_error(text: str) -> None:
    with pytest.raises(UsageError):
        parse_slo(text)


def test_token_sources_and_output_length_mismatch_are_reported() -> None:
    a = req(0, times=[0.1, 0.2], requested_output_tokens=2, token_source="server_usage")
    b = req(1, times=[0.1, 0.2, 0.3], requested_output_tokens=5, token_source="server_usage")
    c = req(2, times=[0.1], token_source="client_count")
    s = summarize([a, b, c])
    assert s.token_source == {"server_usage": 2, "client_count": 1}
    mm = s.output_len_mismatch
    assert mm.checked == 2 and mm.count == 1
    assert mm.requested_tokens_total == 7 and mm.received_tokens_total == 5
    assert dump_summary(s)["output_len_mismatch"]["examples"] == [{"index": 1, "requested": 5, "received": 3}]


def test_sweep_stages_get_their_own_summaries_in_order() -> None:
    recs = [
        req(0, times=[0.1, 0.2], stage="c=1"),
        req(1, t_send=1.0, times=[1.1, 1.2], stage="c=4"),
        req(2, t_send=1.0, times=[1.1, 1.3], stage="c=4"),
    ]
    s = summarize(recs, stages=[{"stage": "c=1", "concurrency": 1}, {"stage": "c=4", "concurrency": 4}])
    assert s.stages is not None
    assert [x.stage for x in s.stages] == ["c=1", "c=4"]
    assert [x.num_requests for x in s.stages] == [1, 2]
    assert s.stages[1].concurrency == 4
    assert s.stages[0].stages is None
    assert "stages" not in dump_summary(s)["stages"][0]


def test_server_timings_are_compared_with_client_timings() -> None:
    r = req(0, t_send=0.0, times=[0.05, 0.15, 0.25], out=3)
    r.server_timings = {
        "server": "ollama",
        "load_ms": 10.0,
        "prefill_ms": 30.0,
        "decode_ms": 200.0,
        "decode_tokens": 3,
        "total_ms": 245.0,
    }
    s = summarize([r]).server_timings
    assert s is not None
    assert s.n == 1 and s.servers == ["ollama"]
    assert s.server_time_to_first_token_ms_mean == pytest.approx(40.0)
    assert s.client_ttft_ms_mean == pytest.approx(50.0)
    assert s.ttft_client_minus_server_ms == pytest.approx(10.0)
    assert s.server_decode_tokens_per_s_mean == pytest.approx(15.0)
    assert s.client_decode_tokens_per_s_mean == pytest.approx(10.0)


def test_no_requests_gives_an_empty_but_complete_summary() -> None:
    s = summarize([])
    assert s.num_requests == 0 and s.window_s == 0.0
    assert s.output_tokens_per_s is None and s.error_rate is None
    doc = dump_summary(s)  # complete: the stored document names what was not measured
    assert doc["num_requests"] == 0 and doc["window_s"] == 0.0
    assert doc["output_tokens_per_s"] is None and doc["error_rate"] is None
