"""The ROCm support lists (AMD reference data, data/amd_reference.yaml), pinned by facts AMD documents
(see the comments and `source` of each `rocm_support` entry): the real doctor runs over fake machines
that print real captures, with the installed ROCm release in /opt/rocm/.info/version.

- gfx1100 (RX 7900 XTX / PRO W7900) is first listed in ROCm 5.7 ("GPU and OS Support (Linux)", 5.7.0).
- gfx906 (MI50, Radeon VII) stays listed through 6.x as "deprecated" (system requirements, 6.0-6.2)
  and is gone from the 6.4.0 compatibility matrix.
- gfx900 (MI25) is officially supported in the ROCm 4.0 release notes and "unsupported" from 5.6 on.
- gfx942 (MI300X) is first listed in ROCm 6.0 (compatibility matrix, 6.0.0 column)."""

from __future__ import annotations

import pytest
from doctor_harness import FakeMachine, ids, only

from gpuledger.doctor import DoctorReport


def amd_box(machine: FakeMachine, rocm: str) -> None:
    """What every AMD machine here shares: amdgpu loaded, /dev/kfd usable, a ROCm release installed."""
    machine.lsmod("lsmod-amdgpu.txt")
    machine.write("dev/kfd", "", mode=0o666)
    machine.write("dev/dri/renderD128", "", mode=0o666)
    machine.write("opt/rocm/.info/version", f"{rocm}\n")


def rx7900xtx(machine: FakeMachine, rocm: str) -> DoctorReport:
    """gfx1100 from the KFD topology of a real RX 7900 XTX (no ROCm tool on PATH)."""
    amd_box(machine, rocm)
    machine.write(
        "sys/class/kfd/kfd/topology/nodes/0/properties",
        machine.data("kfd-node-cpu-properties.txt").read_text(),
    )
    machine.write(
        "sys/class/kfd/kfd/topology/nodes/1/properties",
        machine.data("kfd-node-rx7900xtx-properties.txt").read_text(),
    )
    machine.pci("0000:03:00.0", 0x1002, 0x744C, class_code=0x030000, driver="amdgpu")
    return machine.doctor()


def mi50(machine: FakeMachine, rocm: str) -> DoctorReport:
    """gfx906 from rocm-smi of a real Radeon Instinct MI50 32GB."""
    amd_box(machine, rocm)
    machine.pci("0000:63:00.0", 0x1002, 0x66A1, class_code=0x038000, driver="amdgpu")
    machine.command("rocm-smi", stdout=machine.fixture("amd/telegraf-rocm-smi-vega-20-WKS-GL-XE.json"))
    return machine.doctor()


def mi25(machine: FakeMachine, rocm: str) -> DoctorReport:
    """gfx900 from rocminfo of a real 7x Radeon Instinct MI25 box."""
    amd_box(machine, rocm)
    machine.pci("0000:03:00.0", 0x1002, 0x6860, class_code=0x038000, driver="amdgpu")
    machine.command("rocminfo", stdout=machine.fixture("amd/rocminfo-7x-mi25-threadripper.txt"))
    return machine.doctor()


def mi300x(machine: FakeMachine, rocm: str) -> DoctorReport:
    """gfx942 from rocminfo of a real 4x AMD Instinct MI300X box."""
    amd_box(machine, rocm)
    machine.pci("0000:26:00.0", 0x1002, 0x74A1, class_code=0x038000, driver="amdgpu")
    machine.command("rocminfo", stdout=machine.fixture("amd/rocminfo-4x-mi300x-epyc9474f.txt"))
    return machine.doctor()


def support_line(report: DoctorReport) -> str:
    """The evidence line naming the support list the unsupported-target finding used."""
    finding = next(f for f in report.findings if f.id == "amd.gfx_unsupported")
    return next(e for e in finding.evidence if "support list of ROCm" in e)


def test_gfx1100_is_not_supported_before_rocm_5_7(machine: FakeMachine) -> None:
    report = rx7900xtx(machine, "5.6.1")
    unsupported = only(report.findings, "amd.gfx_unsupported")
    assert "gfx1100 is listed from ROCm 5.7 on" in unsupported.evidence
    line = support_line(report)
    assert line.startswith("ROCm 5.6.1; support list of ROCm 5.6 (")
    assert "(recalled" not in line
    assert line.endswith("gfx90a, gfx908, gfx906, gfx1030")


@pytest.mark.parametrize("rocm", ["5.7.0", "5.7.1", "6.0.2", "6.3.1", "7.0.2"])
def test_gfx1100_is_supported_from_rocm_5_7(machine: FakeMachine, rocm: str) -> None:
    assert "amd.gfx_unsupported" not in ids(rx7900xtx(machine, rocm).findings)


@pytest.mark.parametrize("rocm", ["5.7.1", "6.0.0", "6.2.4"])
def test_deprecated_gfx906_is_still_listed_through_rocm_6_2(machine: FakeMachine, rocm: str) -> None:
    report = mi50(machine, rocm)
    assert "amd.gfx_unsupported" not in ids(report.findings)
    ok = only(report.findings, "amd.management_ok")
    assert any("gfx906" in e and "support list used: ROCm" in e for e in ok.evidence)
    assert not any("(recalled)" in e for e in ok.evidence)


def test_gfx906_is_not_listed_by_rocm_6_4(machine: FakeMachine) -> None:
    report = mi50(machine, "6.4.0")
    unsupported = only(report.findings, "amd.gfx_unsupported")
    assert "gfx906 is listed from ROCm 4.0 on" in unsupported.evidence
    assert "gfx906" not in support_line(report).split(": ")[-1]


def test_gfx900_is_supported_by_rocm_4_0(machine: FakeMachine) -> None:
    assert "amd.gfx_unsupported" not in ids(mi25(machine, "4.0.1").findings)


def test_gfx900_is_unsupported_from_rocm_5_6(machine: FakeMachine) -> None:
    report = mi25(machine, "5.6.0")
    unsupported = next(f for f in report.findings if f.id == "amd.gfx_unsupported")
    assert "gfx900 is listed from ROCm 4.0 on" in unsupported.evidence
    assert "ROCm 5.6" in support_line(report)
    assert "amd.hsa_override_suggested" not in ids(report.findings)  # no override family for Vega 10


def test_gfx942_is_supported_by_rocm_6_0(machine: FakeMachine) -> None:
    assert "amd.gfx_unsupported" not in ids(mi300x(machine, "6.0.0").findings)


def test_gfx942_is_not_listed_before_rocm_6_0(machine: FakeMachine) -> None:
    report = mi300x(machine, "5.7.1")
    unsupported = next(f for f in report.findings if f.id == "amd.gfx_unsupported")
    assert "gfx942 is listed from ROCm 6.0 on" in unsupported.evidence
    assert "ROCm 5.7.0" in support_line(report)  # the 5.7 list's source: AMD's 5.7.0 page
