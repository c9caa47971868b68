"""Every nvidia-smi capture in tests/fixtures/captures parses into Facts, with the right GPU names, driver
and CUDA versions, through the collector's real fallback chain (-q -x, -q, table, -L, csv)."""

from __future__ import annotations

from pathlib import Path

import pytest
from doctor_harness import FakeMachine

from gpuledger.facts.nvidia import (
    CSV_FIELDS,
    SmiParseError,
    classify_smi_failure,
    parse_help_query_gpu,
    parse_smi_csv,
    parse_smi_list,
    parse_smi_q,
    parse_smi_table,
    parse_smi_xml,
)
from gpuledger.facts.runner import CommandResult

GIB = 1024**3

# file -> (format the collector ends up using, driver, CUDA, [GPU names])
EXPECTED = {
    "telegraf-a100-sxm4-v12.xml": ("xml", "535.54.03", "12.2", ["NVIDIA A100-SXM4-80GB"]),
    "telegraf-tesla-t4.xml": ("xml", "515.105.01", "11.7", ["Tesla T4"]),
    "telegraf-rtx-3080-v13.xml": ("xml", "595.58.03", "13.2", ["NVIDIA GeForce RTX 3080"]),
    "telegraf-quadro-p400.xml": ("xml", "418.43", "10.1", ["Quadro P400"]),
    "telegraf-pro-6000-maxq-blackwell-v13.xml": (
        "xml",
        "590.44.01",
        "13.1",
        ["NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"],
    ),
    "telegraf-dual_a5000-v13.xml": ("xml", "590.44.01", "13.1", ["NVIDIA RTX A5000", "NVIDIA RTX A5000"]),
    "netdata-a100-sxm4-mig.xml": ("xml", "510.47.03", "11.6", ["NVIDIA A100-SXM4-40GB"]),
    "gpud-a10-550.127.05-q.txt": ("q", "550.127.05", "12.4", ["NVIDIA A10"]),
    "gpud-8x-rtx4090-535.154.05-q.txt": ("q", "535.154.05", "12.2", ["NVIDIA GeForce RTX 4090"] * 8),
    "gpud-titan-v-560.35.03-q.txt": ("q", "560.35.03", "12.6", ["NVIDIA TITAN V"]),
    "gpud-a10-550.127.05-default.txt": ("table", "550.127.05", "12.4", ["NVIDIA A10"]),
    "gpud-525.125.06-default.txt": ("table", "525.125.06", "12.0", ["NVIDIA GeForce ..."]),
    "insights-nvidia-smi-L-8x-quadro-rtx8000.txt": ("L", None, None, ["Quadro RTX 8000"] * 8),
    "insights-nvidia-smi-L-t1000-v100.txt": ("L", None, None, ["NVIDIA T1000", "Tesla V100-PCIE-16GB"]),
    "netdata-tesla-p100.csv": ("csv", None, None, ["Tesla P100-PCIE-16GB"]),
}


def test_every_nvidia_smi_fixture_is_covered(fixtures_dir: Path) -> None:
    files = {p.name for p in (fixtures_dir / "nvidia-smi").iterdir()}
    assert files - set(EXPECTED) == {"netdata-help-query-gpu.txt"}  # that one is the field list, tested below


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_parses_into_facts_through_the_collector(machine: FakeMachine, name: str) -> None:
    fmt, driver, cuda, names = EXPECTED[name]
    # The script prints the capture whatever it is asked: the collector must find the format itself.
    machine.command("nvidia-smi", stdout=machine.fixture(f"nvidia-smi/{name}"))
    facts = machine.facts()
    assert facts.nvidia.smi_status == "ok"
    assert facts.nvidia.smi_format == fmt
    assert facts.nvidia.driver_version == driver
    assert facts.nvidia.cuda_version == cuda
    assert [g.name for g in facts.nvidia.gpus] == names
    assert [g.name for g in facts.gpus_of("nvidia")] == names
    assert not facts.collector_errors


def test_xml_gives_memory_vbios_uuid_bus_and_pci_device_id(fixtures_dir: Path) -> None:
    text = (fixtures_dir / "nvidia-smi/telegraf-a100-sxm4-v12.xml").read_text()
    driver, cuda, gpus = parse_smi_xml(text)
    gpu = gpus[0]
    assert gpu.memory_total_bytes == 81920 * 1024 * 1024  # fb_memory_usage/total, not a MIG slice's 19968 MiB
    assert gpu.vbios == "92.00.36.00.02"
    assert gpu.uuid == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    assert gpu.pci_bus_id == "00000000:01:00.0"
    assert gpu.pci_device_id == 0x20B2
    assert gpu.architecture == "Ampere"
    assert gpu.mig_mode == "Enabled"


