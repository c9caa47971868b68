"""Bad tool output is a reason, never a crash or a hang (issue 16, item 8).

``nvidia-smi``, ``amd-smi`` and ``rocm-smi`` are real programs on PATH (tests/telemetry/hostile_tools.py)
that print garbage, 10 MB, invalid UTF-8, NULs, quoted new lines, bare carriage returns, JSON too deep or
numbers too long to convert, or hang with a child of their own. They run through gpuledger's real runner
from ``gpuledger sample``, ``monitor`` and ``bench``; the GPU libraries are faked at their import boundary
(NVML "library not found", no amdsmi) so that the CLI fallbacks are what runs, on any machine.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hostile_tools import (
    KINDS,
    PAYLOADS,
    PRINTING,
    answers_once_then_hangs,
    hostile_tool,
    kill_survivors,
    survivors,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from telemetry_fakes import NVML_SCENARIOS, ManualClock

import gpuledger.facts
import gpuledger.telemetry
import gpuledger.telemetry.smi_cli as smi_cli
from gpuledger.cli.main import main
from gpuledger.facts.runner import decode_output, forget_hung_programs
from gpuledger.store import open_store
from gpuledger.telemetry import open_sources
from gpuledger.telemetry.smi_cli import (
    NVIDIA_QUERY,
    AmdSmiCliSource,
    CommandError,
    GpuRow,
    NvidiaSmiSource,
    RocmSmiSource,
    parse_amd_smi_metric,
    parse_amd_smi_static,
    parse_nvidia_smi_csv,
    parse_rocm_smi_json,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from stream_server import Scenario, StreamServer

A10_LINE = "0, GPU-a, NVIDIA A10, 00000000:17:00.0, 35, 12, 1024, 23028, 60.10, 45, 1695, 6251, 150.00\n"
REASON_MAX = 500  # a reason is one readable line, not the tool's output
SLACK_S = 3.0  # process start-up, Python imports, kill grace on a 2-core box

PARSERS: dict[str, Callable[[str], Sequence[object]]] = {
    "nvidia-smi noheader": lambda t: parse_nvidia_smi_csv(t, NVIDIA_QUERY),
    "nvidia-smi header": parse_nvidia_smi_csv,
    "amd-smi metric": parse_amd_smi_metric,
    "amd-smi static": parse_amd_smi_static,
    "rocm-smi": parse_rocm_smi_json,
}


class Tools:
    """A PATH of hostile GPU tools and the pid file their processes write."""

    def __init__(self, base: Path) -> None:
        self.bin = base / "bin"
        self.bin.mkdir()
        self.pids = base / "pids"

    def add(self, name: str, kind: str) -> Path:
        return hostile_tool(self.bin, name, kind, self.pids)

    def survivors(self) -> list[int]:
        return survivors(self.pids)


@pytest.fixture
def tools(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Tools]:
    """No GPU library (NVML "library not found", amdsmi missing) and a PATH with only the test's tools."""
    monkeypatch.setitem(sys.modules, "pynvml", NVML_SCENARIOS["library not found"](ManualClock()))
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    t = Tools(tmp_path)
    monkeypatch.setenv("PATH", str(t.bin))
    forget_hung_programs()
    yield t
    forget_hung_programs()
    kill_survivors(t.pids)


def _check_reasons(rows: Sequence[object]) -> None:
    for row in rows:
        if isinstance(row, GpuRow):
            for why in [row.error or "", *row.missing.values()]:
                assert len(why) < REASON_MAX


# --------------------------------------------------------------------------- parsers


@pytest.mark.parametrize("kind", PRINTING)
@pytest.mark.parametrize("parser", list(PARSERS))
def test_every_parser_turns_hostile_output_into_rows_or_one_reason(parser: str, kind: str) -> None:
    text = decode_output(PAYLOADS[kind][:4 * 1024 * 1024])  # what the runner hands over (capped, decoded)
    start = time.monotonic()
    try:
        rows = PARSERS[parser](text)
    except CommandError as exc:
        assert exc.message and len(exc.message) < REASON_MAX
    else:
        _check_reasons(rows)
    assert time.monotonic() - start < 2.0


@pytest.mark.parametrize(("text", "reason"), [
    ("0,NVIDIA A10\r,GPU-x\n", "new-line character seen in unquoted field"),
    ('0,"' + "x" * 200_000 + '"\n', "field larger than field limit"),
])
def test_the_csv_modules_errors_are_a_reason(text: str, reason: str) -> None:
    with pytest.raises(CommandError, match=reason) as caught:
        parse_nvidia_smi_csv(text, NVIDIA_QUERY)
    assert caught.value.message.startswith("nvidia-smi: output is not CSV")


