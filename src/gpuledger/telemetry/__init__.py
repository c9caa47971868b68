"""Telemetry: one sampler for NVIDIA, AMD and CPU. Every reading says its unit and source; every
window summary says how its energy was obtained and whether the window is trustworthy.

>>> sources = open_sources()
>>> sampler = BackgroundSampler(sources, interval_s=0.1, t0=time.monotonic()).start()
>>> samples = sampler.stop(); summaries = sampler.summaries()  # one records.DeviceWindow per device
"""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gpuledger.telemetry.amd import AmdSmiSource
from gpuledger.telemetry.base import METRIC_UNITS, DeviceInfo, Reading, SourceError, SourceStatus
from gpuledger.telemetry.cpu import PsutilSource
from gpuledger.telemetry.nvml import NvmlSource
from gpuledger.telemetry.rapl import RaplSource
from gpuledger.telemetry.remotes import open_remote_sources
from gpuledger.telemetry.sampler import BackgroundSampler, Sampler
from gpuledger.telemetry.smi_cli import (
    CLI_PROBE_TIMEOUT_S,
    AmdSmiCliSource,
    NvidiaSmiSource,
    RocmSmiSource,
    Runner,
)

__all__ = [
    "METRIC_UNITS",
    "BackgroundSampler",
    "DeviceInfo",
    "Reading",
    "Sampler",
    "SourceError",
    "SourceStatus",
    "close_sources",
    "open_remote_sources",
    "open_sources",
]

CLI_OPEN_BUDGET_S = 6.0  # all CLI probes of one open_sources() together (they run concurrently)


def open_sources(
    root: Path = Path("/"),
    *,
    use_cli: bool = True,
    runner: Runner | None = None,
    pids: Collection[int] | None = None,
    remote: Sequence[str] = (),
    local: bool = True,
    live: bool = False,
) -> list[Sampler]:
    """Every telemetry source, in fallback order per vendor: the library first, then the CLIs
    (only tried when the library is unavailable and ``use_cli``). Unavailable sources are returned
    too, with their reason, so that a report can say why a figure is missing.

    ``root`` is where sysfs/procfs are read (tests pass a fake tree); ``runner`` replaces the
    subprocess runner of the CLI fallbacks; ``pids`` limits NVML's ``process_memory_bytes``.

    The CLI fallbacks are probed concurrently (the NVIDIA tool and the AMD tools in turn), each within
    :data:`~gpuledger.telemetry.smi_cli.CLI_PROBE_TIMEOUT_S` and all within :data:`CLI_OPEN_BUDGET_S`:
    a hanging or garbage-printing tool costs at most that, and is a source with a reason.

    ``remote``: ``--telemetry-from`` URLs (``gpuledger.telemetry.remote``), opened first and checked now (a
    malformed URL is a UsageError, an endpoint that cannot be read a SourceError); ``local=False`` opens
    only those (``--no-telemetry`` with ``--telemetry-from``); ``live``: for the monitor (exporters only, a
    failed read raises)."""
    remote_sources: list[Sampler] = list(open_remote_sources(remote, live=live)) if remote else []
    if not local:
        return remote_sources
    try:
        return [*remote_sources, *_local_sources(root, use_cli=use_cli, runner=runner, pids=pids)]
    except BaseException:
        close_sources(remote_sources)
        raise


def _local_sources(root: Path, *, use_cli: bool, runner: Runner | None, pids: Collection[int] | None
                   ) -> list[Sampler]:
    nvml = NvmlSource(pids=pids)
    amd_lib = AmdSmiSource()
    deadline = time.monotonic() + CLI_OPEN_BUDGET_S

    def left() -> float:
        return max(0.0, min(CLI_PROBE_TIMEOUT_S, deadline - time.monotonic()))

    def nvidia_cli() -> list[Sampler]:
        return [NvidiaSmiSource(runner, timeout_s=left())]

    def amd_cli() -> list[Sampler]:
        first = AmdSmiCliSource(runner, timeout_s=left())
        return [first] if first.available else [first, RocmSmiSource(runner, timeout_s=left())]

    nvidia_fallback: list[Sampler] = []
    amd_fallback: list[Sampler] = []
    if use_cli and not (nvml.available and amd_lib.available):
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="gpuledger-probe") as pool:
            f_nv = None if nvml.available else pool.submit(nvidia_cli)
            f_amd = None if amd_lib.available else pool.submit(amd_cli)
            nvidia_fallback = f_nv.result() if f_nv is not None else []
            amd_fallback = f_amd.result() if f_amd is not None else []

    sources: list[Sampler] = [nvml, *nvidia_fallback, amd_lib, *amd_fallback]
    sources.append(RaplSource(root))
    sources.append(PsutilSource(root))
    return sources


def close_sources(sources: Collection[Sampler]) -> None:
    """Release every library handle (NVML, amdsmi)."""
    for src in sources:
        src.close()
