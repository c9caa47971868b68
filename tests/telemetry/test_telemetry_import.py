"""``gpuledger telemetry import RUN FILE``: logs of the server's node attached to a stored run by wall-clock
time, in the formats nvidia-smi, amd-smi and dcgmi dmon write (tests/fixtures/captures/nvidia-smi: the
header and cell shapes; nvidia-smi --help-query-gpu: the timestamp format), integrated by the one energy
computation and judged by its rules."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gpuledger.cli.main import main
from gpuledger.records import RunInfo
from gpuledger.store import open_store

START = datetime(2026, 11, 30, 14, 2, 0, 250000, tzinfo=UTC)
WINDOW_S = 20.0
W0 = START.timestamp()
Power = Callable[[float], float]


def sine(t: float) -> float:
    return 300.0 + 80.0 * math.sin(2 * math.pi * t / 7.0)


def sine_integral(a: float, b: float) -> float:
    """The hand integral of ``sine`` over [a, b], J."""
    k = 2 * math.pi / 7.0
    return 300.0 * (b - a) + 80.0 / k * (math.cos(k * a) - math.cos(k * b))


def stored_run() -> str:
    store = open_store(None)
    try:
        run_id = store.create_run(RunInfo(id="", engine="openai", model="served-model"))
        store.update_run(run_id, started_at=START, duration_s=WINDOW_S, status="complete")
    finally:
        store.close()
    return run_id


def nvidia_smi_log(path: Path, gpus: dict[int, Power], *, step: float = 0.1, start: float = -2.0,
                   end: float = 22.0, skip: Callable[[int, float], bool] = lambda g, t: False,
                   extra_lines: dict[int, str] | None = None) -> Path:
    """What ``nvidia-smi --query-gpu=timestamp,index,power.draw,utilization.gpu,memory.used --format=csv
    -lms 100`` writes: local-time timestamps, cells with their unit."""
    lines = ["timestamp, index, power.draw [W], utilization.gpu [%], memory.used [MiB]"]
    n = 0
    while start + n * step <= end + 1e-9:
        t = start + n * step
        stamp = datetime.fromtimestamp(W0 + t).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
        for g, power in gpus.items():
            if not skip(g, t):
                lines.append(f"{stamp}, {g}, {power(t):.2f} W, 87 %, 40123 MiB")
        n += 1
    for at, line in sorted((extra_lines or {}).items()):
        lines.insert(at, line)
    path.write_text("\n".join(lines) + "\n")
    return path


def amd_smi_log(path: Path, gpus: dict[int, Power], *, iso: bool = False) -> Path:
    """What ``amd-smi metric --power --usage --mem-usage --watch 1 --csv`` writes: the banner, then per tick
    the header and one row per GPU, epoch seconds (or, from a user's own loop, ISO times)."""
    lines = ["'CTRL' + 'C' to stop watching output:"]
    for second in range(-2, 23):
        t = float(second)
        stamp = datetime.fromtimestamp(W0 + t, UTC).isoformat() if iso else str(int(W0 + t))
        lines.append("timestamp,gpu,socket_power,gfx_activity,umc_activity,used_vram")
        for g, power in gpus.items():
            lines.append(f"{stamp},{g},{power(t):.0f},93,40,183265")
    path.write_text("\n".join(lines) + "\n")
    return path


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any, str]:
    code = main(list(args))
    out = capsys.readouterr()
    doc = json.loads(out.out) if out.out.strip().startswith("{") else out.out
    return code, doc, out.err


def imported(capsys: pytest.CaptureFixture[str], run_id: str, log: Path, *extra: str) -> dict[str, Any]:
    code, doc, err = run_cli(capsys, "telemetry", "import", run_id, str(log), "--json", *extra)
    assert code == 0, err
    return {d["device"]: d for d in doc["devices"]} | {"_doc": doc}


