"""`gpuledger doctor` end to end: JSON shape and exit codes on fake roots, this machine (no GPU: the CPU
path), the setup-labour ledger in the real store, --explain, and a store that cannot be used."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from doctor_harness import FakeMachine

from gpuledger.cli.main import main
from gpuledger.doctor.knowledge import knowledge_base


def _use(machine: FakeMachine, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in machine.env.items():
        monkeypatch.setenv(key, value)


def _doctor_json(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, object]]:
    code = main(["doctor", "--json", *args])
    out = capsys.readouterr().out
    return code, json.loads(out)


def test_json_has_exactly_facts_findings_summary(
    machine: FakeMachine, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    machine.nvidia_a100()
    _use(machine, monkeypatch)
    code, doc = _doctor_json(["--root", str(machine.root), "--no-store"], capsys)
    assert code == 0
    assert list(doc) == ["facts", "findings", "summary"]
    summary = doc["summary"]
    assert isinstance(summary, dict) and set(summary) == {"errors", "warnings", "gpus"}
    assert summary["errors"] == 0 and summary["warnings"] == 0
    assert [g["name"] for g in summary["gpus"]] == ["NVIDIA A100-SXM4-80GB"]  # type: ignore[index]
    finding = doc["findings"][0]  # type: ignore[index]
    assert set(finding) == {"id", "layer", "severity", "title", "evidence", "fix", "docs"}


@pytest.mark.parametrize(("setup", "code"), [("warning", 1), ("error", 2)])
def test_exit_code_is_1_for_warnings_and_2_for_errors(
    machine: FakeMachine,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    setup: str,
    code: int,
) -> None:
    machine.nvidia_a100()
    if setup == "warning":
        machine.command("docker", stdout=machine.data("docker-runtimes-no-nvidia.json"))
        (machine.bin / "nvidia-container-cli").unlink()
    else:
        machine.lsmod("lsmod-nouveau.txt")
    _use(machine, monkeypatch)
    got, doc = _doctor_json(["--root", str(machine.root), "--no-store"], capsys)
    assert got == code
    assert doc["summary"][f"{setup}s"] >= 1  # type: ignore[index]


def test_terminal_output_has_one_section_per_layer_and_plain_fix_lines(
    machine: FakeMachine, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    machine.pci("0000:01:00.0", 0x10DE, 0x20B2, driver="nouveau")
    machine.lsmod("lsmod-nouveau.txt")
    _use(machine, monkeypatch)
    assert main(["doctor", "--root", str(machine.root), "--no-store"]) == 2
    out = capsys.readouterr().out
    assert "1. Hardware (PCI bus)" in out and "2. Kernel driver" in out
    assert "\n        sudo update-initramfs -u\n" in out  # copy-pasteable, nothing in front but spaces
    assert "[ERROR] nouveau is loaded and holds the NVIDIA GPU (nvidia.nouveau_loaded)" in out


def test_on_this_machine_json_is_valid_and_reports_the_cpu_path(capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = _doctor_json(["--no-store"], capsys)
    assert code in (0, 1)
    found = {f["id"] for f in doc["findings"]}  # type: ignore[union-attr]
    if not doc["summary"]["gpus"]:  # type: ignore[index]
        assert {"gpu.none_found", "cpu.path"} <= found


def test_every_run_is_stored_and_history_shows_it(
    machine: FakeMachine, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    machine.nvidia_a100()
    machine.lsmod("lsmod-nouveau.txt")
    _use(machine, monkeypatch)
    assert main(["doctor", "--json", "--root", str(machine.root)]) == 2
    machine.lsmod("lsmod-nvidia-535.txt")
    assert main(["doctor", "--json", "--root", str(machine.root)]) == 0
    capsys.readouterr()
    assert main(["doctor", "--history", "--json"]) == 0
    ledger = json.loads(capsys.readouterr().out)
    box = ledger["testbox"]
    assert box["runs"] == 2 and box["resolved"] is True
    assert box["problems"] == ["nvidia.nouveau_loaded"]
    assert box["hours"] >= 0
    assert main(["doctor", "--history"]) == 0
    assert "testbox" in capsys.readouterr().out


def test_an_unusable_store_warns_and_the_doctor_still_answers(
    machine: FakeMachine, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    machine.nvidia_a100()
    _use(machine, monkeypatch)
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the store's directory should be")
    code = main(["doctor", "--json", "--root", str(machine.root), "--db", f"sqlite:///{blocker}/x.sqlite"])
    captured = capsys.readouterr()
    assert code == 0
    json.loads(captured.out)
    assert "not stored in the setup-labour ledger" in captured.err


@pytest.mark.parametrize("rule_id", [r.id for r in knowledge_base().rules])
def test_explain_prints_every_rule(rule_id: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--explain", rule_id]) == 0
    out = capsys.readouterr().out
    assert rule_id in out and "Symptom" in out


def test_explain_json_and_unknown_id(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--explain", "nvidia.smi_cannot_communicate", "--json"]) == 0
    rule = json.loads(capsys.readouterr().out)
    assert rule["seed_rows"] == [1] and rule["fix"][0] == "lsmod | grep nvidia"
    assert main(["doctor", "--explain", "nvidia.nouvea"]) == 3
    err = capsys.readouterr().err
    assert "no doctor rule with id 'nvidia.nouvea'" in err and "nvidia.nouveau_loaded" in err


def test_explain_and_history_together_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--explain", "cpu.path", "--history"]) == 2
