"""Bad tool output is a finding, never a crash (issue 16, item 8): the subprocess runner and what
``doctor``, ``lock`` and the bench fingerprint make of GPU tools that print garbage, 10 MB, invalid
UTF-8 or NULs, or that hang with a child of their own.

The tools are real programs on the fake machine's PATH (tests/telemetry/hostile_tools.py); every process
they start writes its pid, and each test checks that none is left running.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from doctor_harness import FakeMachine

import gpuledger.facts
import gpuledger.facts.amd
import gpuledger.facts.nvidia
from gpuledger.cli.main import main
from gpuledger.facts.runner import (
    DRAIN_S,
    MAX_OUTPUT_BYTES,
    BudgetRunner,
    SubprocessRunner,
    forget_hung_programs,
)
from gpuledger.lock import fingerprint


def _load_hostile_tools() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "telemetry" / "hostile_tools.py"
    spec = importlib.util.spec_from_file_location("gpuledger_tests_hostile_tools", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gpuledger_tests_hostile_tools", module)
    spec.loader.exec_module(module)
    return module


hostile = _load_hostile_tools()
SLACK_S = 3.0  # process start-up and kill grace on a 2-core box
SMI_TIMEOUT_S = 1.0  # nvidia-smi's timeout in these tests (10 s in the product)


@pytest.fixture
def pids(machine: FakeMachine) -> Iterator[Path]:
    """The pid file of the machine's hostile tools; whatever they left running is ended afterwards."""
    path = machine.bin.parent / "pids"
    forget_hung_programs()
    yield path
    forget_hung_programs()
    hostile.kill_survivors(path)


def _tool(machine: FakeMachine, name: str, kind: str, pids: Path) -> Path:
    path: Path = hostile.hostile_tool(machine.bin, name, kind, pids)
    return path


# --------------------------------------------------------------------------- the runner


def test_a_timed_out_program_is_killed_with_its_children(machine: FakeMachine, pids: Path) -> None:
    _tool(machine, "tool", "hang", pids)
    start = time.monotonic()
    result = SubprocessRunner(machine.env)(["tool"], timeout_s=0.5)
    assert time.monotonic() - start < 0.5 + SLACK_S
    assert result.timed_out and result.rc is None
    assert result.summary() == "`tool` did not finish within 0.5 s and was killed"
    assert hostile.survivors(pids) == []  # the shell's own sleep and the one it put in the background


def test_a_program_whose_child_keeps_its_pipes_open_ends_with_its_output(machine: FakeMachine,
                                                                         pids: Path) -> None:
    _tool(machine, "tool", "leaves_child", pids)
    start = time.monotonic()
    result = SubprocessRunner(machine.env)(["tool"], timeout_s=10)
    assert time.monotonic() - start < DRAIN_S + SLACK_S  # not the 10 s timeout
    assert result.ok and result.stdout == "started\n"
    assert hostile.survivors(pids) == []  # the child it left behind went with its process group


def test_a_program_that_closes_its_pipes_and_keeps_running_is_waited_for(machine: FakeMachine) -> None:
    script = machine.bin / "closer"
    script.write_text("#!/bin/sh\nexec >&- 2>&-\nsleep 0.3\nexit 3\n")
    script.chmod(0o755)
    result = SubprocessRunner(machine.env)(["closer"], timeout_s=5)
    assert result.rc == 3 and not result.timed_out


def test_output_past_the_cap_is_not_read(machine: FakeMachine, pids: Path) -> None:
    _tool(machine, "tool", "huge", pids)
    start = time.monotonic()
    result = SubprocessRunner(machine.env)(["tool"], timeout_s=10)
    assert time.monotonic() - start < SLACK_S
    assert not result.ok and len(result.stdout) == MAX_OUTPUT_BYTES
    assert result.summary() == (
        f"`tool`: printed more than {MAX_OUTPUT_BYTES} bytes on stdout; stopped reading, killed it"
    )
    assert all(len(line) <= 300 for line in result.output_lines())


@pytest.mark.parametrize("kind", ["invalid_utf8", "nul", "garbage"])
def test_any_bytes_decode_and_nul_is_a_replacement_character(machine: FakeMachine, pids: Path,
                                                             kind: str) -> None:
    _tool(machine, "tool", kind, pids)
    result = SubprocessRunner(machine.env)(["tool"], timeout_s=5)
    assert result.ok and "\ufffd" in result.stdout and "\x00" not in result.stdout


def test_a_program_that_hung_is_not_waited_for_again(machine: FakeMachine, pids: Path) -> None:
    tool = _tool(machine, "tool", "hang", pids)
    run = SubprocessRunner(machine.env)
    assert run(["tool", "-q"], timeout_s=0.5).timed_out
    again = run(["tool", "-L"], timeout_s=0.5)
    assert again.timed_out and again.note is not None and not again.ran  # not started: nothing waited for
    assert again.summary().startswith("`tool -L` not run: tool did not finish within 0.5 s")
    tool.write_text("#!/bin/sh\necho fixed\n")  # a new program (the driver was fixed): run it again
    assert run(["tool"], timeout_s=5).stdout == "fixed\n"


