"""Naming GPUs by PCI id: the GPU catalog first, then the AMD reference data's device table, then the
machine's own ``pci.ids`` (PCI ID Repository, under the root), then the bare ids."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from gpuledger.catalog import Catalog, GpuSpec, load_catalog
from gpuledger.catalog.amd import amd_reference
from gpuledger.errors import GpuledgerError
from gpuledger.facts.fs import RootFS
from gpuledger.facts.model import Vendor

VENDOR_IDS: dict[int, Vendor] = {0x10DE: "nvidia", 0x1002: "amd", 0x8086: "intel"}
VENDOR_NAMES = {0x10DE: "NVIDIA", 0x1002: "AMD", 0x8086: "Intel"}
PCI_IDS_PATHS = ("usr/share/misc/pci.ids", "usr/share/hwdata/pci.ids", "usr/share/pci.ids")


@lru_cache(maxsize=1)
def _catalog() -> Catalog | None:
    """The GPU catalog, or None when it cannot be loaded (a broken user catalog file must not stop
    the doctor: names then come from the PCI ids)."""
    try:
        return load_catalog()
    except GpuledgerError:
        return None


def catalog_spec_for_pci(vendor_id: int, device_id: int) -> GpuSpec | None:
    catalog = _catalog()
    if catalog is None:
        return None
    try:
        return catalog.find_pci(vendor_id, device_id)
    except ValueError:
        return None


def catalog_spec_for_name(name: str | None) -> GpuSpec | None:
    catalog = _catalog()
    if catalog is None or not name:
        return None
    return catalog.find(name)


@lru_cache(maxsize=8)
def _pci_ids_table(path: Path) -> dict[tuple[int, int], str]:
    """``(vendor, device) -> name`` for the GPU vendors only, read from a pci.ids file."""
    table: dict[tuple[int, int], str] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            vendor: int | None = None
            for line in fh:
                if not line.strip() or line.startswith("#"):
                    continue
                if not line.startswith("\t"):
                    head = line.split(None, 1)[0]
                    try:
                        code = int(head, 16)
                    except ValueError:
                        vendor = None
                        continue
                    vendor = code if code in VENDOR_IDS and len(head) == 4 else None
                    continue
                if vendor is None or line.startswith("\t\t"):
                    continue
                parts = line.strip().split(None, 1)
                if len(parts) == 2:
                    try:
                        table[(vendor, int(parts[0], 16))] = parts[1].strip()
                    except ValueError:
                        continue
    except OSError:
        return {}
    return table


def pci_ids_name(fs: RootFS, vendor_id: int, device_id: int) -> str | None:
    for rel in PCI_IDS_PATHS:
        path = fs.path(rel)
        if path.is_file():
            return _pci_ids_table(path).get((vendor_id, device_id))
    return None


def name_gpu(fs: RootFS, vendor_id: int, device_id: int) -> tuple[str, str]:
    """``(name, source)`` for a PCI vendor/device id."""
    spec = catalog_spec_for_pci(vendor_id, device_id)
    if spec is not None:
        return spec.name, "catalog"
    if vendor_id == 0x1002:
        known = amd_reference().amd_device(device_id)
        if known is not None:
            return known.name, "amd-reference"
    listed = pci_ids_name(fs, vendor_id, device_id)
    if listed:
        vendor = VENDOR_NAMES.get(vendor_id, "")
        return (
            f"{vendor} {listed}".strip() if vendor and not listed.startswith(vendor) else listed
        ), "pci.ids"
    vendor = VENDOR_NAMES.get(vendor_id, f"vendor 0x{vendor_id:04x}")
    return f"{vendor} GPU [{vendor_id:04x}:{device_id:04x}]", "pci-id"