def test_an_nvidia_smi_log_gives_each_gpus_energy_equal_to_the_hand_integral(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_id = stored_run()
    bad = {60: "garbage that is not a row", 90: "2026/11/30 14:02:99.000, 0, x W, 1 %, 1 MiB"}
    log = nvidia_smi_log(tmp_path / "node1.csv", {0: sine, 1: lambda t: 200.0}, extra_lines=bad)
    got = imported(capsys, run_id, log)
    doc = got.pop("_doc")
    assert doc["format"] == "nvidia-smi" and doc["malformed_rows"] == 2
    assert doc["first_malformed"].startswith("line 61: 1 cells")
    gpu0, gpu1 = got["nvidia:0@node1"], got["nvidia:1@node1"]
    assert gpu0["energy_j"] == pytest.approx(sine_integral(0.0, WINDOW_S), rel=0.005)
    assert gpu0["energy_j"] == pytest.approx(sine_integral(0.0, WINDOW_S), rel=1e-4)  # in fact much closer
    assert gpu1["energy_j"] == pytest.approx(200.0 * WINDOW_S, rel=1e-6)
    assert gpu0["valid"] and gpu0["reasons"] == [] and gpu0["energy_method"] == "integrated"
    assert gpu0["mean_util_ratio"] == pytest.approx(0.87) and gpu0["peak_memory_bytes"] == 40123 * 2**20
    assert gpu0["assigned"] is True and gpu0["sources"] == ["nvidia-smi log node1.csv"]

    code, show, _ = run_cli(capsys, "show", run_id, "--json")
    assert code == 0
    energy = show["energy"]
    assert energy["valid"] is True and energy["reasons"] == [] and energy["basis"] == "assigned"
    assert energy["joules"] == pytest.approx(gpu0["energy_j"] + gpu1["energy_j"])
    assert [d["device"] for d in energy["devices"]] == ["nvidia:0@node1", "nvidia:1@node1"]
    assert energy["sources"] == ["nvidia-smi log node1.csv"]


def test_an_amd_smi_log_with_epoch_or_iso_timestamps(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    for iso in (False, True):
        run_id = stored_run()
        log = amd_smi_log(tmp_path / f"mi300x-{iso}.csv", {0: lambda t: 600.0 + 5.0 * t, 1: lambda t: 450.0},
                          iso=iso)
        got = imported(capsys, run_id, log)
        doc = got.pop("_doc")
        assert doc["format"] == "amd-smi" and doc["malformed_rows"] == 0
        gpu0 = got[f"amd:0@mi300x-{iso}"]
        # 1 s ticks of a ramp: the trapezoid is exact; the window's edges sit between ticks (interpolated)
        assert gpu0["energy_j"] == pytest.approx(600.0 * WINDOW_S + 2.5 * WINDOW_S**2, rel=0.005)
        assert got[f"amd:1@mi300x-{iso}"]["energy_j"] == pytest.approx(450.0 * WINDOW_S, rel=0.005)
        assert gpu0["valid"] and gpu0["mean_util_ratio"] == pytest.approx(0.93)


def test_a_five_second_gap_is_gap_over_limit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_id = stored_run()
    log = nvidia_smi_log(tmp_path / "gap.csv", {0: sine, 1: sine},
                         skip=lambda g, t: g == 1 and 8.0 < t < 13.0)
    got = imported(capsys, run_id, log)
    assert got["nvidia:0@gap"]["valid"] is True
    gpu1 = got["nvidia:1@gap"]
    assert gpu1["valid"] is False and gpu1["reasons"] == ["gap_over_limit"]
    assert gpu1["validity_reason"].startswith("no power sample for 5.00 s from t=8.00 s (limit 3 s)")
    assert gpu1["energy_j"] == pytest.approx(sine_integral(0.0, WINDOW_S), rel=0.05)  # kept, as an estimate
    _, show, _ = run_cli(capsys, "show", run_id, "--json")
    assert show["energy"]["valid"] is False and show["energy"]["reasons"] == ["gap_over_limit"]


def test_a_gpu_that_stops_early_does_not_cover_the_window(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    run_id = stored_run()
    log = nvidia_smi_log(tmp_path / "early.csv", {0: sine, 1: sine}, skip=lambda g, t: g == 0 and t > 14.0)
    got = imported(capsys, run_id, log)
    gpu0 = got["nvidia:0@early"]
    assert gpu0["valid"] is False and gpu0["reasons"] == ["window_not_covered"]
    assert "power samples cover t=0.00..14.00 s of the window t=0.00..20.00 s" in gpu0["validity_reason"]
    _, show, _ = run_cli(capsys, "show", run_id, "--json")
    assert show["energy"]["reasons"] == ["window_not_covered"]


def test_a_missing_gpu_is_device_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_id = stored_run()
    log = nvidia_smi_log(tmp_path / "one.csv", {0: sine})
    got = imported(capsys, run_id, log, "--gpus", "2")
    assert got["nvidia:0@one"]["valid"] is True
    missing = got["nvidia:1@one"]
    assert missing["valid"] is False and missing["reasons"] == ["device_missing"] and missing["samples"] == 0
    assert missing["assigned"] is True and "--gpus 2" in missing["assigned_by"]
    _, show, _ = run_cli(capsys, "show", run_id, "--json")
    energy = show["energy"]
    assert energy["valid"] is False and energy["reasons"] == ["device_missing"] and energy["joules"] is None
    assert [d["device"] for d in energy["devices"]] == ["nvidia:0@one", "nvidia:1@one"]


def test_gpus_beyond_the_runs_are_recorded_as_not_the_runs(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    run_id = stored_run()
    log = nvidia_smi_log(tmp_path / "shared.csv", {0: sine, 1: sine, 2: lambda t: 350.0})
    got = imported(capsys, run_id, log, "--gpus", "2")
    assert [got[f"nvidia:{g}@shared"]["assigned"] for g in (0, 1, 2)] == [True, True, False]
    _, show, _ = run_cli(capsys, "show", run_id, "--json")
    assert [d["device"] for d in show["energy"]["devices"]] == ["nvidia:0@shared", "nvidia:1@shared"]


def test_the_clock_offset_moves_the_log_onto_the_runs_window(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    run_id = stored_run()
    log = nvidia_smi_log(tmp_path / "late.csv", {0: lambda t: 100.0 + t}, start=-32.0, end=-8.0)
    code, _, err = run_cli(capsys, "telemetry", "import", run_id, str(log))
    assert code == 4 and "they do not meet" in err and err.count("\n") <= 3  # 30 s behind: nothing matches
    got = imported(capsys, run_id, log, "--clock-offset", "30")
    # the log's t = -30 is the window's 0: power there was 100 + (-30)
    assert got["nvidia:0@late"]["energy_j"] == pytest.approx(70.0 * WINDOW_S + WINDOW_S**2 / 2, rel=1e-4)


def test_a_dcgmi_dmon_log_with_a_wall_clock_prefix(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    run_id = stored_run()
    lines = []
    for n in range(-10, 111):
        t = n * 0.2
        if n % 25 == -10 % 25:  # dmon repeats its two header lines
            lines += [f"{W0 + t:.3f} #Entity   POWER   TOTEC   GPUTL  FBUSD",
                      f"{W0 + t:.3f} ID           W      mJ      %     MB"]
        lines.append(f"{W0 + t:.3f} GPU 0     {sine(t):.3f}  {int(1e9 + 1000 * sine_integral(0, t))}"
                     f"  77  30000")
    log = tmp_path / "dcgm.log"
    log.write_text("\n".join(lines) + "\n")
    got = imported(capsys, run_id, log, "--format", "dcgm")
    gpu = got["nvidia:0@dcgm"]
    assert gpu["energy_method"] == "counter" and gpu["valid"]  # TOTEC agrees with the integral of POWER
    assert gpu["energy_j"] == pytest.approx(sine_integral(0.0, WINDOW_S), rel=0.005)
    assert gpu["mean_util_ratio"] == pytest.approx(0.77)


def test_a_log_without_a_power_column_is_one_clear_error(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    run_id = stored_run()
    log = tmp_path / "nopower.csv"
    log.write_text("timestamp, index, utilization.gpu [%]\n2026/11/30 14:02:00.250, 0, 50 %\n")
    code, out, err = run_cli(capsys, "telemetry", "import", run_id, str(log), "--json")
    assert code == 4 and out == ""
    assert "the nvidia-smi log has no power column (columns: timestamp, index, utilization.gpu [%])" in err
    assert "Traceback" not in err


def test_a_dcgm_log_without_timestamps_says_how_to_add_them(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    run_id = stored_run()
    log = tmp_path / "raw.log"
    log.write_text("#Entity   POWER   GPUTL\nID           W      %\nGPU 0     120.5   40\n")
    code, _, err = run_cli(capsys, "telemetry", "import", run_id, str(log))
    assert code == 4 and "no timestamps" in err and "ts '%.s'" in err


def test_an_unknown_run_or_file_is_not_found(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_id = stored_run()
    assert run_cli(capsys, "telemetry", "import", "zzzzzzzz", str(tmp_path / "x.csv"))[0] == 3
    assert run_cli(capsys, "telemetry", "import", run_id, str(tmp_path / "absent.csv"))[0] == 3


def test_importing_the_same_log_twice_stores_its_samples_once(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    run_id = stored_run()
    log = nvidia_smi_log(tmp_path / "twice.csv", {0: sine})
    first = imported(capsys, run_id, log)["_doc"]
    second = imported(capsys, run_id, log)["_doc"]
    assert first["samples_stored"] > 0 and second["samples_stored"] == 0
    store = open_store(None)
    try:
        run = store.get_run(run_id)
        samples = store.get_telemetry(run_id)
    finally:
        store.close()
    assert [d.device for d in run.telemetry_summary] == ["nvidia:0@twice"]
    assert len(samples) == first["samples_stored"]


def test_hostile_rows_are_counted_and_the_rest_imported(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    run_id = stored_run()
    bad = {5: "2026/11/30 14:02:00.300, -1, 100.00 W, 1 %, 1 MiB", 6: "\x00\x01\x02 binary",
           7: "2026/11/30 14:02:00.300, 0, 1e400 W, 1 %, 1 MiB", 8: '2026/11/30 14:02:00.300, 0, "300 W, 1 %'}
    log = nvidia_smi_log(tmp_path / "hostile.csv", {0: lambda t: 300.0}, extra_lines=bad)
    log.write_bytes(b"\xef\xbb\xbf" + log.read_bytes())  # saved by an editor: a byte-order mark first
    got = imported(capsys, run_id, log)
    doc = got.pop("_doc")
    assert doc["malformed_rows"] == 4 and set(got) == {"nvidia:0@hostile"}
    assert got["nvidia:0@hostile"]["energy_j"] == pytest.approx(300.0 * WINDOW_S)


def test_a_binary_file_is_one_line_and_exit_4(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_id = stored_run()
    log = tmp_path / "core.bin"
    log.write_bytes(bytes(range(256)) * 64)
    code, _, err = run_cli(capsys, "telemetry", "import", run_id, str(log))
    assert code == 4 and "Traceback" not in err and "format" in err
