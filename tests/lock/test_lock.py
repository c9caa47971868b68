"""Version lock: snapshots of fake roots built from real captures (different drivers across the
fixture files are real before/after pairs), drift classification, --check exit codes, the file format
(round trip, version field, a file from a future format), and the bench fingerprint."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from lock_harness import KERNEL, FakeMachine, fake_pynvml

from gpuledger.cli.main import main
from gpuledger.errors import InvalidInputError, NotFoundError
from gpuledger.lock import (
    LOCK_FORMAT,
    LOCK_VERSION,
    check,
    diff_stacks,
    fingerprint,
    read_lock,
    snapshot,
    stack_from_facts,
    stack_hash,
    write_lock,
)

Make = Callable[[str], FakeMachine]


def nvidia(machine: FakeMachine, smi_fixture: str, torch: str = "cuda_ok") -> FakeMachine:
    machine.nvidia_a100(torch=torch)
    machine.command("nvidia-smi", stdout=machine.fixture(f"nvidia-smi/{smi_fixture}"))
    return machine


def stack(machine: FakeMachine) -> dict[str, object]:
    return stack_from_facts(machine.facts(probe_torch=False)).model_dump(mode="json")


def drift_map(a: dict[str, object], b: dict[str, object]) -> dict[str, tuple[bool, str]]:
    return {d.key: (d.matters, d.reason) for d in diff_stacks(a, b)}


def test_snapshot_holds_the_stack_from_the_facts(make_machine: Make) -> None:
    s = stack(nvidia(make_machine("a100"), "telegraf-a100-sxm4-v12.xml"))
    assert s["nvidia_driver"] == "535.54.03" and s["driver"] == "535.54.03"
    assert s["cuda"] == "12.2" and s["cuda_runtime"] == "12.1"
    assert s["torch"] == "2.5.1+cu121" and s["torch_build"] == "cuda"
    assert s["gpus"] == [
        {
            "vendor": "nvidia",
            "name": "NVIDIA A100-SXM4-80GB",
            "memory_total_bytes": 85899345920,
            "vbios": "92.00.36.00.02",
            "gfx_target": None,
        }
    ]
    assert s["kernel"] == KERNEL and s["nvidia_module_for_kernel"] is True
    assert s["os"] == "Ubuntu 22.04.4 LTS"
    assert s["container_toolkit"] == {
        "nvidia_container_cli": True,
        "nvidia_ctk": False,
        "docker_runtimes": ["io.containerd.runc.v2", "nvidia", "runc"],
    }


def test_driver_major_and_cuda_minor_drift_matters(make_machine: Make) -> None:
    before = stack(nvidia(make_machine("t4"), "telegraf-tesla-t4.xml"))  # 515.105.01, CUDA 11.7
    after = stack(nvidia(make_machine("a100"), "telegraf-a100-sxm4-v12.xml"))  # 535.54.03, CUDA 12.2
    d = drift_map(before, after)
    assert d["nvidia_driver"] == (True, "driver major version changed")
    assert d["cuda"] == (True, "CUDA (driver) minor version changed")
    assert d["gpus"][0] is True


def test_a_driver_update_within_the_branch_is_cosmetic(make_machine: Make) -> None:
    before = stack(nvidia(make_machine("a"), "telegraf-a100-sxm4-v12.xml"))  # 535.54.03
    after = stack(nvidia(make_machine("b"), "gpud-8x-rtx4090-535.154.05-q.txt"))  # 535.154.05, same CUDA 12.2
    d = drift_map(before, after)
    assert d["nvidia_driver"] == (False, "driver changed below the major version")
    assert "cuda" not in d


def test_same_driver_different_gpu_is_only_the_gpu(make_machine: Make) -> None:
    before = stack(nvidia(make_machine("a5000"), "telegraf-dual_a5000-v13.xml"))  # 590.44.01, 13.1
    after = stack(
        nvidia(make_machine("pro6000"), "telegraf-pro-6000-maxq-blackwell-v13.xml")
    )  # 590.44.01, 13.1
    d = drift_map(before, after)
    assert set(d) == {"gpus"} and d["gpus"][0] is True


def test_rocm_minor_drift_matters(make_machine: Make) -> None:
    a, b = make_machine("rocm571"), make_machine("rocm612")
    a.amd_rx6700xt("telegraf-rocm-smi-rx6700xt_rocm571.json", rocm="5.7.1")
    b.amd_rx6700xt("telegraf-rocm-smi-rx6700xt_rocm612.json", rocm="6.1.2")
    d = drift_map(stack(a), stack(b))
    assert d["rocm"] == (True, "ROCm minor version changed")
    assert "gpus" not in d  # the same card: names differ between ROCm releases but not the GPU


def test_torch_change_matters(make_machine: Make) -> None:
    a = stack(nvidia(make_machine("a"), "telegraf-a100-sxm4-v12.xml", torch="cuda_ok"))
    b = stack(nvidia(make_machine("b"), "telegraf-a100-sxm4-v12.xml", torch="cpu_build"))
    d = drift_map(a, b)
    assert d["torch"][0] and d["torch_build"][0] and d["cuda_runtime"][0]


def test_kernel_without_rebuilt_module_matters_with_it_cosmetic(make_machine: Make) -> None:
    old = stack(nvidia(make_machine("old"), "telegraf-a100-sxm4-v12.xml"))
    new = make_machine("new")
    nvidia(new, "telegraf-a100-sxm4-v12.xml")
    new.write("proc/sys/kernel/osrelease", "6.5.0-17-generic\n")
    assert drift_map(old, stack(new))["kernel"] == (
        True,
        "kernel changed and the nvidia module was not rebuilt for it",
    )
    new.kernel_modules("6.5.0-17-generic", "updates/dkms/nvidia.ko")
    assert drift_map(old, stack(new))["kernel"] == (False, "kernel changed; the nvidia module exists for it")


def test_vbios_and_os_changes_are_cosmetic() -> None:
    gpu = {
        "vendor": "nvidia",
        "name": "Tesla T4",
        "memory_total_bytes": 1,
        "vbios": "90.04.84.00.06",
        "gfx_target": None,
    }
    a = {"gpus": [gpu], "os": "Ubuntu 22.04.4 LTS", "engines": {"vllm": "0.6.3"}}
    b = {
        "gpus": [{**gpu, "vbios": "90.04.96.00.01"}],
        "os": "Ubuntu 22.04.5 LTS",
        "engines": {"vllm": "0.7.0", "ollama": "0.11.6"},
    }
    d = drift_map(a, b)
    assert d["gpus.vbios"][0] is False and d["os"][0] is False
    assert d["engines.vllm"] == (True, "vllm version changed")
    assert d["engines.ollama"] == (False, "ollama installed")


def test_hash_ignores_metadata_and_changes_with_the_stack(make_machine: Make) -> None:
    s = stack(nvidia(make_machine("a"), "telegraf-a100-sxm4-v12.xml"))
    assert stack_hash(s) == stack_hash({**s, "hash": "x", "created_at": "now"})
    assert stack_hash(s) != stack_hash({**s, "torch": "2.6.0+cu124"})
    assert stack_hash(s).startswith("sha256:")


def test_file_round_trip(make_machine: Make, tmp_path: Path) -> None:
    doc = snapshot(nvidia(make_machine("a"), "telegraf-a100-sxm4-v12.xml").facts(probe_torch=False))
    path = tmp_path / "gpuledger.lock.json"
    write_lock(doc, path)
    lock = read_lock(path)
    assert lock.doc["format"] == LOCK_FORMAT and lock.doc["version"] == LOCK_VERSION
    assert lock.doc == doc.model_dump(mode="json")  # the file is the document's dump
    assert lock.hash_ok and lock.hash == doc.hash and doc.machine == "testbox"
    assert diff_stacks(lock.stack, doc.stack.model_dump(mode="json")) == []


def test_a_file_from_a_future_format_is_refused_clearly(tmp_path: Path) -> None:
    path = tmp_path / "future.json"
    path.write_text(json.dumps({"format": LOCK_FORMAT, "version": LOCK_VERSION + 1, "stack": {}}))
    with pytest.raises(
        InvalidInputError, match="lock format version 2; this gpuledger reads up to version 1"
    ):
        read_lock(path)
    assert main(["lock", "--check", str(path)]) == 4


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        '{"format": "other", "version": 1, "stack": {}}',
        '{"format": "gpuledger.lock", "version": "1", "stack": {}}',
        '{"format": "gpuledger.lock", "version": 1, "stack": []}',
    ],
)
def test_malformed_files_are_invalid_input(tmp_path: Path, content: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(InvalidInputError):
        read_lock(path)


def test_missing_file_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError):
        read_lock(tmp_path / "nope.json")
    assert main(["lock", "--check", str(tmp_path / "nope.json")]) == 3


def _use(machine: FakeMachine, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in machine.env.items():
        monkeypatch.setenv(key, value)


def test_cli_lock_then_check_same_is_0_and_drift_is_1(
    make_machine: Make, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    machine = nvidia(make_machine("box"), "telegraf-a100-sxm4-v12.xml")
    _use(machine, monkeypatch)
    path = tmp_path / "box.lock.json"
    assert main(["lock", "-o", str(path), "--root", str(machine.root)]) == 0
    assert read_lock(path).stack["nvidia_driver"] == "535.54.03"
    assert main(["lock", "--check", str(path), "--root", str(machine.root)]) == 0
    machine.command(
        "nvidia-smi", stdout=machine.fixture("nvidia-smi/telegraf-tesla-t4.xml")
    )  # a "driver change"
    capsys.readouterr()
    assert main(["lock", "--check", str(path), "--root", str(machine.root), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["same"] is False
    keys = {d["key"]: d["class"] for d in out["drift"]}
    assert keys["nvidia_driver"] == "matters" and keys["cuda"] == "matters"
    assert main(["lock", "--check", str(path), "--root", str(machine.root)]) == 1
    assert "matters" in capsys.readouterr().out


def test_cli_diff_between_two_snapshots(
    make_machine: Make, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    write_lock(snapshot(nvidia(make_machine("a"), "telegraf-tesla-t4.xml").facts(probe_torch=False)), a)
    write_lock(snapshot(nvidia(make_machine("b"), "telegraf-a100-sxm4-v12.xml").facts(probe_torch=False)), b)
    assert main(["lock", "--diff", str(a), str(a)]) == 0
    capsys.readouterr()
    assert main(["lock", "--diff", str(a), str(b), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert {d["key"] for d in out["drift"]} >= {"nvidia_driver", "cuda", "gpus"}


def test_cli_refuses_conflicting_modes(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    assert main(["lock", "--check", str(path), "--diff", str(path), str(path)]) == 2
    assert main(["lock", "-o", str(path), "--check", str(path)]) == 2


def test_fingerprint_has_the_keys_bench_stores(make_machine: Make) -> None:
    machine = nvidia(make_machine("fp"), "telegraf-a100-sxm4-v12.xml")
    fp = fingerprint(machine.root, env=machine.env)
    for key in ("driver", "cuda", "rocm", "torch", "engines", "gpus", "kernel", "hash", "python"):
        assert key in fp
    assert fp["hash"] == stack_hash(fp)
    assert fp["driver"] == "535.54.03"
    # The host is named (the setup-labour ledger's machine, the CPU for pricing) but not hashed:
    assert fp["machine"] and "logical_cpus" in fp["cpu"]
    assert stack_hash({**fp, "machine": "elsewhere", "cpu": {"logical_cpus": 999}}) == fp["hash"]


def test_fingerprint_reads_nvml_and_skips_a_slow_nvidia_smi(
    make_machine: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml("healthy_a100"))
    machine = nvidia(make_machine("fp"), "telegraf-a100-sxm4-v12.xml")
    machine.command("nvidia-smi", sleep=30)  # would take the whole timeout if it were asked
    start = time.monotonic()
    fp = fingerprint(machine.root, env=machine.env, use_nvml=True)
    assert time.monotonic() - start < 8
    assert (fp["driver"], fp["cuda"]) == ("535.54.03", "12.2")
    assert fp["gpus"][0]["name"] == "NVIDIA A100-SXM4-80GB" and fp["gpus"][0]["vbios"] == "92.00.36.00.02"
    assert fp["hash"] == stack_hash(stack(nvidia(make_machine("smi"), "telegraf-a100-sxm4-v12.xml")))


def test_fingerprint_on_this_machine_is_json_serialisable() -> None:
    fp = fingerprint()
    json.dumps(fp)
    assert fp["hash"].startswith("sha256:")


def _table_rows(out: str) -> dict[str, list[str]]:
    """A drawn table's rows: the first cell -> the others (a cell that wraps joined to the row above)."""
    rows: dict[str, list[str]] = {}
    last: list[str] | None = None
    for line in out.splitlines():
        if not line.startswith("│"):
            continue
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if cells[0]:
            last = rows.setdefault(cells[0], cells[1:])
        elif last is not None:
            last[:] = [f"{a} {b}".strip() for a, b in zip(last, cells[1:], strict=True)]
    return rows


