"""Telemetry: one sampler for NVIDIA, AMD and CPU. Every reading says its unit and source; every
window summary says how its energy was obtained and whether the window is trustworthy.

>>> sources = open_sources()
>>> sampler = BackgroundSampler(sources, interval_s=0.1, t0=time.monotonic()).start()
>>> samples = sampler.stop(); summaries = sampler.summaries()
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from gpuledger.telemetry.amd import AmdSmiSource
from gpuledger.telemetry.base import METRIC_UNITS, DeviceInfo, Reading, SourceError, SourceStatus
from gpuledger.telemetry.cpu import PsutilSource
from gpuledger.telemetry.nvml import NvmlSource
from gpuledger.telemetry.rapl import RaplSource
from gpuledger.telemetry.sampler import BackgroundSampler, Sampler, WindowSummary
from gpuledger.telemetry.smi_cli import AmdSmiCliSource, NvidiaSmiSource, RocmSmiSource, Runner

__all__ = [
    "METRIC_UNITS",
    "BackgroundSampler",
    "DeviceInfo",
    "Reading",
    "Sampler",
    "SourceError",
    "SourceStatus",
    "WindowSummary",
    "close_sources",
    "open_sources",
]


def open_sources(
    root: Path = Path("/"),
    *,
    use_cli: bool = True,
    runner: Runner | None = None,
    pids: Collection[int] | None = None,
) -> list[Sampler]:
    """Every telemetry source, in fallback order per vendor: the library first, then the CLIs
    (only tried when the library is unavailable and ``use_cli``). Unavailable sources are returned
    too, with their reason, so that a report can say why a figure is missing.

    ``root`` is where sysfs/procfs are read (tests pass a fake tree); ``runner`` replaces the
    subprocess runner of the CLI fallbacks; ``pids`` limits NVML's ``process_memory_bytes``."""
    sources: list[Sampler] = []

    nvml = NvmlSource(pids=pids)
    sources.append(nvml)
    if not nvml.available and use_cli:
        sources.append(NvidiaSmiSource(runner))

    amd: Sampler = AmdSmiSource()
    sources.append(amd)
    if not amd.available and use_cli:
        amd = AmdSmiCliSource(runner)
        sources.append(amd)
        if not amd.available:
            sources.append(RocmSmiSource(runner))

    sources.append(RaplSource(root))
    sources.append(PsutilSource(root))
    return sources


def close_sources(sources: Collection[Sampler]) -> None:
    """Release every library handle (NVML, amdsmi)."""
    for src in sources:
        src.close()