def test_a_bad_value_is_that_metrics_reason_and_the_rest_is_read() -> None:
    line = "0, GPU-a, NVIDIA A10, 00000000:17:00.0, 35 W, zz, 1024, 23028, -60.10, 45, 1e999, 6251, 150.00\n"
    (row,) = parse_nvidia_smi_csv(line, NVIDIA_QUERY)
    assert row.error is None and row.name == "NVIDIA A10"
    assert row.missing == {
        "util_ratio": "nvidia-smi utilization.gpu: value '35 W', expected unit '%'",
        "mem_util_ratio": "nvidia-smi utilization.memory: 'zz' is not a number",
        "power_w": "nvidia-smi power.draw: '-60.10' is negative",
        "sm_clock_hz": "nvidia-smi clocks.current.sm: '1e999' is not a number",
    }
    assert row.values["memory_total_bytes"] == 23028 * 1024 * 1024 and row.values["power_limit_w"] == 150.0


def test_a_row_of_the_wrong_length_is_that_gpus_reason() -> None:
    good = "0, GPU-a, NVIDIA A10, 00000000:17:00.0, 35, 12, 1024, 23028, 60.10, 45, 1695, 6251, 150.00"
    first, second = parse_nvidia_smi_csv(f"{good}\n1, garbage\n", NVIDIA_QUERY)
    assert first.error is None and second.index == 1
    assert second.error == "nvidia-smi: row 2 has 2 values for 13 fields: '1,garbage'"


def test_amd_smi_values_that_are_no_reading_are_reasons() -> None:
    text = json.dumps([{
        "gpu": 0,
        "usage": {"gfx_activity": {"value": 40, "unit": "furlong"},
                  "umc_activity": {"value": -3, "unit": "%"}},
        "power": {"socket_power": {"value": 10**400, "unit": "W"}},
        "temperature": {"edge": {"nested": [1, 2]}},
        "mem_usage": {"used_vram": {"value": 512, "unit": "MB"}},
    }])
    (row,) = parse_amd_smi_metric(text)
    assert row.values == {"memory_used_bytes": 512 * 1024 * 1024}
    assert row.missing["util_ratio"] == "amd-smi usage.gfx_activity: unknown unit 'furlong'"
    assert row.missing["mem_util_ratio"] == "amd-smi usage.umc_activity: -3 is negative"
    assert row.missing["power_w"] == "amd-smi power.socket_power: a number out of range"
    assert row.missing["temperature_c"] == "amd-smi temperature.edge: a JSON dict, not a value"


@pytest.mark.parametrize("parser", list(PARSERS))
@given(text=st.text(max_size=400))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_text_is_rows_or_one_reason(parser: str, text: str) -> None:
    try:
        _check_reasons(PARSERS[parser](text))
    except CommandError as exc:
        assert len(exc.message) < REASON_MAX


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["gpu", "value", "unit", "usage", "power", "socket_power", "gfx_activity", "card0",
                         "asic", "market_name", "vram", "size", "limit", "GPU use (%)", "clock", "gpu_data"]),
        inner, max_size=4),
    max_leaves=20,
)


@pytest.mark.parametrize("parser", ["amd-smi metric", "amd-smi static", "rocm-smi"])
@given(doc=_json)
@settings(max_examples=200, deadline=None)
def test_any_json_is_rows_or_one_reason(parser: str, doc: Any) -> None:
    try:
        _check_reasons(PARSERS[parser](json.dumps(doc)))
    except CommandError as exc:
        assert len(exc.message) < REASON_MAX


# --------------------------------------------------------------------------- sources, real runner


@pytest.mark.parametrize("kind", KINDS)
def test_a_hostile_nvidia_smi_leaves_its_source_unavailable_with_a_reason(tools: Tools, kind: str) -> None:
    tools.add("nvidia-smi", kind)
    start = time.monotonic()
    src = NvidiaSmiSource(timeout_s=1.0)
    assert time.monotonic() - start < 1.0 + SLACK_S
    assert src.available is False and src.reason is not None
    assert "nvidia-smi" in src.reason and len(src.reason) < REASON_MAX
    assert tools.survivors() == []


def test_ten_megabytes_are_not_read_past_the_cap(tools: Tools) -> None:
    tools.add("nvidia-smi", "huge")
    src = NvidiaSmiSource()
    assert src.reason == "nvidia-smi: printed more than 4194304 bytes on stdout; stopped reading, killed it"