def test_the_terminal_shows_the_snapshot_and_the_drift_the_documents_hold(
    make_machine: Make, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``gpuledger lock`` prints its LockDocument and ``--check`` its LockCheck, read as typed models (a
    renamed field is a type error in cli/lock_cmd.py): each row equals the model's field."""
    monkeypatch.setenv("COLUMNS", "200")
    machine = nvidia(make_machine("box"), "telegraf-a100-sxm4-v12.xml")
    _use(machine, monkeypatch)
    path = tmp_path / "box.lock.json"
    capsys.readouterr()
    assert main(["lock", "-o", str(path), "--root", str(machine.root)]) == 0
    rows = _table_rows(capsys.readouterr().out)
    lock = read_lock(path)
    doc = snapshot(machine.facts(probe_torch=False)).model_copy(update={"created_at": lock.doc["created_at"]})
    assert lock.doc == doc.model_dump(mode="json")  # what was written is this document
    s = doc.stack
    assert rows["hash"] == [doc.hash] and lock.hash == doc.hash
    assert rows["nvidia_driver"] == [str(s.nvidia_driver)] and rows["cuda"] == [str(s.cuda)]
    assert rows["torch"] == [str(s.torch)] and rows["gpu_count"] == [str(s.gpu_count)] == ["1"]
    assert rows["gpus"] == [", ".join(f"{g.vendor}: {g.name} (VBIOS {g.vbios})" for g in s.gpus)]
    toolkit = s.container_toolkit
    assert rows["container_toolkit"] == [
        f"nvidia_container_cli={toolkit.nvidia_container_cli}, nvidia_ctk={toolkit.nvidia_ctk}, "
        f"docker_runtimes={toolkit.docker_runtimes}"
    ]
    assert list(rows) == [*type(s).model_fields, "hash"]  # every field, in the stack's order
    machine.command("nvidia-smi", stdout=machine.fixture("nvidia-smi/telegraf-tesla-t4.xml"))
    assert main(["lock", "--check", str(path), "--root", str(machine.root)]) == 1
    rows = _table_rows(capsys.readouterr().out)
    checked = check(read_lock(path), snapshot(machine.facts(probe_torch=False)))
    assert checked.drift and not checked.same
    def shown(value: object) -> str:  # a list's items joined, nothing a dash
        return "—" if value is None else ", ".join(map(str, value)) if isinstance(value, list) else str(value)

    for d in checked.drift:
        assert rows[d.key] == [shown(d.locked), shown(d.live), d.class_, d.reason]
