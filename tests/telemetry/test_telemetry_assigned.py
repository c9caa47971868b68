"""Which devices a run used is what it was assigned (CUDA_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES, the
server's node and its selection, ``telemetry import --gpus``), not non-zero utilisation; and a measured
energy that is not valid is priced only as a labelled estimate."""

from __future__ import annotations

import json
import time
import types
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from stream_server import Scenario, StreamServer

from gpuledger.cli.main import main
from gpuledger.cost.pricing.runview import gpu_devices
from gpuledger.records import RunInfo
from gpuledger.store import open_store
from gpuledger.telemetry import BackgroundSampler, DeviceInfo
from gpuledger.telemetry.assign import decide, from_environment
from gpuledger.telemetry.nvml import NvmlSource

Install = Callable[[str], types.ModuleType]
H100 = "NVIDIA H100 80GB HBM3"
GPU0 = DeviceInfo("nvidia:0", "nvidia", 0, H100, "GPU-5a1c0000-0000-0000-0000-000000000000")
GPU1 = DeviceInfo("nvidia:1", "nvidia", 1, H100, "GPU-5a1c0000-0000-0000-0000-000000000001")
MI0 = DeviceInfo("amd:0", "amd", 0, "AMD Instinct MI300X")


@pytest.mark.parametrize("value, want", [
    ("1", {"nvidia:0": False, "nvidia:1": True}),
    ("GPU-5a1c0000-0000-0000-0000-000000000000", {"nvidia:0": True, "nvidia:1": False}),
    ("0,1", {"nvidia:0": True, "nvidia:1": True}),
    ("", {"nvidia:0": False, "nvidia:1": False}),  # no GPU for this process
    ("MIG-4f5e1c2a-7b1d-5d6e-9a0b-1c2d3e4f5a6b", {}),  # a MIG instance: cannot be mapped, nothing said
])
def test_cuda_visible_devices_says_which_gpus_are_the_runs(value: str, want: dict[str, bool]) -> None:
    got = from_environment([GPU0, GPU1, MI0], {"CUDA_VISIBLE_DEVICES": value})
    assert {k: a.assigned for k, a in got.items()} == want
    assert all(a.by == f"CUDA_VISIBLE_DEVICES={value}" for a in got.values())


def test_rocr_visible_devices_assigns_amd_gpus_and_no_variable_assigns_nothing() -> None:
    assert {k: a.assigned for k, a in from_environment([MI0, GPU0], {"ROCR_VISIBLE_DEVICES": "0"}).items()} \
        == {"amd:0": True}
    assert from_environment([GPU0, GPU1], {}) == {}


def test_remote_telemetry_makes_the_local_gpus_not_the_servers() -> None:
    got = decide([GPU0], {"nvidia:3@node": "--telemetry-from http://node:9400/metrics (gpu=3)"},
                 {"CUDA_VISIBLE_DEVICES": "0"})
    assert got["nvidia:3@node"].assigned is True and got["nvidia:0"].assigned is False
    assert "not of the server" in got["nvidia:0"].by


def test_the_sampler_records_the_assignment_from_its_environment(use_nvml: Install) -> None:
    use_nvml("healthy multi-GPU")
    sampler = BackgroundSampler([NvmlSource()], interval_s=0.05, env={"CUDA_VISIBLE_DEVICES": "1"}).start()
    time.sleep(0.3)
    sampler.stop()
    got = {s.device: (s.assigned, s.assigned_by) for s in sampler.summaries()}
    by = "CUDA_VISIBLE_DEVICES=1"
    assert got == {"nvidia:0": (False, by), "nvidia:1": (True, by)}


def _summary(device: str, peak_util: float | None, **extra: Any) -> dict[str, Any]:
    return {"device": device, "vendor": "nvidia", "name": H100, "peak_util_ratio": peak_util,
            "mean_power_w": 300.0, "energy_j": 3000.0, "valid": True, **extra}


def test_the_cost_model_counts_the_assigned_gpus_and_old_runs_keep_their_rule() -> None:
    # GPU 1 is busy with another job (100 %), GPU 0 is the run's and idles between requests
    new = RunInfo(id="n", telemetry_summary=[
        _summary("nvidia:0", 0.0, assigned=True, assigned_by="CUDA_VISIBLE_DEVICES=0"),
        _summary("nvidia:1", 1.0, assigned=False, assigned_by="CUDA_VISIBLE_DEVICES=0")])
    used, idle = gpu_devices(new)
    assert [d.key for d in used] == ["nvidia:0"] and [d.key for d in idle] == ["nvidia:1"]
    old = RunInfo(id="o", telemetry_summary=[_summary("nvidia:0", 0.0), _summary("nvidia:1", 1.0)])
    used, idle = gpu_devices(old)  # stored before the record: the busy GPU was counted
    assert [d.key for d in used] == ["nvidia:1"] and [d.key for d in idle] == ["nvidia:0"]