def test_a_hanging_tool_is_killed_with_its_child(tools: Tools) -> None:
    tools.add("rocm-smi", "hang")
    start = time.monotonic()
    src = RocmSmiSource(timeout_s=0.5)
    assert time.monotonic() - start < 0.5 + SLACK_S
    assert src.reason == "rocm-smi: timed out after 0.5 s (killed with its process group)"
    assert tools.survivors() == []
    again = RocmSmiSource(timeout_s=0.5)  # the same program in the same process is not waited for again
    assert again.reason is not None and again.reason.startswith("rocm-smi: not run: rocm-smi did not finish")


def test_opening_telemetry_is_bounded_when_every_tool_hangs(tools: Tools, monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path: Path) -> None:
    for name in ("nvidia-smi", "amd-smi", "rocm-smi"):
        tools.add(name, "hang")
    monkeypatch.setattr(gpuledger.telemetry, "CLI_PROBE_TIMEOUT_S", 1.0)
    monkeypatch.setattr(gpuledger.telemetry, "CLI_OPEN_BUDGET_S", 1.5)
    start = time.monotonic()
    sources = open_sources(tmp_path)
    took = time.monotonic() - start
    assert took < 1.5 + SLACK_S  # the probes run side by side and share one budget
    reasons = {s.name: s.reason for s in sources if not s.available}
    assert "timed out after 1 s" in str(reasons["nvidia-smi"])
    assert "timed out after 1 s" in str(reasons["amd-smi"])
    assert str(reasons["rocm-smi"]).startswith("rocm-smi: ")  # what was left of the budget, or none of it
    assert tools.survivors() == []


def test_one_unreadable_gpu_is_one_reason_and_the_others_are_measured() -> None:
    good = "0, GPU-a, NVIDIA A10, 00000000:17:00.0, 35, 12, 1024, 23028, 60.10, 45, 1695, 6251, 150.00"
    outputs = iter([f"{good}\n1, \x00\x00\n", f"{good}\n1, \x00\x00\n"])
    src = NvidiaSmiSource(lambda args, timeout: next(outputs))
    assert src.available and [d.key for d in src.devices()] == ["nvidia:0"]
    assert src.reason == ("1 of 2 GPUs not measured: nvidia-smi: row 2 has 2 values for 13 fields: "
                          "'1,\\x00\\x00'")
    assert {r.metric for r in src.read(1.0)} >= {"power_w", "util_ratio"}


def test_a_row_garbled_mid_window_is_a_reason_for_that_gpus_metrics() -> None:
    rows = ["0, GPU-a, NVIDIA A10, 00000000:17:00.0, 35, 12, 1024, 23028, 60.10, 45, 1695, 6251, 150.00",
            "1, GPU-b, NVIDIA A10, 00000000:18:00.0, 35, 12, 1024, 23028, 61.10, 45, 1695, 6251, 150.00"]
    outputs = iter(["\n".join(rows) + "\n", rows[0] + "\n1, \ufffd\ufffd\n"])
    src = NvidiaSmiSource(lambda args, timeout: next(outputs))
    readings = src.read(1.0)
    assert {r.device.key for r in readings} == {"nvidia:0"}
    assert src.unavailable()["nvidia:1"]["power_w"].startswith("nvidia-smi: row 2 has 2 values")
    assert "nvidia:1" not in src.device_errors()  # it is still listed; its line was unreadable


def test_amd_smi_garbage_in_static_leaves_names_unknown_with_the_reason() -> None:
    metric = json.dumps([{"gpu": 0, "power": {"socket_power": {"value": 90, "unit": "W"}}}])
    answers = {"metric": metric, "static": "[" * 100_000}
    src = AmdSmiCliSource(lambda args, timeout: answers[args[1]])
    assert src.available
    assert src.reason == "GPU names unknown: amd-smi JSON does not parse: nested too deeply"


# --------------------------------------------------------------------------- the commands


def _sample(tmp_path: Path, capsys: pytest.CaptureFixture[str],
            duration: str = "0.3") -> tuple[int, Any, str]:
    code = main(["sample", "--duration", duration, "--interval", "0.1", "--json", "--root", str(tmp_path)])
    out = capsys.readouterr()
    return code, json.loads(out.out) if code == 0 else None, out.err


