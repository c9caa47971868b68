"""Bad input never crashes or hangs the doctor: missing commands, permission denied, a command that
hangs, truncated output, non-UTF-8 bytes, unreadable files — each becomes a finding with evidence."""

from __future__ import annotations

import time
from pathlib import Path

from doctor_harness import FakeMachine, ids, only

from gpuledger.facts.runner import CappedRunner, SubprocessRunner


def test_runner_reports_a_missing_program_as_not_found(tmp_path: Path) -> None:
    result = SubprocessRunner({"PATH": str(tmp_path)})(["nvidia-smi", "-L"], timeout_s=2)
    assert result.not_found and not result.ok and result.summary() == "nvidia-smi: not found on PATH"


def test_runner_kills_a_hanging_script_and_its_children(machine: FakeMachine) -> None:
    # A shell script whose `sleep` child would keep the pipes open if only the shell were killed.
    machine.command("hangs", sleep=30)
    start = time.monotonic()
    result = SubprocessRunner(machine.env)(["hangs"], timeout_s=0.5)
    assert time.monotonic() - start < 5
    assert result.timed_out and result.rc is None
    assert "did not finish within 0.5 s" in result.summary()


def test_runner_reports_permission_denied(machine: FakeMachine) -> None:
    machine.command("nvidia-smi", stdout=machine.data("nvidia-smi-cannot-communicate.txt"), mode=0o644)
    result = SubprocessRunner(machine.env)(["nvidia-smi"], timeout_s=2)
    assert result.error is not None and "permission denied" in result.error


def test_runner_decodes_non_utf8_bytes_with_replacement(machine: FakeMachine) -> None:
    raw = machine.write("raw.bin", b"Driver Version: 550.54.14 \xff\xfe\x80\n")
    machine.command("bytes", stdout=raw)
    result = SubprocessRunner(machine.env)(["bytes"], timeout_s=2)
    assert result.ok and "550.54.14" in result.stdout and "\ufffd" in result.stdout


def test_capped_runner_never_waits_longer_than_the_cap(machine: FakeMachine) -> None:
    machine.command("hangs", sleep=30)
    result = CappedRunner(SubprocessRunner(machine.env), 0.3)(["hangs"], timeout_s=60)
    assert result.timed_out and result.timeout_s == 0.3


def test_hanging_nvidia_smi_is_a_finding_not_a_hang(machine: FakeMachine) -> None:
    machine.nvidia_a100()
    machine.command("nvidia-smi", sleep=30)
    start = time.monotonic()
    report = machine.doctor(timeout_cap_s=1.0)
    assert time.monotonic() - start < 15
    finding = only(report.findings, "nvidia.smi_failed")
    assert finding.severity == "error" and "hung" in finding.title
    assert any("did not finish within 1 s" in e for e in finding.evidence)
    assert report.exit_code == 2


def test_truncated_xml_falls_back_to_the_text_formats(machine: FakeMachine, tmp_path: Path) -> None:
    machine.nvidia_a100()
    full = machine.fixture("nvidia-smi/telegraf-a100-sxm4-v12.xml").read_bytes()
    cut = tmp_path / "cut.xml"
    cut.write_bytes(full[: len(full) // 3])
    machine.command(
        "nvidia-smi", by_args={"-q -x": cut, "-q": machine.fixture("nvidia-smi/gpud-a10-550.127.05-q.txt")}
    )
    facts = machine.facts()
    assert facts.nvidia.smi_status == "ok" and facts.nvidia.smi_format == "q"
    assert facts.nvidia.driver_version == "550.127.05"


def test_truncated_output_everywhere_is_a_warning_with_evidence(machine: FakeMachine, tmp_path: Path) -> None:
    machine.nvidia_a100()
    full = machine.fixture("nvidia-smi/telegraf-a100-sxm4-v12.xml").read_bytes()
    cut = tmp_path / "cut.xml"
    cut.write_bytes(full[:900])
    machine.command("nvidia-smi", stdout=cut)
    report = machine.doctor()
    finding = only(report.findings, "nvidia.smi_failed")
    assert finding.severity == "warning"
    assert any("XML does not parse" in e for e in finding.evidence)


def test_non_utf8_bytes_in_nvidia_smi_output_still_parse(machine: FakeMachine, tmp_path: Path) -> None:
    machine.nvidia_a100()
    xml = machine.fixture("nvidia-smi/telegraf-tesla-t4.xml").read_bytes()
    garbled = tmp_path / "garbled.xml"
    garbled.write_bytes(
        xml.replace(
            b"<product_brand>NVIDIA</product_brand>", b"<product_brand>NV\xff\xfeIDIA</product_brand>"
        )
    )
    machine.command("nvidia-smi", stdout=garbled)
    facts = machine.facts()
    assert facts.nvidia.smi_status == "ok"
    assert facts.nvidia.driver_version == "515.105.01" and facts.nvidia.gpus[0].name == "Tesla T4"


def test_unexecutable_nvidia_smi_is_reported_with_the_reason(machine: FakeMachine) -> None:
    machine.nvidia_a100()
    machine.command("nvidia-smi", stdout=machine.fixture("nvidia-smi/telegraf-tesla-t4.xml"), mode=0o644)
    finding = only(machine.doctor().findings, "nvidia.smi_failed")
    assert any("permission denied" in e for e in finding.evidence)


def test_unreadable_sysfs_file_is_skipped_not_fatal(machine: FakeMachine) -> None:
    machine.nvidia_a100()
    (machine.root / "proc/modules").mkdir(parents=True)  # reading it raises IsADirectoryError
    bad = machine.root / "sys/bus/pci/devices/0000:01:00.0/class"
    bad.unlink()
    bad.mkdir()
    facts = machine.facts()
    assert facts.kernel.modules_source == "lsmod"
    assert facts.pci.gpus == []  # the device could not be classified
    assert facts.nvidia.smi_status == "ok"  # the rest still reports


def test_malformed_amd_tool_output_becomes_a_finding(machine: FakeMachine, tmp_path: Path) -> None:
    machine.amd_mi100()
    broken = tmp_path / "broken.json"
    broken.write_bytes(machine.fixture("amd/telegraf-rocm-smi-mi100_rocm602.json").read_bytes()[:500])
    machine.command("rocm-smi", stdout=broken)
    report = machine.doctor()
    finding = next(f for f in report.findings if f.id == "amd.tool_failed")
    assert any("rocm-smi" in e and "does not parse" in e for e in finding.evidence)
    assert "gpu.detected" in ids(report.findings)  # the PCI bus still names the GPUs


def test_a_collector_failure_is_reported_and_the_rest_still_runs(machine: FakeMachine) -> None:
    machine.nvidia_a100()
    # An /etc/docker/daemon.json that is valid JSON of the wrong shape is handled; one that cannot be
    # decoded as a directory is an OSError inside the collector -> a finding, not a crash.
    (machine.root / "etc/docker/daemon.json").mkdir(parents=True)
    report = machine.doctor()
    assert report.facts.containers.daemon_json_error is not None
    assert "nvidia.management_ok" in ids(report.findings)
