"""Metrics as pure functions over stored request timestamps (docs/design.md, "Metric definitions").

- TTFT: first content token received − request sent.
- ITL: gaps between successive content chunks, per token (a chunk of k tokens counts k tokens):
  the gap before a chunk of k tokens contributes k values of gap/k.
- TPOT: (E2E − TTFT) / (output_tokens − 1), requests with > 1 output token.
- E2E: last token − request sent.
- Output tok/s: output tokens ÷ wall time of the measured window (first send → last finish).
- Goodput: requests meeting every given SLO ÷ window (and in tokens: their output tokens ÷ window).

Reasoning and answer tokens, goodput in tokens and multi-turn sessions: ``bench.workload_metrics``.

Throughput and latency use the successful requests; failed ones count in ``error_rate``. Latency
blocks (``records.itemstats.Latency``) are in milliseconds with ``mean, p50, p90, p95, p99, std, min, max,
n``; percentiles interpolate linearly between order statistics (numpy's default), ``std`` is the
population std.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from gpuledger.bench.workload_metrics import workload_fields
from gpuledger.errors import UsageError
from gpuledger.kinds.text.summary import (
    LengthExample,
    OutputLengthCheck,
    ServerTimings,
    SloOutcome,
    TextGenerationSummary,
    TextStageSummary,
)
from gpuledger.records import TOKEN_SOURCES, RequestRecord, RunInfo
from gpuledger.records.itemstats import Latency
from gpuledger.records.summary import ErrorExample, RunSummary

SLO_KEYS = ("ttft_ms", "tpot_ms", "e2e_ms")
_MAX_EXAMPLES = 10


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of already sorted values, linear interpolation."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac


def stats(values: Iterable[float]) -> Latency:
    """``Latency`` (mean, p50, p90, p95, p99, std, min, max, n); every figure ``None`` without values."""
    v = sorted(values)
    n = len(v)
    if n == 0:
        return Latency(mean=None, p50=None, p90=None, p95=None, p99=None, std=None, min=None, max=None, n=0)
    mean = math.fsum(v) / n
    var = math.fsum((x - mean) ** 2 for x in v) / n
    return Latency(
        mean=mean,
        p50=percentile(v, 50),
        p90=percentile(v, 90),
        p95=percentile(v, 95),
        p99=percentile(v, 99),
        std=math.sqrt(var),
        min=v[0],
        max=v[-1],
        n=n,
    )


def ttft_s(r: RequestRecord) -> float | None:
    """First content token received − request sent."""
    return None if r.t_first is None else r.t_first - r.t_send


def last_token_time(r: RequestRecord) -> float | None:
    if r.chunk_times:
        return r.chunk_times[-1]
    return r.t_end


def e2e_s(r: RequestRecord) -> float | None:
    """Last token − request sent (the end of the response when no token arrived)."""
    t = last_token_time(r)
    return None if t is None else t - r.t_send


def tpot_s(r: RequestRecord) -> float | None:
    """(E2E − TTFT) / (output_tokens − 1) for requests with more than one output token."""
    out = r.output_tokens
    e2e, first = e2e_s(r), ttft_s(r)
    if out is None or out <= 1 or e2e is None or first is None:
        return None
    return (e2e - first) / (out - 1)


def itl_s(r: RequestRecord) -> list[float]:
    """Per-token inter-token latencies: the gap before a chunk of k tokens counts k times as gap/k."""
    times = r.chunk_times
    if len(times) < 2:
        return []
    ks = r.chunk_tokens
    out: list[float] = []
    if ks is None:
        prev = times[0]
        for t in times[1:]:
            out.append(t - prev)
            prev = t
        return out
    for i in range(1, len(times)):
        k = ks[i] if i < len(ks) else 1
        gap = times[i] - times[i - 1]
        if k <= 1:
            out.append(gap)
        else:
            out.extend([gap / k] * k)
    return out


def parse_slo(text: str | None) -> dict[str, float]:
    """``"ttft_ms=500,tpot_ms=50"`` → ``{"ttft_ms": 500.0, "tpot_ms": 50.0}``; ``UsageError`` otherwise."""
    if not text:
        return {}
    out: dict[str, float] = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        key, sep, val = part.partition("=")
        key = key.strip()
        if not sep or key not in SLO_KEYS:
            raise UsageError(f"--slo: {part!r} is not KEY=VALUE with KEY one of {', '.join(SLO_KEYS)}")
        try:
            v = float(val)
        except ValueError as exc:
            raise UsageError(f"--slo: {key} needs a number of milliseconds, got {val.strip()!r}") from exc
        if not math.isfinite(v) or v <= 0:
            raise UsageError(f"--slo: {key} must be a positive number of milliseconds, got {val.strip()!r}")
        out[key] = v
    return out


def meets_slo(r: RequestRecord, slo: dict[str, float]) -> bool:
    """A successful request meets the SLOs when each given limit holds. A request with a single
    output token has no TPOT, so a TPOT limit cannot be broken by it."""
    if not r.ok:
        return False
    for key, limit in slo.items():
        if key == "ttft_ms":
            v = ttft_s(r)
            if v is None or v * 1e3 > limit:
                return False
        elif key == "e2e_ms":
            v = e2e_s(r)
            if v is None or v * 1e3 > limit:
                return False
        elif key == "tpot_ms":
            v = tpot_s(r)
            if v is not None and v * 1e3 > limit:
                return False
    return True


def _ms(values: Iterable[float | None]) -> list[float]:
    return [v * 1e3 for v in values if v is not None]


def _rate(x: float | int, window: float) -> float | None:
    return x / window if window > 0 else None


def _server_timings(ok: list[RequestRecord]) -> ServerTimings | None:
    """Client timings side by side with the server's own (Ollama's done line, llama.cpp ``timings``)."""
    rows = [r for r in ok if r.server_timings and "server" in r.server_timings]  # the server's own timings
    if not rows:
        return None

    def mean(vals: list[float]) -> float | None:
        return math.fsum(vals) / len(vals) if vals else None

    servers = sorted({str(r.server_timings.get("server", "")) for r in rows if r.server_timings})
    load: list[float] = []
    prefill: list[float] = []
    decode: list[float] = []
    total: list[float] = []
    srv_rate: list[float] = []
    cli_rate: list[float] = []
    ttft: list[float] = []
    cdec: list[float] = []
    e2e: list[float] = []
    srv_first: list[float] = []
    for r in rows:
        st = r.server_timings or {}
        lt = last_token_time(r)
        if r.t_first is not None:
            ttft.append((r.t_first - r.t_send) * 1e3)
        if r.t_first is not None and lt is not None:
            cdec.append((lt - r.t_first) * 1e3)
            if r.output_tokens and r.output_tokens > 1 and lt > r.t_first:
                cli_rate.append((r.output_tokens - 1) / (lt - r.t_first))
        e = e2e_s(r)
        if e is not None:
            e2e.append(e * 1e3)
        if isinstance(st.get("load_ms"), float):
            load.append(st["load_ms"])
        if isinstance(st.get("prefill_ms"), float):
            prefill.append(st["prefill_ms"])
            srv_first.append(
                st["prefill_ms"] + (st["load_ms"] if isinstance(st.get("load_ms"), float) else 0.0)
            )
        if isinstance(st.get("decode_ms"), float):
            decode.append(st["decode_ms"])
            n = st.get("decode_tokens")
            if isinstance(n, int) and n > 0 and st["decode_ms"] > 0:
                srv_rate.append(n / (st["decode_ms"] / 1e3))
        if isinstance(st.get("total_ms"), float):
            total.append(st["total_ms"])
    out: dict[str, Any] = {
        "n": len(rows),
        "servers": servers,
        "client_ttft_ms_mean": mean(ttft),
        "server_load_ms_mean": mean(load),
        "server_prefill_ms_mean": mean(prefill),
        "server_time_to_first_token_ms_mean": mean(srv_first),
        "client_decode_ms_mean": mean(cdec),
        "server_decode_ms_mean": mean(decode),
        "client_e2e_ms_mean": mean(e2e),
        "server_total_ms_mean": mean(total),
        "client_decode_tokens_per_s_mean": mean(cli_rate),
        "server_decode_tokens_per_s_mean": mean(srv_rate),
    }
    a, b = out["client_ttft_ms_mean"], out["server_time_to_first_token_ms_mean"]
    out["ttft_client_minus_server_ms"] = a - b if a is not None and b is not None else None
    a, b = out["client_e2e_ms_mean"], out["server_total_ms_mean"]
    out["e2e_client_minus_server_ms"] = a - b if a is not None and b is not None else None
    return ServerTimings.model_validate(out)


def summarize(
    records: Sequence[RequestRecord],
    *,
    slo: dict[str, float] | None = None,
    stages: Sequence[dict[str, Any]] | None = None,
) -> TextGenerationSummary:
    """The run summary (``kinds.text.summary.TextGenerationSummary``), computed from the requests alone.

    ``stages`` (a sweep): ordered ``{"stage": name, ...params}`` dicts; each gets its own summary of
    the requests whose ``stage`` matches, with the params merged in."""
    fields = _summary_fields(records, slo or {})
    if stages:
        out_stages = []
        for params in stages:
            name = params.get("stage", "")
            sub = [r for r in records if r.stage == name]
            window = _window_bounds(sub)
            bounds = {"window_start_s": window[0], "window_end_s": window[1]} if window else {}
            out_stages.append(TextStageSummary(**params, **_summary_fields(sub, slo or {}), **bounds))
        fields["stages"] = out_stages
    return TextGenerationSummary(**fields)


def _window_bounds(records: Sequence[RequestRecord]) -> tuple[float, float] | None:
    """(first send, last finish) of ``records`` on the run's clock, or None without requests."""
    sends = [r.t_send for r in records]
    ends = [
        e for e in (r.t_end if r.t_end is not None else last_token_time(r) for r in records) if e is not None
    ]
    if not sends or not ends:
        return None
    return min(sends), max(max(ends), min(sends))


