"""Runs shaped like what the bench and the telemetry sampler store (docs/contracts.md), for the cost tests.
Plain functions (not fixtures) so hypothesis tests can use them too."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuledger.records import RunInfo

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
    e2e_ms: float | None = 2000.0,
    requests_per_s: float | None = 1.0,
    goodput: float | None = None,
    model: str = "qwen2.5-7b",
    engine: str = "vllm",
    workload: dict[str, Any] | None = None,
    config: dict[str, Any] | None = None,
    environment: dict[str, Any] | None = None,
    server: dict[str, Any] | None = None,
    status: str = "complete",
) -> RunInfo:
    summary: dict[str, Any] = {
        "window_s": window_s,
        "num_requests": num_ok,
        "num_ok": num_ok,
        "num_failed": 0,
        "error_rate": 0.0,
        "output_tokens_total": output_tps * window_s,
        "input_tokens_total": input_tps * window_s,
        "output_tokens_per_s": output_tps,
        "input_tokens_per_s": input_tps,
        "total_tokens_per_s": output_tps + input_tps,
        "requests_per_s": requests_per_s,
        "output_len_mismatch": 0,
    }
    if ttft_ms is not None:
        summary["ttft_ms"] = {"mean": ttft_ms, "p50": ttft_ms, "n": num_ok}
    if e2e_ms is not None:
        summary["e2e_ms"] = {"mean": e2e_ms, "p50": e2e_ms, "n": num_ok}
    if goodput is not None:
        summary["goodput_requests_per_s"] = goodput
        summary["slo"] = {"ttft_ms": 500}
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
        config=config or {"concurrency": 32},
        environment=environment or {},
        server=server or {},
        summary=summary,
        telemetry_summary=devices,
    )
