"""NVIDIA GPUs through NVML (nvidia-ml-py), source ``nvml``. The only module that imports pynvml.

Units as NVML returns them, converted to base units: power and power limit mW -> W, total energy
mJ -> J (Volta and newer), memory bytes, utilisation % -> ratio, clocks MHz -> Hz, temperature °C.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass, field
from types import ModuleType
from typing import Any

from gpuledger.telemetry.base import MHZ, BaseSource, DeviceInfo, Reading

NVML_METRICS = frozenset({
    "util_ratio", "mem_util_ratio", "memory_used_bytes", "memory_total_bytes", "power_w", "energy_j",
    "temperature_c", "sm_clock_hz", "mem_clock_hz", "power_limit_w", "process_memory_bytes",
})

# What an NVML error class means for the user, beyond NVML's own text.
_HINTS = {
    "NVMLError_LibraryNotFound": "libnvidia-ml.so.1 is not installed: no NVIDIA driver on this machine "
                                 "(or not mounted into this container)",
    "NVMLError_DriverNotLoaded": "the nvidia kernel module is not loaded",
    "NVMLError_LibRmVersionMismatch": "the NVIDIA user-space library and kernel module versions differ "
                                      "(reboot after a driver upgrade)",
    "NVMLError_NoPermission": "no permission to open /dev/nvidia*",
    "NVMLError_GpuIsLost": "the GPU fell off the bus or stopped responding",
}
# Per-metric errors that mean "this GPU or driver cannot report this metric": stop asking.
_UNSUPPORTED = ("NVMLError_NotSupported", "NVMLError_NoPermission", "NVMLError_FunctionNotFound")
# Errors that mean the device is gone for the rest of the window.
_LOST = ("NVMLError_GpuIsLost", "NVMLError_ResetRequired", "NVMLError_Uninitialized",
         "NVMLError_DriverNotLoaded")


def _import_pynvml() -> ModuleType:
    import pynvml

    module: ModuleType = pynvml
    return module


def describe_nvml_error(exc: BaseException) -> str:
    """``"NVML Shared Library Not Found (NVMLError_LibraryNotFound): <hint>"``."""
    cls = type(exc).__name__
    hint = _HINTS.get(cls)
    return f"{exc} ({cls})" + (f": {hint}" if hint else "")


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode(errors="replace").strip("\x00").strip()
    return str(value).strip()


class NvmlSource(BaseSource):
    """All NVIDIA GPUs NVML sees. ``pids`` limits ``process_memory_bytes`` to those processes
    (default: every compute process on the GPU)."""

    def __init__(self, pids: Collection[int] | None = None) -> None:
        super().__init__("nvml", "nvidia", NVML_METRICS)
        self._pids = set(pids) if pids is not None else None
        self._handles: dict[str, Any] = {}
        self._initialised = False
        try:
            self._nv = _import_pynvml()
        except ImportError as exc:
            self.reason = f"nvidia-ml-py is not installed ({exc})"
            return
        nv = self._nv
        try:
            nv.nvmlInit()
            self._initialised = True
            count = int(nv.nvmlDeviceGetCount())
            for i in range(count):
                h = nv.nvmlDeviceGetHandleByIndex(i)
                dev = DeviceInfo(key=f"nvidia:{i}", vendor="nvidia", index=i,
                                 name=_text(nv.nvmlDeviceGetName(h)), uuid=_text(nv.nvmlDeviceGetUUID(h)))
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


@dataclass(slots=True)
class NvmlDevice:
    index: int
    name: str
    uuid: str
    pci_bus_id: str | None
    pci_device_id: str | None  # "0x2330": the 16-bit PCI device id
    pci_vendor_id: str | None  # "0x10de"
    memory_total_bytes: int | None
    vbios: str | None


@dataclass(slots=True)
class NvmlInventory:
    """NVML's view of the machine for ``doctor``: versions and devices, or the error that stopped it."""

    driver_version: str | None = None
    cuda_driver_version: str | None = None  # "12.4"
    devices: list[NvmlDevice] = field(default_factory=list)
    error_class: str | None = None  # "NVMLError_LibraryNotFound", "ImportError", ...
    error_message: str | None = None

    @property
    def ok(self) -> bool:
        return self.error_class is None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _cuda_version(value: int) -> str:
    return f"{value // 1000}.{(value % 1000) // 10}"


def nvml_inventory() -> NvmlInventory:
    """Driver and CUDA driver versions and every device's identity, read once through NVML."""
    try:
        nv = _import_pynvml()
    except ImportError as exc:
        return NvmlInventory(error_class="ImportError",
                             error_message=f"nvidia-ml-py is not installed ({exc})")
    inv = NvmlInventory()
    try:
        nv.nvmlInit()
    except nv.NVMLError as exc:
        return NvmlInventory(error_class=type(exc).__name__, error_message=describe_nvml_error(exc))
    try:
        inv.driver_version = _text(nv.nvmlSystemGetDriverVersion())
        try:
            inv.cuda_driver_version = _cuda_version(int(nv.nvmlSystemGetCudaDriverVersion()))
        except nv.NVMLError:
            inv.cuda_driver_version = None
        for i in range(int(nv.nvmlDeviceGetCount())):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            bus_id = dev_id = vendor_id = None
            with contextlib.suppress(nv.NVMLError):  # left as None: doctor reads PCI from sysfs too
                pci = nv.nvmlDeviceGetPciInfo(h)
                bus_id = _text(pci.busId)
                full = int(pci.pciDeviceId)  # (device << 16) | vendor
                dev_id, vendor_id = f"0x{full >> 16:04x}", f"0x{full & 0xFFFF:04x}"
            try:
                mem_total: int | None = int(nv.nvmlDeviceGetMemoryInfo(h).total)
            except nv.NVMLError:
                mem_total = None
            try:
                vbios: str | None = _text(nv.nvmlDeviceGetVbiosVersion(h))
            except nv.NVMLError:
                vbios = None
            inv.devices.append(NvmlDevice(
                index=i, name=_text(nv.nvmlDeviceGetName(h)), uuid=_text(nv.nvmlDeviceGetUUID(h)),
                pci_bus_id=bus_id, pci_device_id=dev_id, pci_vendor_id=vendor_id,
                memory_total_bytes=mem_total, vbios=vbios,
            ))
    except nv.NVMLError as exc:
        inv.error_class, inv.error_message = type(exc).__name__, describe_nvml_error(exc)
    finally:
        with contextlib.suppress(nv.NVMLError):  # already failed above; that error is the useful one
            nv.nvmlShutdown()
    return inv
