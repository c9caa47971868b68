"""Runs for report tests, written through the real store API and summarised by the real metrics and
telemetry functions — the same path ``gpuledger bench`` takes, minus the server.

Request timings and telemetry samples are generated deterministically (fixed seed): a fixed-concurrency
load where each slot sends its next request when the previous one finishes, and a device sampled at
10 Hz whose power, utilisation and energy counter move together.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from gpuledger.bench.metrics import summarize
from gpuledger.records import DeviceWindow, RequestRecord, RunInfo, TelemetrySample
from gpuledger.store import Store
from gpuledger.telemetry.base import DeviceInfo
from gpuledger.telemetry.sampler import summarize_device

# A label that runs script if it is ever inserted unescaped (and makes a request for "x").
XSS_LABEL = '<script>window.__xss=1</script><img src=x onerror="window.__xss=2">'


def synth_requests(
    n: int,
    *,
    output_tokens: int = 32,
    input_tokens: int = 64,
    ttft_s: float = 0.08,
    itl_s: float = 0.012,
    concurrency: int = 4,
    stage: str = "",
    seed: int = 1,
    fail_every: int = 0,
    start: float = 0.0,
    first_index: int = 0,
) -> list[RequestRecord]:
    rng = random.Random(seed)
    free_at = [start] * concurrency
    out: list[RequestRecord] = []
    for i in range(n):
        slot = i % concurrency
        t_send = free_at[slot]
        if fail_every and i % fail_every == fail_every - 1:
            out.append(
                RequestRecord(
                    index=first_index + i,
                    t_send=t_send,
                    t_end=t_send + 0.005,
                    error="http 500: internal server error",
                    stage=stage,
                )
            )
            free_at[slot] = t_send + 0.006
            continue
        times = [t_send + ttft_s * (0.8 + 0.4 * rng.random())]
        for _ in range(output_tokens - 1):
            times.append(times[-1] + itl_s * (0.7 + 0.6 * rng.random()))
        out.append(
            RequestRecord(
                index=first_index + i,
                t_send=t_send,
                t_first=times[0],
                t_end=times[-1],
                chunk_times=times,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                token_source="server_usage",
                requested_output_tokens=output_tokens,
                stage=stage,
                output_chars=output_tokens * 4,
            )
        )
        free_at[slot] = times[-1] + 0.001
    return out


@dataclass(frozen=True)
class Device:
    key: str
    vendor: str
    name: str
    watts: float  # mean power under load
    memory_total_bytes: float


H200 = Device("nvidia:0", "nvidia", "NVIDIA H200", 520.0, 141 * 2**30)
MI300X = Device("amd:0", "amd", "AMD Instinct MI300X", 610.0, 192 * 2**30)
CPU = Device("cpu", "cpu", "AMD EPYC 7B13", 0.0, 64 * 2**30)


def synth_telemetry(
    devices: Sequence[Device], window_s: float, interval_s: float = 0.1
) -> list[TelemetrySample]:
    samples: list[TelemetrySample] = []
    steps = max(2, int(window_s / interval_s) + 1)
    for d in devices:
        energy = 1_000_000.0
        for k in range(steps):
            t = k * interval_s
            wave = math.sin(t / 3.0)
            if d.vendor == "cpu":
                samples.append(TelemetrySample(t, d.key, "cpu_util_ratio", 0.35 + 0.1 * wave, "psutil"))
                samples.append(TelemetrySample(t, d.key, "ram_used_bytes", 12 * 2**30, "psutil"))
                samples.append(TelemetrySample(t, d.key, "ram_total_bytes", d.memory_total_bytes, "psutil"))
                continue
            source = "nvml" if d.vendor == "nvidia" else "amdsmi"
            power = d.watts + 40.0 * wave
            if k:
                energy += power * interval_s
            samples.append(TelemetrySample(t, d.key, "power_w", power, source))
            samples.append(TelemetrySample(t, d.key, "energy_j", energy, source))
            samples.append(TelemetrySample(t, d.key, "util_ratio", 0.9 + 0.05 * wave, source))
            samples.append(TelemetrySample(t, d.key, "memory_used_bytes", 0.8 * d.memory_total_bytes, source))
            samples.append(TelemetrySample(t, d.key, "memory_total_bytes", d.memory_total_bytes, source))
    return samples


@dataclass(frozen=True)
class Pair:
    """Two run ids: an NVIDIA run at one load level and an AMD sweep."""

    h200: str
    mi300x: str


def fingerprint(device: Device | None = None, **changes: Any) -> dict[str, Any]:
    """An environment shaped like ``gpuledger.lock.fingerprint()`` for a machine with ``device``."""
    d = device or H200
    nvidia = d.vendor == "nvidia"
    env: dict[str, Any] = {
        "os": "Ubuntu 22.04.4 LTS",
        "kernel": "6.5.0-35-generic",
        "arch": "x86_64",
        "gpus": [
            {
                "vendor": d.vendor,
                "name": d.name,
                "memory_total_bytes": d.memory_total_bytes,
                "vbios": "96.00.99.00.01" if nvidia else "113-M3000100-102",
                "gfx_target": None if nvidia else "gfx942",
            }
        ],
        "gpu_count": 1,
        "driver": "550.54.15" if nvidia else "6.8.5",
        "nvidia_driver": "550.54.15" if nvidia else None,
        "amdgpu_driver": None if nvidia else "6.8.5",
        "nvidia_module_for_kernel": True if nvidia else None,
        "cuda": "12.4" if nvidia else None,
        "cuda_runtime": "12.4" if nvidia else None,
        "rocm": None if nvidia else "6.2.0",
        "hip": None if nvidia else "6.2.41133",
        "container_toolkit": {"nvidia_container_cli": nvidia, "nvidia_ctk": nvidia, "docker_runtimes": None},
        "python": "3.11.7",
        "torch": "2.5.1+cu124" if nvidia else "2.5.1+rocm6.2",
        "torch_build": "cuda" if nvidia else "rocm",
        "engines": {"vllm": "0.6.3"},
        "hash": "sha256:1f2e3d" if nvidia else "sha256:9a8b7c",
    }
    env.update(changes)
    return env


def make_run(
    store: Store,
    requests: Sequence[RequestRecord],
    *,
    label: str = "",
    model: str = "Qwen/Qwen2.5-7B-Instruct",
    engine: str = "openai",
    devices: Sequence[Device] = (H200, CPU),
    telemetry: bool = True,
    environment: dict[str, Any] | None = None,
    server: dict[str, Any] | None = None,
    stages: Sequence[dict[str, Any]] | None = None,
    config: dict[str, Any] | None = None,
    slo: dict[str, float] | None = None,
    finalise: bool = True,
    machine: str = "gpu-box-a",
    started_at: datetime | None = None,
) -> str:
    """Create, fill and finalise a run the way the bench does; returns its id."""
    started = started_at or datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
    info = RunInfo(
        id="",
        label=label,
        started_at=started,
        engine=engine,
        model=model,
        base_url="http://127.0.0.1:18000/v1",
        workload={"dataset": "random", "input_len": 64, "output_len": 32},
        config=config if config is not None else (
            {} if engine == "torch"
            else {"load": {"kind": "concurrency", "stages": [{"stage": "c=4", "concurrency": 4}]}}
        ),
        environment=environment if environment is not None else fingerprint(devices[0] if devices else H200),
        server=server
        if server is not None
        else {"kind": "vllm", "version": "0.6.3", "version_source": "GET /version", "models": [model]},
    )
    run_id = store.create_run(info)
    store.add_requests(run_id, requests)
    if not finalise:
        return run_id
    summary = summarize(requests, slo=slo, stages=stages)
    window = summary.window_s
    tele_summary: list[DeviceWindow] = []
    if telemetry and devices:
        samples = synth_telemetry(devices, window)
        store.add_telemetry(run_id, samples)
        for d in devices:
            dev = DeviceInfo(
                key=d.key,
                vendor=d.vendor,
                index=0 if d.vendor != "cpu" else None,  # type: ignore[arg-type]
                name=d.name,
                uuid=None,
            )
            tele_summary.append(
                summarize_device(dev, samples, window_start=0.0, window_end=window, interval_s=0.1)
            )
    store.update_run(
        run_id,
        status="complete",
        summary=summary,
        telemetry_summary=tele_summary,
        duration_s=window,
        finished_at=started + timedelta(seconds=window),
        client={
            "cpu_util_ratio": 0.125,
            "cores_usable": 2,
            "hostname": machine,
            "source": "psutil process cpu_times over the measured window",
        },
    )
    return run_id


def server_state(
    kind: str,
    readings: Sequence[tuple[float, float | None, float | None, float | None, float | None]],
    *,
    stages: Sequence[tuple[str, float, float]] | None = None,
    failures: int = 0,
    last_error: str | None = None,
) -> dict[str, Any]:
    """``RunInfo.server["state"]`` as bench stores it: the readings (t, running, waiting, KV-cache ratio,
    preemptions counter) fed to the bench's own sampler and summarised by ``summarize_state``."""
    from gpuledger.bench.server_state import ServerStateSampler, summarize_state
    from gpuledger.engines.server_metrics import StatePoint

    sampler = ServerStateSampler(kind, "http://127.0.0.1:18000/metrics", interval_s=1.0)
    sampler.points = [StatePoint(*r) for r in readings]
    sampler.failures = failures
    sampler.last_error = last_error
    return summarize_state(sampler, list(stages) if stages else None).model_dump(mode="json")


def server_of(
    kind: str, state: dict[str, Any] | None, model: str = "Qwen/Qwen2.5-7B-Instruct"
) -> dict[str, Any]:
    """A ``RunInfo.server`` of a ``kind`` server (with its ``state`` when given)."""
    server: dict[str, Any] = {
        "kind": kind,
        "version": "0.6.3",
        "version_source": "GET /version",
        "models": [model],
    }
    if state is not None:
        server["state"] = state
    return server
