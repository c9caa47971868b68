"""The CLI fallbacks against real captured outputs in tests/fixtures/captures: every nvidia-smi csv and every
amd json file parses, with correct units."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from gpuledger.telemetry.base import MIB, SECONDARY_DIE
from gpuledger.telemetry.smi_cli import (
    NVIDIA_QUERY,
    AmdSmiCliSource,
    CommandError,
    NvidiaSmiSource,
    RocmSmiSource,
    classify_amd_smi,
    load_amd_smi_json,
    nvidia_smi_args,
    parse_amd_smi_metric,
    parse_amd_smi_static,
    parse_nvidia_smi_csv,
    parse_rocm_smi_json,
    run_command,
)


def nvidia_csv(fixtures_dir: Path) -> list[Path]:
    return sorted((fixtures_dir / "nvidia-smi").glob("*.csv"))


def amd_json(fixtures_dir: Path) -> list[Path]:
    return sorted((fixtures_dir / "amd").glob("*.json"))


def test_there_are_fixtures_to_parse(fixtures_dir: Path) -> None:
    assert nvidia_csv(fixtures_dir) and len(amd_json(fixtures_dir)) >= 10


# --------------------------------------------------------------------------- nvidia-smi


def test_every_nvidia_smi_csv_fixture_parses(fixtures_dir: Path) -> None:
    for path in nvidia_csv(fixtures_dir):
        rows = parse_nvidia_smi_csv(path.read_text())
        assert rows, path.name
        for row in rows:
            assert row.name and row.values, path.name


def test_tesla_p100_csv_values_are_in_base_units(fixtures_dir: Path) -> None:
    (row,) = parse_nvidia_smi_csv((fixtures_dir / "nvidia-smi/netdata-tesla-p100.csv").read_text())
    assert row.name == "Tesla P100-PCIE-16GB"
    assert row.uuid == "GPU-ef1b2c9b-38d8-2090-2bd1-f567a3eb42a6"
    assert row.index == 0  # no index column: position
    assert row.values == {
        "memory_used_bytes": 0.0,
        "util_ratio": 0.0,
        "mem_util_ratio": 0.0,
        "temperature_c": 37.0,
        "power_w": pytest.approx(28.16),
        "sm_clock_hz": 405e6,
        "mem_clock_hz": 715e6,
    }


def test_values_with_units_and_not_available_markers_parse() -> None:
    text = ("index, name, memory.used [MiB], power.draw [W], utilization.gpu [%], enforced.power.limit [W]\n"
            "3, NVIDIA A10, 16280 MiB, [N/A], 57 %, [Not Supported]\n")
    (row,) = parse_nvidia_smi_csv(text)
    assert row.index == 3
    assert row.values == {"memory_used_bytes": 16280 * MIB, "util_ratio": pytest.approx(0.57)}
    assert row.missing == {"power_w": "nvidia-smi power.draw: N/A",
                           "power_limit_w": "nvidia-smi enforced.power.limit: Not Supported"}


def test_a_unit_other_than_the_expected_one_is_refused() -> None:
    with pytest.raises(CommandError, match="memory.used in 'GiB'"):
        parse_nvidia_smi_csv("memory.used [GiB]\n15\n")


def test_noheader_nounits_rows_use_the_queried_fields() -> None:
    line = ("1, GPU-abc, NVIDIA H100 80GB HBM3, 00000000:18:00.0, 99, 40, 70000, 81559, 690.55, 71, 1980, "
            "2619, 700.00")
    (row,) = parse_nvidia_smi_csv(line + "\n", NVIDIA_QUERY)
    assert (row.index, row.uuid, row.name, row.bus_id) == (1, "GPU-abc", "NVIDIA H100 80GB HBM3",
                                                           "00000000:18:00.0")
    assert row.values["power_w"] == pytest.approx(690.55)
    assert row.values["memory_total_bytes"] == 81559 * MIB
    assert row.values["power_limit_w"] == 700.0 and row.values["util_ratio"] == pytest.approx(0.99)


def test_every_queried_field_exists_in_nvidia_smi_help(fixtures_dir: Path) -> None:
    helptext = (fixtures_dir / "nvidia-smi/netdata-help-query-gpu.txt").read_text()
    known = set(re.findall(r'^"([\w.]+)"', helptext, re.MULTILINE))
    known |= set(re.findall(r'^"[\w.]+" or "([\w.]+)"', helptext, re.MULTILINE))
    assert set(NVIDIA_QUERY) <= known
    args = nvidia_smi_args()
    assert args[0] == "nvidia-smi" and args[-1] == "--format=csv,noheader,nounits"


# --------------------------------------------------------------------------- amd-smi / rocm-smi


def test_every_amd_json_fixture_is_recognised_and_parses(fixtures_dir: Path) -> None:
    seen = {}
    for path in amd_json(fixtures_dir):
        text = path.read_text()
        doc = json.loads(text)
        if isinstance(doc, dict) and any(k.startswith("card") for k in doc):
            rows = parse_rocm_smi_json(text)
            assert rows and all(r.vendor == "amd" and "util_ratio" in r.values for r in rows), path.name
            seen[path.name] = "rocm-smi"
            continue
        kind = classify_amd_smi(load_amd_smi_json(text))
        seen[path.name] = kind
        if kind == "metric":
            assert parse_amd_smi_metric(text), path.name
        elif kind == "static":
            assert parse_amd_smi_static(text), path.name
        else:
            assert kind == "topology", path.name  # no metrics in it: recognised, not parsed for values
            with pytest.raises(CommandError, match="got topology output"):
                parse_amd_smi_metric(text)
    assert seen["luckylinux-amd-smi-metric-rx6600.json"] == "metric"
    assert seen["luckylinux-amd-smi-static-rx6600.json"] == "static"
    assert seen["luckylinux-amd-smi-topology-rx6600.json"] == "topology"
    assert list(seen.values()).count("rocm-smi") == 9


def test_amd_smi_metric_rx6600_in_base_units(fixtures_dir: Path) -> None:
    (row,) = parse_amd_smi_metric((fixtures_dir / "amd/luckylinux-amd-smi-metric-rx6600.json").read_text())
    assert row.index == 0
    assert row.values == {
        "util_ratio": pytest.approx(0.01), "mem_util_ratio": 0.0, "power_w": 6.0, "energy_j": 0.0,
        "temperature_c": 36.0, "temperature_hotspot_c": 37.0, "sm_clock_hz": 800e6, "mem_clock_hz": 541e6,
        "memory_used_bytes": 202 * MIB, "memory_total_bytes": 8176 * MIB,  # amd-smi "MB" = MiB
    }


def test_amd_smi_metric_accepts_the_gpu_data_shape_and_na_values(fixtures_dir: Path) -> None:
    items = json.loads((fixtures_dir / "amd/luckylinux-amd-smi-metric-rx6600.json").read_text())
    items[0]["power"]["socket_power"] = "N/A"
    items[0]["power"]["average_socket_power"] = {"value": 0, "unit": "W"}  # secondary die
    items[0]["energy"]["total_energy_consumption"] = {"value": 1234567.0, "unit": "uJ"}
    (row,) = parse_amd_smi_metric(json.dumps({"gpu_data": items}))
    assert "power_w" not in row.values and row.missing["power_w"] == SECONDARY_DIE
    assert row.values["energy_j"] == pytest.approx(1.234567)


def test_amd_smi_static_rx6600_gives_name_bus_and_limits(fixtures_dir: Path) -> None:
    (st,) = parse_amd_smi_static((fixtures_dir / "amd/luckylinux-amd-smi-static-rx6600.json").read_text())
    assert (st.index, st.name, st.bdf, st.device_id) == (0, "Navi 23 [Radeon RX 6600/6600 XT", "0000:0b:00.0",
                                                         "0x73ff")
    assert st.vram_total_bytes == 8176 * MIB and st.power_limit_w == 100.0


def test_rocm_smi_mi100_in_base_units(fixtures_dir: Path) -> None:
    rows = parse_rocm_smi_json((fixtures_dir / "amd/telegraf-rocm-smi-mi100_rocm602.json").read_text())
    assert [r.index for r in rows] == [0, 1, 2, 3]
    r = rows[0]
    assert r.name == "Arcturus GL-XL [Instinct MI100]"
    assert (r.uuid, r.bus_id) == ("0x79ccd55167a2124a", "0000:83:00.0")
    assert r.values == {
        "util_ratio": 0.0, "mem_util_ratio": 0.0, "power_w": 36.0, "power_limit_w": 290.0,
        "temperature_c": 53.0, "temperature_hotspot_c": 55.0, "sm_clock_hz": 300e6, "mem_clock_hz": 1200e6,
        "memory_used_bytes": 6750208.0, "memory_total_bytes": 34342961152.0,
    }
    assert rows[1].values["power_w"] == 44.0


def test_rocm_smi_secondary_die_and_old_key_names(fixtures_dir: Path) -> None:
    (r602,) = parse_rocm_smi_json((fixtures_dir / "amd/telegraf-rocm-smi-rx6700xt_rocm602.json").read_text())
    assert "power_w" not in r602.values
    assert r602.missing["power_w"] == "rocm-smi Average Graphics Package Power (W): N/A (Secondary die)"
    (r430,) = parse_rocm_smi_json((fixtures_dir / "amd/telegraf-rocm-smi-rx6700xt_rocm430.json").read_text())
    assert r430.name == "AMD GPU 0"  # "Card series": "0x1002" is not a name
    assert r430.values["memory_used_bytes"] == 1622728704.0 and r430.values["power_w"] == 6.0
    (r612,) = parse_rocm_smi_json((fixtures_dir / "amd/telegraf-rocm-smi-rx6700xt_rocm612.json").read_text())
    assert r612.name == "Navi 22 [Radeon RX 6700/6700 XT / 6800M]"
    assert r612.values["sm_clock_hz"] == 0.0 and r612.values["mem_util_ratio"] == 0.0


def test_rocm_smi_accumulated_energy_is_microjoules() -> None:
    text = json.dumps({"card0": {"GPU use (%)": "99", "Energy counter": "3436801806",
                                 "Accumulated Energy (uJ)": "52583068287.32"}, "system": {}})
    (row,) = parse_rocm_smi_json(text)
    assert row.values["energy_j"] == pytest.approx(52583.06828732)


# --------------------------------------------------------------------------- sources and runners


class FixtureRunner:
    """Answers each command line with a captured output, as the real tool would print it."""

    def __init__(self, outputs: dict[str, str]) -> None:
        self.outputs = outputs
        self.calls: list[tuple[list[str], float]] = []

    def __call__(self, args: Sequence[str], timeout: float) -> str:
        self.calls.append((list(args), timeout))
        for prefix, text in self.outputs.items():
            if " ".join(args).startswith(prefix):
                return text
        raise CommandError(f"{args[0]}: not found on PATH")


def test_nvidia_smi_source_reads_through_the_runner() -> None:
    line = "0, GPU-abc, NVIDIA A10, 00000000:17:00.0, 35, 12, 1024, 23028, 60.10, 45, 1695, 6251, 150.00\n"
    runner = FixtureRunner({"nvidia-smi --query-gpu": line})
    src = NvidiaSmiSource(runner)
    assert src.available and src.min_interval_s == 1.0
    got = {r.metric: r.value for r in src.read(5.0)}
    assert got["power_w"] == pytest.approx(60.1) and got["memory_total_bytes"] == 23028 * MIB
    assert all(timeout > 0 for _, timeout in runner.calls)


def test_amd_smi_source_takes_names_from_static(fixtures_dir: Path) -> None:
    runner = FixtureRunner({
        "amd-smi metric": (fixtures_dir / "amd/luckylinux-amd-smi-metric-rx6600.json").read_text(),
        "amd-smi static": (fixtures_dir / "amd/luckylinux-amd-smi-static-rx6600.json").read_text(),
    })
    src = AmdSmiCliSource(runner)
    assert src.available
    assert [(d.key, d.name) for d in src.devices()] == [("amd:0", "Navi 23 [Radeon RX 6600/6600 XT")]
    got = {r.metric: r.value for r in src.read(1.0)}
    assert got["power_limit_w"] == 100.0 and got["power_w"] == 6.0


def test_rocm_smi_source_reads_every_card(fixtures_dir: Path) -> None:
    text = (fixtures_dir / "amd/telegraf-rocm-smi-mi100_rocm571.json").read_text()
    runner = FixtureRunner({"rocm-smi": text})
    src = RocmSmiSource(runner)
    assert [d.key for d in src.devices()] == [f"amd:{i}" for i in range(6)]
    assert len([r for r in src.read(0.0) if r.metric == "power_w"]) == 6


def test_a_missing_tool_is_a_reason() -> None:
    src = RocmSmiSource(FixtureRunner({}))
    assert src.available is False and src.reason == "rocm-smi: not found on PATH"


def test_run_command_reports_missing_failing_and_slow_tools(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="not found on PATH"):
        run_command(["gpuledger-no-such-tool"], 5)
    fails = tmp_path / "fails"
    fails.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate' >&2\nexit 9\n")
    fails.chmod(0o755)
    with pytest.raises(CommandError, match="exited with 9: NVIDIA-SMI has failed"):
        run_command([str(fails)], 5)
    with pytest.raises(CommandError, match="timed out after 0.2 s"):
        run_command(["sleep", "5"], 0.2)
    assert run_command(["echo", "ok"], 5) == "ok\n"
