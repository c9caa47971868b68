"""Runs shaped like what the bench and the telemetry sampler store (docs/contracts.md), for the cost tests.
Plain functions (not fixtures) so hypothesis tests can use them too.

The summary of every run is what ``gpuledger.bench.metrics.summarize`` makes of generated requests —
never a hand-written one (issue 15: hand-built summaries hid a bug). The requests are designed so that
the figures a test asks for come out of the real metrics exactly (to float rounding):

- ``n`` requests, sent evenly over the window so that the first is sent at its start and the last
  finishes at its end (window = last finish − first send);
- each request takes ``e2e_ms`` from send to its last token and its first token arrives after
  ``ttft_ms``; its first chunk carries one token, its second the rest (exact per-chunk counts, as a
  server with continuous usage reports them);
- the output (input) tokens of the window, ``output_tps x window_s``, are spread over the requests
  (they differ by at most one token);
- with SLO goodput asked for, that many requests per second meet the TTFT SLO (``slo_ttft_ms``); the
  others take longer than the limit to their first token (midway between it and the E2E), so the mean
  TTFT is ``ttft_ms`` when every request meets the SLO.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gpuledger.bench.metrics import summarize
from gpuledger.kinds.text.summary import TextGenerationSummary
from gpuledger.records import RequestRecord, RunInfo


def _whole(rate: float, window_s: float, what: str) -> int:
    """``rate x window`` as a whole number of items (a test asking for a fraction of a token is a bug)."""
    total = rate * window_s
    whole = round(total)
    if abs(total - whole) > 1e-6 * max(1.0, abs(total)):
        raise ValueError(f"{what} {rate:g}/s over {window_s:g} s is not a whole number ({total:g})")
    return int(whole)


def _spread(total: int, n: int) -> list[int]:
    q, r = divmod(total, n)
    return [q + 1 if i < r else q for i in range(n)]


@dataclass(frozen=True, slots=True)
class Stage:
    """One load of a sweep: its name, concurrency and what its requests did over its own window."""

    name: str
    output_tps: float
    met: float | None = None  # share of the requests that met the TTFT SLO (None: no SLO)
    ttft_ms: float = 100.0
    window_s: float = 10.0
    num_requests: int = 200
    input_share: float = 0.5  # input tokens per output token

    @property
    def concurrency(self) -> int:
        return int(self.name.split("=")[1])


def requests_for(
    n: int,
    *,
    window_s: float,
    output_total: int,
    input_total: int,
    ttft_ms: float | None,
    e2e_ms: float,
    met: int | None = None,
    slo_ttft_ms: float | None = None,
    start: float = 0.0,
    stage: str = "",
    first_index: int = 0,
) -> list[RequestRecord]:
    """``n`` successful requests over ``[start, start + window_s]`` (see the module docstring).
    ``ttft_ms=None``: responses that were not streamed (no first-token time)."""
    if n < 1:
        raise ValueError("a run needs at least one request")
    e2e = e2e_ms / 1e3
    if (n == 1 and abs(window_s - e2e) > 1e-9) or window_s < e2e:
        raise ValueError(f"{n} request(s) of {e2e_ms:g} ms cannot span a {window_s:g} s window")
    outs, ins = _spread(output_total, n), _spread(input_total, n)
    if any(0 < k < 2 for k in outs):
        raise ValueError("give every request 0 or at least 2 output tokens (TTFT and E2E differ)")
    good = n if met is None else met
    if not 0 <= good <= n:
        raise ValueError(f"{met} of {n} requests cannot meet the SLO")
    slow_ttft_ms: float | None = None
    if good < n:
        if ttft_ms is None or slo_ttft_ms is None or not ttft_ms < slo_ttft_ms < e2e_ms:
            raise ValueError("requests missing a TTFT SLO need TTFT < SLO limit < E2E")
        slow_ttft_ms = (slo_ttft_ms + e2e_ms) / 2
    step = (window_s - e2e) / (n - 1) if n > 1 else 0.0
    out: list[RequestRecord] = []
    for i in range(n):
        last = i == n - 1
        t_send = start + (window_s - e2e if last else i * step)
        t_end = start + window_s if last else t_send + e2e
        k = outs[i]
        first_ms = ttft_ms if i < good or slow_ttft_ms is None else slow_ttft_ms
        streamed = first_ms is not None and k > 0
        t_first = t_send + first_ms / 1e3 if streamed and first_ms is not None else None
        out.append(
            RequestRecord(
                index=first_index + i,
                t_send=t_send,
                t_first=t_first,
                t_end=t_end,
                chunk_times=[t_first, t_end] if t_first is not None else [],
                chunk_tokens=[1, k - 1] if t_first is not None else None,
                input_tokens=ins[i],
                output_tokens=k,
                token_source="server_usage",
                requested_output_tokens=k,
                stage=stage,
                output_chars=4 * k,
            )
        )
    return out


def sweep_requests(
    stages: Sequence[Stage], *, e2e_factor: float = 10.0, slo_ttft_ms: float = 500.0
) -> list[RequestRecord]:
    """The requests of a sweep: each stage after the other, its E2E ``e2e_factor`` x its TTFT."""
    records: list[RequestRecord] = []
    start = 0.0
    for s in stages:
        records += requests_for(
            s.num_requests,
            window_s=s.window_s,
            output_total=_whole(s.output_tps, s.window_s, "output tokens"),
            input_total=_whole(s.output_tps * s.input_share, s.window_s, "input tokens"),
            ttft_ms=s.ttft_ms,
            e2e_ms=e2e_factor * s.ttft_ms,
            met=None if s.met is None else _whole(s.met, s.num_requests, "requests meeting the SLO"),
            slo_ttft_ms=slo_ttft_ms,
            start=start,
            stage=s.name,
            first_index=len(records),
        )
        start += s.window_s
    return records


MakeRun = Callable[..., RunInfo]


def build_run(
    run_id: str = "run00001",
    *,
    output_tps: float = 1000.0,
    input_tps: float = 500.0,
    window_s: float = 100.0,
    num_ok: int = 100,
    devices: list[dict[str, Any]] | None = None,
    gpu: str | None = "NVIDIA H100 80GB HBM3",
    vendor: str = "nvidia",
    power_w: float | None = 600.0,
    energy_j: float | None = None,
    ttft_ms: float | None = 200.0,
    e2e_ms: float = 2000.0,
    goodput: float | None = None,
    slo_ttft_ms: float = 500.0,
    stages: Sequence[Stage] | None = None,
    model: str = "qwen2.5-7b",
    engine: str = "vllm",
    workload: dict[str, Any] | None = None,
    config: dict[str, Any] | None = None,
    environment: dict[str, Any] | None = None,
    server: dict[str, Any] | None = None,
    status: str = "complete",
) -> RunInfo:
    """A stored run whose summary is ``summarize`` of generated requests: ``num_ok`` requests over
    ``window_s`` (requests/s = num_ok ÷ window), ``output_tps``/``input_tps`` tokens per second,
    ``ttft_ms``/``e2e_ms`` per request; ``goodput`` requests/s meeting ``ttft_ms <= slo_ttft_ms``.
    ``stages``: a sweep instead (each stage after the other; the window is theirs)."""
    if stages is not None:
        records = sweep_requests(stages, slo_ttft_ms=slo_ttft_ms)
        with_slo = any(s.met is not None for s in stages)
        window_s = sum(s.window_s for s in stages)
        summary = summarize(
            records,
            slo={"ttft_ms": slo_ttft_ms} if with_slo else None,
            stages=[{"stage": s.name, "concurrency": s.concurrency} for s in stages],
        )
    else:
        records = requests_for(
            num_ok,
            window_s=window_s,
            output_total=_whole(output_tps, window_s, "output tokens"),
            input_total=_whole(input_tps, window_s, "input tokens"),
            ttft_ms=ttft_ms,
            e2e_ms=e2e_ms,
            met=None if goodput is None else _whole(goodput, window_s, "good requests"),
            slo_ttft_ms=slo_ttft_ms,
        )
        summary = summarize(records, slo={"ttft_ms": slo_ttft_ms} if goodput is not None else None)
    if devices is None:
        devices = []
        if gpu is not None:
            devices.append(
                {
                    "device": f"{vendor}:0",
                    "vendor": vendor,
                    "name": gpu,
                    "uuid": None,
                    "index": 0,
                    "mean_util_ratio": 0.8,
                    "peak_util_ratio": 1.0,
                    "peak_memory_bytes": 20e9,
                    "memory_total_bytes": 80e9,
                    "mean_power_w": power_w,
                    "peak_power_w": power_w,
                    "energy_j": energy_j
                    if energy_j is not None
                    else (power_w * window_s if power_w else None),
                    "energy_method": "counter" if power_w else None,
                    "energy_reason": None,
                    "valid": power_w is not None,
                    "validity_reason": None if power_w else "no power readings",
                    "samples": 1000,
                    "interval_s": 0.1,
                    "sources": {"power_w": "nvml"} if power_w else {},
                    "unavailable": {} if power_w else {"power_w": "NVML NotSupported on this GPU"},
                }
            )
    return RunInfo(
        id=run_id,
        label=run_id,
        status=status,  # type: ignore[arg-type]
        engine=engine,
        model=model,
        workload=workload or {"dataset": "sharegpt", "output_len": 256},
        config=config or {"load": {"kind": "concurrency", "stages": [{"stage": "c=32", "concurrency": 32}]}},
        environment=environment or {},
        server=server or {},
        summary=summary,
        telemetry_summary=devices,
    )


def text_summary(run: RunInfo) -> TextGenerationSummary:
    """The run's summary, which ``build_run`` always makes a text-generation one."""
    assert isinstance(run.summary, TextGenerationSummary), run.summary
    return run.summary