def _summary_fields(records: Sequence[RequestRecord], slo: dict[str, float]) -> dict[str, Any]:
    """The fields of a summary of ``records`` (only those that apply are set: absent stays absent)."""
    ok = [r for r in records if r.ok]
    failed = len(records) - len(ok)
    sends = [r.t_send for r in records]
    ends = [
        e for e in (r.t_end if r.t_end is not None else last_token_time(r) for r in records) if e is not None
    ]
    window = (max(ends) - min(sends)) if sends and ends else 0.0
    window = max(window, 0.0)
    in_total = sum(r.input_tokens or 0 for r in ok)
    out_total = sum(r.output_tokens or 0 for r in ok)
    summary: dict[str, Any] = {
        "window_s": window,
        "num_requests": len(records),
        "num_ok": len(ok),
        "num_failed": failed,
        "error_rate": failed / len(records) if records else None,
        "input_tokens_total": in_total,
        "output_tokens_total": out_total,
        "input_tokens_per_s": _rate(in_total, window),
        "output_tokens_per_s": _rate(out_total, window),
        "total_tokens_per_s": _rate(in_total + out_total, window),
        "requests_per_s": _rate(len(ok), window),
        "ttft_ms": stats(_ms(ttft_s(r) for r in ok)),
        "tpot_ms": stats(_ms(tpot_s(r) for r in ok)),
        "itl_ms": stats(v * 1e3 for r in ok for v in itl_s(r)),
        "e2e_ms": stats(_ms(e2e_s(r) for r in ok)),
    }
    input_missing = sum(1 for r in ok if r.input_tokens is None)
    if input_missing:
        summary["input_tokens_unknown_requests"] = input_missing
    if slo:
        met = sum(1 for r in ok if meets_slo(r, slo))
        summary["slo"] = SloOutcome(**slo, met=met, met_ratio=met / len(records) if records else None)
        summary["goodput_requests_per_s"] = _rate(met, window)
    counts = Counter(r.token_source for r in ok)  # a failed request has no tokens in the figures
    summary["token_source"] = {s: counts[s] for s in TOKEN_SOURCES if counts[s]}
    checked = [r for r in ok if r.requested_output_tokens is not None]
    bad = [r for r in checked if r.output_tokens != r.requested_output_tokens]
    summary["output_len_mismatch"] = OutputLengthCheck(
        checked=len(checked),
        count=len(bad),
        requested_tokens_total=sum(r.requested_output_tokens or 0 for r in checked),
        received_tokens_total=sum(r.output_tokens or 0 for r in checked),
        examples=[
            LengthExample(index=r.index, requested=r.requested_output_tokens, received=r.output_tokens)
            for r in bad[:_MAX_EXAMPLES]
        ],
    )
    errors = Counter((r.error or "").split(":", 1)[0] for r in records if not r.ok)
    if errors:
        summary["errors"] = dict(errors.most_common())
        summary["error_examples"] = [
            ErrorExample(index=r.index, error=r.error) for r in records if not r.ok
        ][:_MAX_EXAMPLES]
    st = _server_timings(ok)
    if st is not None:
        summary["server_timings"] = st
    summary.update(workload_fields(records, ok, window, slo, stats, lambda r: meets_slo(r, slo)))
    return summary


def summarize_run(info: RunInfo, records: Sequence[RequestRecord]) -> RunSummary:
    """The summary of a stored run recomputed from its requests, with the SLOs and sweep stages it was
    run with (for a run that was never finalised: killed, or its writer died)."""
    own = info.config.summarize(records)  # a kind of run with its own summary (image generation)
    if own is not None:
        return own
    return summarize(records, slo=info.config.slo_limits(), stages=info.config.summary_stages())
