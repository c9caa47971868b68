"""GPUs on the PCI bus, from sysfs alone (no driver needed): ``/sys/bus/pci/devices/*``."""

from __future__ import annotations

from gpuledger.facts.fs import RootFS
from gpuledger.facts.model import PciDevice, PciFacts, Vendor
from gpuledger.facts.naming import VENDOR_IDS, name_gpu

PCI_DEVICES = "sys/bus/pci/devices"
DISPLAY_CLASS = 0x03  # PCI base class "display controller" (VGA 0x0300, 3D 0x0302, other 0x0380)


def _hex(fs: RootFS, rel: str) -> int | None:
    text = fs.read_first_line(rel)
    if not text:
        return None
    try:
        return int(text, 16)
    except ValueError:
        return None


def collect_pci(fs: RootFS) -> PciFacts:
    if not fs.is_dir(PCI_DEVICES):
        return PciFacts(readable=False, error=f"{fs.shown(PCI_DEVICES)} is missing or not a directory")
    gpus: list[PciDevice] = []
    for address in fs.listdir(PCI_DEVICES):
        base = f"{PCI_DEVICES}/{address}"
        class_code = _hex(fs, f"{base}/class")
        vendor_id = _hex(fs, f"{base}/vendor")
        device_id = _hex(fs, f"{base}/device")
        if class_code is None or vendor_id is None or device_id is None:
            continue
        if class_code >> 16 != DISPLAY_CLASS:
            continue
        vendor: Vendor = VENDOR_IDS.get(vendor_id, "other")
        name, source = name_gpu(fs, vendor_id, device_id)
        gpus.append(
            PciDevice(
                address=address.lower(),
                vendor_id=vendor_id,
                device_id=device_id,
                class_code=class_code,
                subsystem_vendor_id=_hex(fs, f"{base}/subsystem_vendor"),
                subsystem_device_id=_hex(fs, f"{base}/subsystem_device"),
                vendor=vendor,
                driver=fs.link_name(f"{base}/driver"),
                name=name,
                name_source=source,
            )
        )
    return PciFacts(readable=True, gpus=gpus)
