"""Records as a bench run produces them, for the store tests."""

from __future__ import annotations

from typing import Any

from gpuledger.records import RequestRecord, RunInfo, TelemetrySample


def make_request(i: int, chunks: int = 4, *, stage: str = "", error: str | None = None) -> RequestRecord:
    """A finished streamed request ``i``: sent at i/10 s, a chunk every 10 ms after a 50 ms TTFT."""
    t_send = i / 10
    times = [t_send + 0.05 + k * 0.01 for k in range(chunks)]
    return RequestRecord(
        index=i,
        t_send=t_send,
        t_first=times[0] if times else None,
        t_end=(times[-1] if times else t_send) + 0.001,
        chunk_times=times,
        input_tokens=32,
        output_tokens=chunks,
        token_source="server_usage",
        requested_output_tokens=chunks,
        error=error,
        stage=stage,
        output_chars=chunks * 4,
    )


def make_run(**fields: Any) -> RunInfo:
    values: dict[str, Any] = {"id": "", "label": "nightly", "engine": "vllm", "model": "tiny-llama"}
    values.update(fields)
    return RunInfo(**values)


def make_samples(n: int, device: str = "nvidia:0") -> list[TelemetrySample]:
    return [
        TelemetrySample(t=k * 0.1, device=device, metric="power_w", value=250.0 + k, source="nvml")
        for k in range(n)
    ]