# ------------------------------------------------------------------ a stored run, a log, the price


@pytest.fixture
def benched(capsys: pytest.CaptureFixture[str]) -> Iterator[RunInfo]:
    srv = StreamServer(Scenario(identity="vllm", itl_s=0.01)).start()
    try:
        code = main(["bench", "--no-progress", "--json", "--no-telemetry", "--base-url", srv.url,
                     "--duration", "2", "--concurrency", "2", "--output-len", "8", "--warmup", "0"])
    finally:
        srv.stop()
    out = capsys.readouterr()
    assert code == 0, out.err
    store = open_store(None)
    try:
        yield store.get_run(json.loads(out.out)["id"])
    finally:
        store.close()


def _log(path: Path, run: RunInfo, gpus: dict[int, float],
         hole: tuple[int, float, float] | None = None) -> Path:
    assert run.started_at is not None and run.duration_s is not None
    w0 = run.started_at.replace(tzinfo=run.started_at.tzinfo or UTC).timestamp()
    lines = ["timestamp, index, power.draw [W], utilization.gpu [%], memory.used [MiB]"]
    n = -10
    while n * 0.1 <= run.duration_s + 1.0:
        t = n * 0.1
        stamp = datetime.fromtimestamp(w0 + t).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
        for g, watts in gpus.items():
            if hole is None or not (g == hole[0] and hole[1] < t < hole[2]):
                lines.append(f"{stamp}, {g}, {watts:.2f} W, {100 if g == 2 else 60} %, 30000 MiB")
        n += 1
    path.write_text("\n".join(lines) + "\n")
    return path


def _cost(capsys: pytest.CaptureFixture[str], run: RunInfo, tmp_path: Path) -> dict[str, Any]:
    profile = tmp_path / "own.yaml"
    profile.write_text("name: own\ngpu_price: 30000\nelectricity_per_kwh: 0.12\npue: 1.3\nutilisation: 0.6\n")
    code = main(["cost", run.id, "--profile", str(profile), "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    doc: dict[str, Any] = json.loads(out.out)
    return doc


def test_a_shared_nodes_busy_gpu_is_not_priced(benched: RunInfo, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    log = _log(tmp_path / "node.csv", benched, {0: 280.0, 1: 290.0, 2: 300.0})
    assert main(["telemetry", "import", benched.id, str(log), "--gpus", "2"]) == 0
    capsys.readouterr()
    cost = _cost(capsys, benched, tmp_path)
    assert [p["device"] for p in cost["power"]["per_device"]] == ["nvidia:0@node", "nvidia:1@node"]
    assert cost["power"]["estimate"] is False and cost["power"]["power_source"].startswith("measured")
    assert any(a.startswith("GPUs not assigned to the run are not priced: nvidia:2@node")
               for a in cost["assumptions"])


def test_an_energy_that_is_not_valid_is_priced_only_as_a_labelled_estimate(
        benched: RunInfo, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = _log(tmp_path / "holes.csv", benched, {0: 280.0, 1: 290.0}, hole=(1, 0.5, 1.2))
    assert main(["telemetry", "import", benched.id, str(log), "--gap-limit", "0.5", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [d["reasons"] for d in doc["devices"]] == [[], ["gap_over_limit"]]
    cost = _cost(capsys, benched, tmp_path)
    power = cost["power"]
    assert power["estimate"] is True
    assert power["power_source"] == "mixed: measured; estimate: measured but not valid"
    second = power["per_device"][1]
    assert second["power_w"] == pytest.approx(290.0)  # the figure kept...
    assert second["power_source"].startswith("estimate: measured, not valid (gap_over_limit)")  # ...labelled
    assert cost["energy"]["estimate"] is True
    assert any(w.startswith("power is not measured: mixed") for w in cost["warnings"])
    code = main(["show", benched.id, "--json"])
    energy = json.loads(capsys.readouterr().out)["energy"]
    assert code == 0 and energy["valid"] is False and energy["reasons"] == ["gap_over_limit"]