@pytest.mark.parametrize(("tool", "kind"), [
    *(("nvidia-smi", k) for k in KINDS),
    ("amd-smi", "deep_json"), ("amd-smi", "big_number_json"), ("amd-smi", "garbage"),
    ("rocm-smi", "deep_json"), ("rocm-smi", "big_number_json"), ("rocm-smi", "huge"),
])
def test_sample_with_a_hostile_tool_exits_0_and_names_the_tool(
    tools: Tools, tmp_path: Path, capsys: pytest.CaptureFixture[str], tool: str, kind: str
) -> None:
    tools.add(tool, kind)
    start = time.monotonic()
    code, doc, err = _sample(tmp_path, capsys)
    assert code == 0, err
    assert time.monotonic() - start < 0.3 + smi_cli.CLI_PROBE_TIMEOUT_S + SLACK_S
    assert "Traceback" not in err
    status = {s["name"]: s for s in doc["sources"]}[tool]
    assert status["available"] is False and tool in status["reason"] and len(status["reason"]) < REASON_MAX
    assert [d["device"] for d in doc["devices"]] == ["cpu"]
    assert tools.survivors() == []


def test_sample_with_a_tool_that_hangs_mid_window(
    tools: Tools, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    line = tmp_path / "line.csv"
    line.write_text(A10_LINE)
    answers_once_then_hangs(tools.bin, "nvidia-smi", line, tools.pids)
    monkeypatch.setattr(smi_cli, "CLI_TIMEOUT_S", 0.5)
    start = time.monotonic()
    code, doc, err = _sample(tmp_path, capsys, duration="1.5")
    assert code == 0, err
    assert time.monotonic() - start < 1.5 + 0.5 + SLACK_S
    status = {s["name"]: s for s in doc["sources"]}["nvidia-smi"]
    assert status["available"] is False
    assert "timed out after 0.5 s (killed with its process group)" in status["reason"]
    gpu = next(d for d in doc["devices"] if d["device"] == "nvidia:0")
    assert gpu["valid"] is False and "nvidia-smi failed at t=" in gpu["validity_reason"]
    assert tools.survivors() == []


def test_monitor_with_a_garbage_tool_and_a_hanging_one(
    tools: Tools, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = tmp_path / "line.csv"
    line.write_text(A10_LINE)
    answers_once_then_hangs(tools.bin, "nvidia-smi", line, tools.pids)
    tools.add("amd-smi", "carriage_returns")
    tools.add("rocm-smi", "deep_json")
    monkeypatch.setattr(smi_cli, "CLI_TIMEOUT_S", 0.5)
    start = time.monotonic()
    code = main(["monitor", "--listen", "127.0.0.1:0", "--interval", "200ms", "--duration", "2s", "--json",
                 "--root", str(tmp_path)])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert time.monotonic() - start < 2 + 0.5 + SLACK_S
    assert "Traceback" not in out.err
    json.loads(out.out)
    assert tools.survivors() == []  # every retry of the hanging tool was killed with its child


@pytest.mark.parametrize("kind", ["garbage", "huge", "carriage_returns", "hang"])
@pytest.mark.parametrize("telemetry", [False, True])
def test_bench_with_a_hostile_nvidia_smi_exits_0_and_is_bounded(
    tools: Tools, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], kind: str,
    telemetry: bool,
) -> None:
    tools.add("nvidia-smi", kind)
    monkeypatch.setattr(gpuledger.facts, "FAST_COMMAND_TIMEOUT_S", 1.0)  # the fingerprint's cap
    srv = StreamServer(Scenario(tokens=4)).start()
    try:
        start = time.monotonic()
        code = main(["bench", "--no-progress", "--json", *([] if telemetry else ["--no-telemetry"]),
                     "--base-url", srv.url, "--num-requests", "4", "--input-len", "8", "--output-len", "4"])
        took = time.monotonic() - start
    finally:
        srv.stop()
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "Traceback" not in out.err
    # the fingerprint waits at most its cap; a hung tool is then not probed again for telemetry
    assert took < 1.0 + (smi_cli.CLI_PROBE_TIMEOUT_S if kind != "hang" and telemetry else 0) + 2 * SLACK_S
    run_id = json.loads(out.out)["id"]
    store = open_store(None)
    try:
        run = store.get_run(run_id)
        assert run.status == "complete" and len(store.get_requests(run_id)) == 4
    finally:
        store.close()
    assert run.environment.hash  # the fingerprint was taken, without nvidia-smi's answer
    assert run.environment.nvidia_driver is None
    if telemetry:
        assert run.config.telemetry is not None and run.config.telemetry.sources is not None
        status = {s.name: s for s in run.config.telemetry.sources}["nvidia-smi"]
        assert status.available is False and status.reason is not None and "nvidia-smi" in status.reason
    assert tools.survivors() == []
