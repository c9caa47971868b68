"""NVIDIA GPUs through NVML (nvidia-ml-py), source ``nvml``, over the binding in :mod:`gpuledger.facts.nvml`
(the only module that imports pynvml).

Units as NVML returns them, converted to base units: power and power limit mW -> W, total energy
mJ -> J (Volta and newer), memory bytes, utilisation % -> ratio, clocks MHz -> Hz, temperature °C.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection
from typing import Any

from gpuledger.facts.nvml import describe_nvml_error, import_pynvml, nvml_text
from gpuledger.telemetry.base import MHZ, BaseSource, DeviceInfo, Reading

NVML_METRICS = frozenset({
    "util_ratio", "mem_util_ratio", "memory_used_bytes", "memory_total_bytes", "power_w", "energy_j",
    "temperature_c", "sm_clock_hz", "mem_clock_hz", "power_limit_w", "process_memory_bytes",
})

# Per-metric errors that mean "this GPU or driver cannot report this metric": stop asking.
_UNSUPPORTED = ("NVMLError_NotSupported", "NVMLError_NoPermission", "NVMLError_FunctionNotFound")
# Errors that mean the device is gone for the rest of the window.
_LOST = ("NVMLError_GpuIsLost", "NVMLError_ResetRequired", "NVMLError_Uninitialized",
         "NVMLError_DriverNotLoaded")


class NvmlSource(BaseSource):
    """All NVIDIA GPUs NVML sees. ``pids`` limits ``process_memory_bytes`` to those processes
    (default: every compute process on the GPU)."""

    def __init__(self, pids: Collection[int] | None = None) -> None:
        super().__init__("nvml", "nvidia", NVML_METRICS)
        self._pids = set(pids) if pids is not None else None
        self._handles: dict[str, Any] = {}
        self._initialised = False
        self._nv = nv = import_pynvml()
        try:
            nv.nvmlInit()
            self._initialised = True
            count = int(nv.nvmlDeviceGetCount())
            for i in range(count):
                h = nv.nvmlDeviceGetHandleByIndex(i)
                dev = DeviceInfo(key=f"nvidia:{i}", vendor="nvidia", index=i,
                                 name=nvml_text(nv.nvmlDeviceGetName(h)),
                                 uuid=nvml_text(nv.nvmlDeviceGetUUID(h)))
                self._devices.append(dev)
                self._handles[dev.key] = h
        except nv.NVMLError as exc:
            self.reason = describe_nvml_error(exc)
            self.close()
            return
        if not self._devices:
            self.reason = "NVML works but sees no NVIDIA GPU"
            self.close()
            return
        self.available = True

    def close(self) -> None:
        if self._initialised:
            self._initialised = False
            # Shutting down a library that already failed leaves nothing to release.
            with contextlib.suppress(self._nv.NVMLError):
                self._nv.nvmlShutdown()

    def _groups(self, h: Any) -> list[tuple[tuple[str, ...], Callable[[], tuple[float, ...]]]]:
        """NVML calls, each giving one or more metrics (one call for utilisation, one for memory)."""
        nv = self._nv

        def util() -> tuple[float, ...]:
            u = nv.nvmlDeviceGetUtilizationRates(h)
            return float(u.gpu) / 100.0, float(u.memory) / 100.0

        def memory() -> tuple[float, ...]:
            m = nv.nvmlDeviceGetMemoryInfo(h)
            return float(m.used), float(m.total)

        def proc_mem() -> tuple[float, ...]:
            total = 0.0
            for proc in nv.nvmlDeviceGetComputeRunningProcesses(h):
                used = getattr(proc, "usedGpuMemory", None)
                if used is None:  # not available (e.g. Windows WDDM); not zero
                    continue
                if self._pids is None or int(proc.pid) in self._pids:
                    total += float(used)
            return (total,)

        return [
            (("util_ratio", "mem_util_ratio"), util),
            (("memory_used_bytes", "memory_total_bytes"), memory),
            (("power_w",), lambda: (float(nv.nvmlDeviceGetPowerUsage(h)) / 1000.0,)),
            (("energy_j",), lambda: (float(nv.nvmlDeviceGetTotalEnergyConsumption(h)) / 1000.0,)),
            (("temperature_c",), lambda: (float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),)),
            (("sm_clock_hz",), lambda: (float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)) * MHZ,)),
            (("mem_clock_hz",), lambda: (float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)) * MHZ,)),
            (("power_limit_w",), lambda: (float(nv.nvmlDeviceGetEnforcedPowerLimit(h)) / 1000.0,)),
            (("process_memory_bytes",), proc_mem),
        ]

    def read(self, now: float) -> list[Reading]:
        out: list[Reading] = []
        for dev in self._devices:
            if dev.key in self._device_errors:
                continue
            for metrics, get in self._groups(self._handles[dev.key]):
                if self._is_unavailable(dev.key, metrics[0]):
                    continue
                try:
                    values = get()
                except self._nv.NVMLError as exc:
                    cls = type(exc).__name__
                    if cls in _UNSUPPORTED:
                        why = f"NVML: {exc} ({cls})"
                        if metrics == ("energy_j",) and cls == "NVMLError_NotSupported":
                            why += "; the total energy counter needs a Volta or newer GPU"
                        for metric in metrics:
                            self._mark_unavailable(dev.key, metric, why)
                        continue
                    if cls in _LOST:
                        self._device_errors[dev.key] = f"{describe_nvml_error(exc)} (reading {metrics[0]})"
                        break
                    # Transient (timeout, unknown): skip this reading; a run of them shows as a gap.
                    continue
                out.extend(Reading(now, dev, m, v, self.name) for m, v in zip(metrics, values, strict=True))
        return out