def test_a_budget_bounds_all_commands_together(machine: FakeMachine, pids: Path) -> None:
    for name in ("one", "two", "three"):
        _tool(machine, name, "hang", pids)
    run = BudgetRunner(SubprocessRunner(machine.env), 1.0)
    start = time.monotonic()
    results = [run([name], timeout_s=10) for name in ("one", "two", "three")]
    assert time.monotonic() - start < 1.0 + SLACK_S
    assert all(r.timed_out for r in results)
    assert results[-1].summary() == "`three` not run: the 1 s allowed for all tools was spent"
    assert hostile.survivors(pids) == []


# --------------------------------------------------------------------------- doctor and lock


def _use(machine: FakeMachine, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in machine.env.items():
        monkeypatch.setenv(key, value)


@pytest.mark.parametrize(("kind", "severity"), [
    ("garbage", "warning"), ("invalid_utf8", "warning"), ("nul", "warning"), ("quoted_newlines", "warning"),
    ("carriage_returns", "warning"), ("leaves_child", "warning"),
    ("huge", "error"), ("huge_lines", "error"), ("hang", "error"),  # 10 MB: over the runner's cap
])
def test_doctor_with_a_hostile_nvidia_smi_says_so_in_a_finding(
    machine: FakeMachine, pids: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    kind: str, severity: str,
) -> None:
    machine.nvidia_a100()
    _tool(machine, "nvidia-smi", kind, pids)
    _use(machine, monkeypatch)
    monkeypatch.setattr(gpuledger.facts.nvidia, "SMI_TIMEOUT_S", SMI_TIMEOUT_S)
    start = time.monotonic()
    code = main(["doctor", "--json", "--root", str(machine.root), "--no-store"])
    out = capsys.readouterr()
    assert time.monotonic() - start < 5 * SMI_TIMEOUT_S + SLACK_S
    assert code == {"warning": 1, "error": 2}[severity], out.err
    assert "Traceback" not in out.err + out.out and "internal error" not in out.err
    doc = json.loads(out.out)
    (finding,) = [f for f in doc["findings"] if f["id"] == "nvidia.smi_failed"]
    assert finding["severity"] == severity
    assert all("nvidia-smi" in e for e in finding["evidence"][:1])
    assert all(len(e) <= 400 for e in finding["evidence"])
    assert doc["summary"]["gpus"][0]["source"].startswith("sysfs PCI")  # the GPU is still named
    assert hostile.survivors(pids) == []


@pytest.mark.parametrize("kind", ["deep_json", "big_number_json", "garbage", "huge", "hang"])
def test_doctor_with_a_hostile_rocm_smi_says_so_in_a_finding(
    machine: FakeMachine, pids: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    kind: str,
) -> None:
    machine.amd_mi100()
    _tool(machine, "rocm-smi", kind, pids)
    _use(machine, monkeypatch)
    monkeypatch.setattr(gpuledger.facts.amd, "TOOL_TIMEOUT_S", SMI_TIMEOUT_S)
    code = main(["doctor", "--json", "--root", str(machine.root), "--no-store"])
    out = capsys.readouterr()
    assert code in (1, 2), out.err
    assert "Traceback" not in out.err and "internal error" not in out.err
    doc = json.loads(out.out)
    failed = [f for f in doc["findings"] if f["id"] == "amd.tool_failed"]
    assert any("rocm-smi" in e for f in failed for e in f["evidence"])
    assert len(doc["summary"]["gpus"]) == 4  # from the PCI bus
    assert hostile.survivors(pids) == []


@pytest.mark.parametrize("kind", ["garbage", "huge", "carriage_returns", "hang"])
def test_lock_with_a_hostile_nvidia_smi_writes_the_snapshot(
    machine: FakeMachine, pids: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    tmp_path: Path, kind: str,
) -> None:
    machine.nvidia_a100()
    _tool(machine, "nvidia-smi", kind, pids)
    _use(machine, monkeypatch)
    monkeypatch.setattr(gpuledger.facts.nvidia, "SMI_TIMEOUT_S", SMI_TIMEOUT_S)
    path = tmp_path / "gpuledger.lock.json"
    code = main(["lock", "-o", str(path), "--root", str(machine.root)])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "Traceback" not in out.err and "internal error" not in out.err
    stack = json.loads(path.read_text())["stack"]
    assert stack["gpu_count"] == 1 and stack["cuda"] is None  # what only nvidia-smi knows is unknown
    assert stack["nvidia_driver"] == "535.54.03"  # from the kernel module, as without nvidia-smi
    assert hostile.survivors(pids) == []


def test_the_fingerprint_is_bounded_when_every_tool_hangs(
    machine: FakeMachine, pids: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    machine.nvidia_a100()
    machine.amd_mi100()
    for name in sorted(p.name for p in machine.bin.iterdir()) + ["rocminfo", "amd-smi", "id", "mokutil"]:
        _tool(machine, name, "hang", pids)
    monkeypatch.setattr(gpuledger.facts, "FAST_COMMAND_TIMEOUT_S", 0.5)
    monkeypatch.setattr(gpuledger.facts, "FAST_BUDGET_S", 1.5)
    start = time.monotonic()
    fp = fingerprint(machine.root, env=machine.env, use_nvml=False)
    assert time.monotonic() - start < 1.5 + SLACK_S
    assert "hash" in fp and fp["cuda"] is None and fp["gpu_count"] == 5
    assert hostile.survivors(pids) == []
