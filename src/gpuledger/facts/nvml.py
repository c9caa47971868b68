"""NVML (nvidia-ml-py), the in-process library that talks to the live NVIDIA driver: the one module that
imports pynvml. ``nvml_inventory()`` is the doctor's and the lock's view (driver and CUDA driver versions,
every device's identity); :class:`gpuledger.telemetry.nvml.NvmlSource` samples through the same binding.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass, field
from types import ModuleType
from typing import Any

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


def import_pynvml() -> ModuleType:
    # Imported on first use, not with this module: a vendor library is loaded only where NVML is read.
    import pynvml

    module: ModuleType = pynvml
    return module


def describe_nvml_error(exc: BaseException) -> str:
    """``"NVML Shared Library Not Found (NVMLError_LibraryNotFound): <hint>"``."""
    cls = type(exc).__name__
    hint = _HINTS.get(cls)
    return f"{exc} ({cls})" + (f": {hint}" if hint else "")


def nvml_text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode(errors="replace").strip("\x00").strip()
    return str(value).strip()


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
    error_class: str | None = None  # "NVMLError_LibraryNotFound", "NVMLError_DriverNotLoaded", ...
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
    nv = import_pynvml()
    inv = NvmlInventory()
    try:
        nv.nvmlInit()
    except nv.NVMLError as exc:
        return NvmlInventory(error_class=type(exc).__name__, error_message=describe_nvml_error(exc))
    try:
        inv.driver_version = nvml_text(nv.nvmlSystemGetDriverVersion())
        try:
            inv.cuda_driver_version = _cuda_version(int(nv.nvmlSystemGetCudaDriverVersion()))
        except nv.NVMLError:
            inv.cuda_driver_version = None
        for i in range(int(nv.nvmlDeviceGetCount())):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            bus_id = dev_id = vendor_id = None
            with contextlib.suppress(nv.NVMLError):  # left as None: doctor reads PCI from sysfs too
                pci = nv.nvmlDeviceGetPciInfo(h)
                bus_id = nvml_text(pci.busId)
                full = int(pci.pciDeviceId)  # (device << 16) | vendor
                dev_id, vendor_id = f"0x{full >> 16:04x}", f"0x{full & 0xFFFF:04x}"
            try:
                mem_total: int | None = int(nv.nvmlDeviceGetMemoryInfo(h).total)
            except nv.NVMLError:
                mem_total = None
            try:
                vbios: str | None = nvml_text(nv.nvmlDeviceGetVbiosVersion(h))
            except nv.NVMLError:
                vbios = None
            inv.devices.append(NvmlDevice(
                index=i, name=nvml_text(nv.nvmlDeviceGetName(h)), uuid=nvml_text(nv.nvmlDeviceGetUUID(h)),
                pci_bus_id=bus_id, pci_device_id=dev_id, pci_vendor_id=vendor_id,
                memory_total_bytes=mem_total, vbios=vbios,
            ))
    except nv.NVMLError as exc:
        inv.error_class, inv.error_message = type(exc).__name__, describe_nvml_error(exc)
    finally:
        with contextlib.suppress(nv.NVMLError):  # already failed above; that error is the useful one
            nv.nvmlShutdown()
    return inv
