"""Every AMD capture in tests/fixtures/captures (amd-smi JSON in both shapes, rocm-smi --json of ROCm 4.x to
6.x, rocminfo) parses into Facts with the right names, gfx targets and driver versions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from doctor_harness import FakeMachine

from gpuledger.catalog.amd import gfx_from_target_version
from gpuledger.facts.amd import (
    AmdParseError,
    parse_amd_smi,
    parse_kfd_properties,
    parse_rocm_smi,
    parse_rocminfo,
)

NAVI22_1 = "Navi 22 [Radeon RX 6700/6700 XT / 6800M]"
NAVI22_PCI_IDS = "Navi 22 [Radeon RX 6700/6700 XT/6750 XT / 6800M/6850M XT]"
MI100 = "Arcturus GL-XL [Instinct MI100]"

# rocm-smi file -> (names, gfx targets, amdgpu driver version)
ROCM_SMI = {
    "telegraf-rocm-smi-mi100_rocm571.json": ([MI100] * 6, ["gfx908"] * 6, "6.2.4"),
    "telegraf-rocm-smi-mi100_rocm602.json": ([MI100] * 4, ["gfx908"] * 4, "6.3.6"),
    # ROCm 4.3 printed "0x1002" as the card series: the name then comes from the PCI id.
    "telegraf-rocm-smi-rx6700xt_rocm430.json": ([NAVI22_PCI_IDS], ["gfx1031"], "6.3.6"),
    "telegraf-rocm-smi-rx6700xt_rocm571.json": ([NAVI22_1], ["gfx1031"], "6.3.6"),
    "telegraf-rocm-smi-rx6700xt_rocm602.json": ([NAVI22_1], ["gfx1031"], "6.3.6"),
    "telegraf-rocm-smi-rx6700xt_rocm612.json": ([NAVI22_1], ["gfx1031"], "6.3.6"),
    "telegraf-rocm-smi-vega-10-XT.json": (["Vega 10 XT [Radeon PRO WX 9100]"], ["gfx900"], "5.9.25"),
    "telegraf-rocm-smi-vega-20-WKS-GL-XE.json": (["Radeon Instinct MI50 32GB"], ["gfx906"], "5.9.17"),
    "luckylinux-rocm-smi-showallinfo-rx6600-jq.json": (
        ["Navi 23 [Radeon RX 6600/6600 XT/6600M]"],
        ["gfx1032"],
        "7.0.0-3-pve",
    ),
}
ROCMINFO = {
    "rocminfo-7x-mi25-threadripper.txt": (["Radeon Instinct MI25"] * 7, ["gfx900"] * 7),
    "rocminfo-4x-mi300x-epyc9474f.txt": (["AMD Instinct MI300X"] * 4, ["gfx942"] * 4),
}
AMD_SMI = [
    "luckylinux-amd-smi-static-rx6600.json",
    "luckylinux-amd-smi-metric-rx6600.json",
    "luckylinux-amd-smi-topology-rx6600.json",
]


def test_every_amd_fixture_is_covered(fixtures_dir: Path) -> None:
    files = {p.name for p in (fixtures_dir / "amd").iterdir()}
    assert files == set(ROCM_SMI) | set(ROCMINFO) | set(AMD_SMI)


@pytest.mark.parametrize("name", sorted(ROCM_SMI))
def test_rocm_smi_fixture_parses_into_facts(machine: FakeMachine, name: str) -> None:
    names, gfx, driver = ROCM_SMI[name]
    machine.command("rocm-smi", stdout=machine.fixture(f"amd/{name}"))
    facts = machine.facts()
    gpus = facts.gpus_of("amd")
    assert [g.name for g in gpus] == names
    assert [g.gfx_target for g in gpus] == gfx
    assert facts.amd.driver_version == driver
    assert all(g.pci_bus_id and g.pci_bus_id.startswith("0000:") for g in gpus)
    assert not facts.collector_errors and not facts.amd.parse_errors


def test_rocm_smi_gfx_version_is_used_when_present_else_the_pci_id(fixtures_dir: Path) -> None:
    gpus, _ = parse_rocm_smi((fixtures_dir / "amd/telegraf-rocm-smi-rx6700xt_rocm612.json").read_text())
    assert (gpus[0].gfx_target, gpus[0].gfx_source, gpus[0].device_id) == ("gfx1031", "rocm-smi", 0x73DF)
    gpus, _ = parse_rocm_smi((fixtures_dir / "amd/telegraf-rocm-smi-rx6700xt_rocm571.json").read_text())
    assert gpus[0].gfx_target is None and gpus[0].device_id == 0x73DF  # completed from the AMD reference data
    assert gpus[0].memory_total_bytes == 12868124672


@pytest.mark.parametrize("name", sorted(ROCMINFO))
def test_rocminfo_fixture_parses_into_facts(machine: FakeMachine, name: str) -> None:
    names, gfx = ROCMINFO[name]
    machine.command("rocminfo", stdout=machine.fixture(f"amd/{name}"))
    facts = machine.facts()
    assert facts.amd.rocminfo_status == "ok"
    assert [g.name for g in facts.gpus_of("amd")] == names
    assert [g.gfx_target for g in facts.gpus_of("amd")] == gfx


def test_rocminfo_reads_chip_id_and_bus_of_each_gpu_agent(fixtures_dir: Path) -> None:
    gpus, status = parse_rocminfo((fixtures_dir / "amd/rocminfo-4x-mi300x-epyc9474f.txt").read_text())
    assert status == "ok"
    assert gpus[0].device_id == 0x74A1 and gpus[0].uuid == "GPU-8d1457e2c20f59d2"
    assert gpus[0].pci_bus_id == "0000:26:00.0"  # BDFID 9728
    gpus, _ = parse_rocminfo((fixtures_dir / "amd/rocminfo-7x-mi25-threadripper.txt").read_text())
    assert {g.device_id for g in gpus} == {0x6860} and gpus[0].uuid is None


def test_rocminfo_without_kfd_is_a_status_not_a_crash(machine: FakeMachine) -> None:
    gpus, status = parse_rocminfo(machine.data("rocminfo-rock-not-loaded.txt").read_text())
    assert (gpus, status) == ([], "rock_not_loaded")
    with pytest.raises(AmdParseError):
        parse_rocminfo("Segmentation fault")


@pytest.mark.parametrize("name", AMD_SMI)
@pytest.mark.parametrize("envelope", [False, True], ids=["bare-list", "gpu_data"])
def test_amd_smi_fixture_parses_in_both_json_shapes(
    machine: FakeMachine, tmp_path: Path, name: str, envelope: bool
) -> None:
    source = machine.fixture(f"amd/{name}")
    if envelope:  # newer amd-smi wraps the same records in {"gpu_data": [...]}
        wrapped = tmp_path / f"gpu_data-{name}"
        wrapped.write_text(json.dumps({"gpu_data": json.loads(source.read_text())}, indent=4))
        source = wrapped
    machine.command("amd-smi", stdout=source)
    facts = machine.facts()
    assert facts.amd.amd_smi is not None and facts.amd.amd_smi.status == "ok"
    (gpu,) = facts.gpus_of("amd")
    if "static" in name:
        assert gpu.name == "Navi 23 [Radeon RX 6600/6600 XT"  # truncated by amd-smi itself
        assert facts.amd.driver_version == "7.0.0-3-pve"
        assert gpu.gfx_target == "gfx1032"  # static JSON of this amd-smi has no target: PCI id 0x73ff
        assert gpu.vbios == "020.003.000.030.000000"
    if "static" in name or "metric" in name:
        assert gpu.memory_total_bytes == 8176 * 1024 * 1024
    if "static" in name or "topology" in name:
        assert gpu.pci_bus_id == "0000:0b:00.0"


def test_amd_smi_target_graphics_version_wins(fixtures_dir: Path) -> None:
    records = json.loads((fixtures_dir / "amd/luckylinux-amd-smi-static-rx6600.json").read_text())
    records[0]["asic"]["target_graphics_version"] = "gfx1032"  # newer amd-smi prints this key
    gpus, _ = parse_amd_smi(json.dumps({"gpu_data": records}))
    assert (gpus[0].gfx_target, gpus[0].gfx_source) == ("gfx1032", "amd-smi")


def test_amd_smi_rejects_other_json() -> None:
    with pytest.raises(AmdParseError):
        parse_amd_smi('{"error": "no GPUs"}')
    with pytest.raises(AmdParseError):
        parse_amd_smi("[{truncated")


def test_kfd_topology_gives_gfx_target_and_pci_address(machine: FakeMachine) -> None:
    node = parse_kfd_properties(1, machine.data("kfd-node-rx7900xtx-properties.txt").read_text())
    assert node is not None
    assert (node.gfx_target, node.device_id, node.drm_render_minor) == ("gfx1100", 0x744C, 128)
    assert node.pci_bus_id == "0000:03:00.0"  # location_id 768
    assert parse_kfd_properties(0, machine.data("kfd-node-cpu-properties.txt").read_text()) is None


@pytest.mark.parametrize(
    ("value", "gfx"),
    [
        (110000, "gfx1100"),
        (100301, "gfx1031"),
        (90010, "gfx90a"),
        (90402, "gfx942"),
        (120001, "gfx1201"),
        (0, None),
    ],
)
def test_gfx_target_version_encoding(value: int, gfx: str | None) -> None:
    assert gfx_from_target_version(value) == gfx


def test_kfd_alone_names_the_gpu_when_no_rocm_tool_is_installed(machine: FakeMachine) -> None:
    machine.write(
        "sys/class/kfd/kfd/topology/nodes/0/properties",
        machine.data("kfd-node-cpu-properties.txt").read_text(),
    )
    machine.write(
        "sys/class/kfd/kfd/topology/nodes/1/properties",
        machine.data("kfd-node-rx7900xtx-properties.txt").read_text(),
    )
    machine.pci("0000:03:00.0", 0x1002, 0x744C, class_code=0x030000, driver="amdgpu")
    facts = machine.facts()
    (gpu,) = facts.gpus_of("amd")
    assert (gpu.gfx_target, gpu.pci_bus_id) == ("gfx1100", "0000:03:00.0")
    assert facts.amd.gpus[0].gfx_source == "kfd topology"
