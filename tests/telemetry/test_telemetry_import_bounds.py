"""``telemetry import`` against hostile logs and concurrent use: a file of any kind read within its byte cap
(``/dev/zero``, a FIFO nobody writes to), units read from the header and the cells and converted, values no
GPU can read refused, power held against the catalog's TDP, memory that follows what is kept (the readings
near the window), not the file, at most 1,024 GPUs; and imports per node and transactional: a second node's
log keeps the first node's GPUs, two imports into one run at once both land."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from test_telemetry_import import (
    W0,
    WINDOW_S,
    imported,
    nvidia_smi_log,
    run_cli,
    sine,
    sine_integral,
    stored_run,
)

from gpuledger.records import RunInfo
from gpuledger.store import open_store
from gpuledger.telemetry import logs
from gpuledger.telemetry.attach import import_log

REPO = Path(__file__).resolve().parents[2]


def _cli(*args: str, stdin: Any = None, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """gpuledger in a child process (a file that blocks on open would hang this one)."""
    return subprocess.run([sys.executable, "-m", "gpuledger.cli.main", *args], capture_output=True, text=True,
                          stdin=stdin, timeout=timeout, cwd=REPO, env=os.environ.copy())


def _log(path: Path, header: str, cell: str, *, gpus: int = 1) -> Path:
    lines = [header]
    for n in range(-20, 221):
        stamp = datetime.fromtimestamp(W0 + n * 0.1).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
        lines += [f"{stamp}, {g}, {cell}" for g in range(gpus)]
    path.write_text("\n".join(lines) + "\n")
    return path


# ------------------------------------------------------------------------------------ files of any kind


def test_dev_zero_is_read_no_further_than_the_cap_in_one_line(tmp_path: Path) -> None:
    run_id = stored_run()
    done = _cli("telemetry", "import", run_id, "/dev/zero")
    assert done.returncode == 4, done.stderr
    assert done.stderr.startswith("error: /dev/zero: more than 1,073,741,824 bytes (1 GiB)")
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) <= 2


def test_dev_zero_under_a_memory_limit_ends_cleanly() -> None:
    run_id = stored_run()
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (768 << 20, 768 << 20)); "
            "from gpuledger.cli.main import main; "
            f"sys.exit(main(['telemetry', 'import', {run_id!r}, '/dev/zero']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 4, done.stderr  # the file is read a line at a time: 768 MiB of address space do
    assert "more than 1,073,741,824 bytes" in done.stderr and "Traceback" not in done.stderr


def test_a_fifo_nobody_writes_to_is_an_empty_log_not_a_hang(tmp_path: Path) -> None:
    run_id = stored_run()
    fifo = tmp_path / "node.fifo"
    os.mkfifo(fifo)
    done = _cli("telemetry", "import", run_id, str(fifo))
    assert done.returncode == 4 and "the log is empty" in done.stderr


def test_a_log_through_a_pipe_is_imported(tmp_path: Path) -> None:
    run_id = stored_run()
    log = nvidia_smi_log(tmp_path / "node1.csv", {0: sine})
    with log.open("rb") as fh:
        done = _cli("telemetry", "import", run_id, "/dev/stdin", "--format", "nvidia-smi", "--json", stdin=fh)
    assert done.returncode == 0, done.stderr
    gpu = json.loads(done.stdout)["devices"][0]
    assert gpu["energy_j"] == pytest.approx(sine_integral(0.0, WINDOW_S), rel=1e-4)


# ----------------------------------------------------------------------------------------------- units


@pytest.mark.parametrize(
    ("header", "cell", "watts", "memory"),
    [
        ("power.draw [mW], memory.used [MiB]", "300000 mW, 40000 MiB", 300.0, 40000 * 2**20),
        ("power.draw [kW], memory.used [GiB]", "0.3 kW, 40 GiB", 300.0, 40 * 2**30),
        ("power.draw [mW], memory.used [GiB]", "300000, 40", 300.0, 40 * 2**30),  # nounits: the header's
        ("power.draw [W], memory.used [MiB]", "300000 mW, 40 GiB", 300.0, 40 * 2**30),  # a cell's own unit
    ],
)
def test_units_in_the_header_and_the_cells_are_converted(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], header: str, cell: str, watts: float,
        memory: float) -> None:
    run_id = stored_run()
    log = _log(tmp_path / "units.csv", f"timestamp, index, {header}", cell)
    gpu = imported(capsys, run_id, log)["nvidia:0@units"]
    assert gpu["mean_power_w"] == pytest.approx(watts) and gpu["valid"] is True
    assert gpu["energy_j"] == pytest.approx(watts * WINDOW_S)
    assert gpu["peak_memory_bytes"] == memory


def test_a_column_in_a_unit_of_another_quantity_is_refused_naming_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_id = stored_run()
    log = _log(tmp_path / "odd.csv", "timestamp, index, power.draw [MiB]", "300")
    code, out, err = run_cli(capsys, "telemetry", "import", run_id, str(log))
    assert code == 4 and out == ""
    assert "column 'power.draw [MiB]' is in 'MiB': not a unit of power (W, mW, µW, uW, kW)" in err


def test_an_amd_smi_log_in_microwatts_is_converted(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    run_id = stored_run()
    lines = ["timestamp,gpu,socket_power (uW),gfx_activity"]
    lines += [f"{int(W0) + s},0,450000000,90" for s in range(-2, 23)]
    (tmp_path / "mi.csv").write_text("\n".join(lines) + "\n")
    gpu = imported(capsys, run_id, tmp_path / "mi.csv")["amd:0@mi"]
    assert gpu["mean_power_w"] == pytest.approx(450.0)
    lines = ["timestamp,gpu,socket_power,gfx_activity"]
    lines += [f"{int(W0) + s},0,450000000 µW,90" for s in range(-2, 23)]
    (tmp_path / "mi2.csv").write_text("\n".join(lines) + "\n")
    assert imported(capsys, run_id, tmp_path / "mi2.csv")["amd:0@mi2"]["mean_power_w"] == pytest.approx(450.0)


def test_a_dcgm_log_is_read_in_the_units_of_its_units_line(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    run_id = stored_run()
    lines = [f"{W0 - 2:.3f} #Entity   POWER   GPUTL", f"{W0 - 2:.3f} ID           kW      %"]
    lines += [f"{W0 + n * 0.2:.3f} GPU 0     0.25  77" for n in range(-10, 111)]
    (tmp_path / "dcgm.log").write_text("\n".join(lines) + "\n")
    gpu = imported(capsys, run_id, tmp_path / "dcgm.log", "--format", "dcgm")["nvidia:0@dcgm"]
    assert gpu["mean_power_w"] == pytest.approx(250.0)


@pytest.mark.parametrize("value", ["1e300 W", "1.7e308 W", "150 %"])
def test_values_no_gpu_can_read_are_malformed_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   value: str) -> None:
    run_id = stored_run()
    bad = {5: f"{datetime.fromtimestamp(W0 + 1).strftime('%Y/%m/%d %H:%M:%S.%f')[:-3]}, 0, "
              + (f"{value}, 50 %, 1 MiB" if value.endswith("W") else f"300 W, {value}, 1 MiB")}
    log = nvidia_smi_log(tmp_path / "absurd.csv", {0: lambda t: 300.0}, extra_lines=bad)
    got = imported(capsys, run_id, log)
    doc, gpu = got["_doc"], got["nvidia:0@absurd"]
    assert doc["malformed_rows"] == 1 and "is not a reading of one GPU" in doc["first_malformed"]
    assert gpu["energy_j"] == pytest.approx(300.0 * WINDOW_S) and gpu["valid"] is True


def test_power_over_the_catalog_tdp_is_left_out_and_marked_invalid(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_id = stored_run()
    lines = ["timestamp, index, name, power.draw [W]"]
    for n in range(-20, 221):
        stamp = datetime.fromtimestamp(W0 + n * 0.1).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
        watts = 99999.0 if n == 100 else 600.0
        lines.append(f"{stamp}, 0, NVIDIA H100 80GB HBM3, {watts:.1f} W")
    (tmp_path / "h100.csv").write_text("\n".join(lines) + "\n")
    gpu = imported(capsys, run_id, tmp_path / "h100.csv")["nvidia:0@h100"]
    assert gpu["valid"] is False and gpu["reasons"] == ["power_out_of_range"]
    assert "1 power reading(s) over 1,050 W (1.5 × the NVIDIA H100 SXM's 700 W TDP (catalog)) left out; " \
           "the highest 99999 W" in gpu["validity_reason"]
    assert gpu["energy_j"] == pytest.approx(600.0 * WINDOW_S) and gpu["peak_power_w"] == pytest.approx(600.0)
    _, show, _ = run_cli(capsys, "show", run_id, "--json")
    assert show["energy"]["valid"] is False and show["energy"]["reasons"] == ["power_out_of_range"]


# ------------------------------------------------------------------------------------ bounds on lists


def test_gpus_is_bounded(capsys: pytest.CaptureFixture[str]) -> None:
    run_id = stored_run()
    code, _, err = run_cli(capsys, "telemetry", "import", run_id, "/dev/null", "--gpus", "100000")
    assert code == 2 and "--gpus must be 1 to 1,024 (the GPUs of one node's log), got 100000" in err


def test_a_log_of_more_than_1024_gpus_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_id = stored_run()
    stamp = datetime.fromtimestamp(W0 + 1).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
    lines = ["timestamp, index, power.draw [W]"] + [f"{stamp}, {g}, 100 W" for g in range(1100)]
    (tmp_path / "many.csv").write_text("\n".join(lines) + "\n")
    code, _, err = run_cli(capsys, "telemetry", "import", run_id, str(tmp_path / "many.csv"))
    assert code == 4 and "names more than 1,024 GPUs" in err


def _peak_import(tmp_path: Path, log: Path) -> tuple[int, dict[str, Any]]:
    run_id = stored_run()
    store = open_store(None)
    try:
        tracemalloc.start()
        result = import_log(store, run_id, log)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        store.close()
    return peak, result.to_dict()


def test_memory_follows_the_readings_near_the_window_not_the_file(tmp_path: Path) -> None:
    # An hour of 8 GPUs at 5 Hz before the run: 9 MB of log that cannot be about the run.
    log = nvidia_smi_log(tmp_path / "long.csv", {g: sine for g in range(8)}, step=0.2, start=-3600.0,
                         end=22.0)
    size = log.stat().st_size
    peak, doc = _peak_import(tmp_path, log)
    assert doc["devices"] and all(d["valid"] for d in doc["devices"])
    assert peak < size / 2, (peak, size)  # held: the readings within 60 s of the window, a chunk, a line


def test_memory_of_a_log_all_inside_the_window_stays_near_its_size(tmp_path: Path) -> None:
    log = nvidia_smi_log(tmp_path / "dense.csv", {g: sine for g in range(8)}, step=0.005)  # 2 MB, 200 Hz
    size = log.stat().st_size
    peak, doc = _peak_import(tmp_path, log)
    assert len(doc["devices"]) == 8 and doc["samples_stored"] > 90_000
    assert peak < 3 * size, (peak, size)  # was 11x: a tuple and two floats per reading, the text, its lines


def test_a_log_with_more_readings_near_the_window_than_the_bound_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(logs, "MAX_READINGS", 1000)
    run_id = stored_run()
    code, _, err = run_cli(capsys, "telemetry", "import", run_id,
                           str(nvidia_smi_log(tmp_path / "dense.csv", {0: sine}, step=0.01)))
    assert code == 4 and "holds more than 1,000 readings near the run's window" in err


# ------------------------------------------------------------------------------- per node, transactional


def test_a_second_nodes_log_keeps_the_first_nodes_gpus(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    run_id = stored_run()
    first = imported(capsys, run_id, nvidia_smi_log(tmp_path / "node1.csv", {0: sine, 1: sine}))
    imported(capsys, run_id, nvidia_smi_log(tmp_path / "node2.csv", {0: sine, 1: sine}))
    store = open_store(None)
    try:
        devices = {d.device: d for d in store.get_run(run_id).telemetry_summary}
    finally:
        store.close()
    assert sorted(devices) == ["nvidia:0@node1", "nvidia:0@node2", "nvidia:1@node1", "nvidia:1@node2"]
    assert all(d.assigned for d in devices.values())
    assert devices["nvidia:0@node1"].energy_j == first["nvidia:0@node1"]["energy_j"]
    _, show, _ = run_cli(capsys, "show", run_id, "--json")
    assert len(show["energy"]["devices"]) == 4
    assert show["energy"]["joules"] == pytest.approx(4 * sine_integral(0.0, WINDOW_S), rel=1e-4)


class _Interleaved:
    """The real store, with another node's import run to its end between this import's reading of the run
    and its write: the interleaving two concurrent ``telemetry import``s can have."""

    def __init__(self, other: Path) -> None:
        self.store = open_store(None)
        self.other = other
        self.done = False

    def get_run(self, ref: str) -> RunInfo:
        run = self.store.get_run(ref)
        if not self.done:
            self.done = True
            second = open_store(None)
            try:
                import_log(second, ref, self.other)
            finally:
                second.close()
        return run

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


def test_two_imports_into_one_run_at_once_both_land(tmp_path: Path) -> None:
    run_id = stored_run()
    node1 = nvidia_smi_log(tmp_path / "node1.csv", {0: sine})
    node2 = nvidia_smi_log(tmp_path / "node2.csv", {0: sine})
    racing = _Interleaved(node2)
    try:
        import_log(racing, run_id, node1)  # type: ignore[arg-type]
        devices = [d.device for d in racing.store.get_run(run_id).telemetry_summary]
        sources = {s.source for s in racing.store.get_telemetry(run_id)}
    finally:
        racing.store.close()
    assert sorted(devices) == ["nvidia:0@node1", "nvidia:0@node2"]
    assert sources == {"nvidia-smi log node1.csv", "nvidia-smi log node2.csv"}


@pytest.mark.postgres
def test_imports_of_every_node_at_once_all_land_on_postgresql(
        tmp_path: Path, pg_fresh_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPULEDGER_DB", pg_fresh_url)
    run_id = stored_run()
    racing = _Interleaved(nvidia_smi_log(tmp_path / "node2.csv", {0: sine}))
    try:
        import_log(racing, run_id, nvidia_smi_log(tmp_path / "node1.csv", {0: sine}))  # type: ignore[arg-type]
    finally:
        racing.store.close()
    logs_ = [nvidia_smi_log(tmp_path / f"node{n}.csv", {0: sine, 1: sine}) for n in range(3, 7)]

    def one(log: Path) -> None:
        store = open_store(None)
        try:
            import_log(store, run_id, log)
        finally:
            store.close()

    with ThreadPoolExecutor(max_workers=4) as pool:  # four imports into one run, each in its transaction
        list(pool.map(one, logs_))
    store = open_store(None)
    try:
        devices = sorted(d.device for d in store.get_run(run_id).telemetry_summary)
    finally:
        store.close()
    assert devices == sorted(["nvidia:0@node1", "nvidia:0@node2",
                              *(f"nvidia:{g}@node{n}" for n in range(3, 7) for g in (0, 1))])