def test_q_text_gives_the_same_fields_as_xml(fixtures_dir: Path) -> None:
    driver, cuda, gpus = parse_smi_q((fixtures_dir / "nvidia-smi/gpud-a10-550.127.05-q.txt").read_text())
    gpu = gpus[0]
    assert (gpu.name, gpu.vbios, gpu.pci_bus_id, gpu.pci_device_id) == (
        "NVIDIA A10",
        "94.02.91.00.03",
        "00000000:06:00.0",
        0x2236,
    )
    assert gpu.memory_total_bytes == 23028 * 1024 * 1024
    assert gpu.uuid == "GPU-51ae0086-e1ac-4a20-f062-9caa44e4df6d"


def test_eight_gpu_q_text_keeps_each_bus_id(fixtures_dir: Path) -> None:
    _, _, gpus = parse_smi_q((fixtures_dir / "nvidia-smi/gpud-8x-rtx4090-535.154.05-q.txt").read_text())
    assert [g.pci_bus_id for g in gpus][:3] == ["00000000:01:00.0", "00000000:21:00.0", "00000000:41:00.0"]
    assert all(g.memory_total_bytes == 24564 * 1024 * 1024 for g in gpus)


def test_old_table_layout_marks_the_truncated_name(fixtures_dir: Path) -> None:
    driver, cuda, gpus = parse_smi_table(
        (fixtures_dir / "nvidia-smi/gpud-525.125.06-default.txt").read_text()
    )
    assert gpus[0].name_truncated
    assert gpus[0].memory_total_bytes == 23028 * 1024 * 1024
    assert gpus[0].pci_bus_id == "00000000:01:00.0"


def test_dash_l_lists_uuids(fixtures_dir: Path) -> None:
    gpus = parse_smi_list((fixtures_dir / "nvidia-smi/insights-nvidia-smi-L-t1000-v100.txt").read_text())
    assert [g.uuid for g in gpus] == [
        "GPU-c05fe28c-5935-1c6d-3633-2fc61d26b6d4",
        "GPU-b08ecee0-0ea5-7b07-d459-baa5b95f5e89",
    ]


def test_csv_values_drop_units_and_na(fixtures_dir: Path) -> None:
    rows = parse_smi_csv((fixtures_dir / "nvidia-smi/netdata-tesla-p100.csv").read_text())
    assert rows[0]["name"] == "Tesla P100-PCIE-16GB"
    assert rows[0]["fan.speed"] is None  # [N/A]
    assert rows[0]["memory.free"] == "16280"


def test_the_csv_fallback_only_asks_fields_nvidia_smi_knows(fixtures_dir: Path) -> None:
    valid = set(parse_help_query_gpu((fixtures_dir / "nvidia-smi/netdata-help-query-gpu.txt").read_text()))
    assert {"driver_version", "name", "pci.bus_id", "uuid"} <= valid
    assert set(CSV_FIELDS) <= valid
    header = (fixtures_dir / "nvidia-smi/netdata-tesla-p100.csv").read_text().splitlines()[0]
    assert {h.split(" [")[0].strip() for h in header.split(",")} <= valid


@pytest.mark.parametrize("parser", [parse_smi_xml, parse_smi_q, parse_smi_table, parse_smi_list])
def test_parsers_refuse_garbage_with_a_parse_error(parser: object) -> None:
    with pytest.raises(SmiParseError):
        parser("\ufffd\ufffd not nvidia-smi output")  # type: ignore[operator]


def test_error_texts_are_classified(machine: FakeMachine) -> None:
    text = machine.data("nvidia-smi-cannot-communicate.txt").read_text()
    status, lines, _ = classify_smi_failure(CommandResult(("nvidia-smi",), rc=9, stdout=text))
    assert status == "cannot_communicate" and "couldn't communicate" in lines[0]
    text = machine.data("nvidia-smi-driver-library-mismatch.txt").read_text()
    status, lines, lib = classify_smi_failure(CommandResult(("nvidia-smi",), rc=18, stdout=text))
    assert (status, lib) == ("version_mismatch", "570.124")
    odd = "NVIDIA-SMI has failed because it couldn‘t communicate with the NVIDIA driver."
    assert classify_smi_failure(CommandResult(("nvidia-smi",), rc=9, stdout=odd))[0] == "cannot_communicate"
