"""amdsmi source and inventory against a fake ``amdsmi`` at the import boundary, one test per scenario;
plus the real import failure mode (a package that prints to stdout and raises KeyError)."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from pathlib import Path

import pytest
from telemetry_fakes import GIB, ManualClock

from gpuledger.records import DeviceWindow
from gpuledger.telemetry.amd import AmdSmiSource, amdsmi_inventory, celsius, number
from gpuledger.telemetry.base import SECONDARY_DIE
from gpuledger.telemetry.sampler import BackgroundSampler

Install = Callable[[str], types.ModuleType]


def sample_window(source: AmdSmiSource, clock: ManualClock, seconds: float = 2.0, step: float = 0.1
                  ) -> list[DeviceWindow]:
    sampler = BackgroundSampler([source], interval_s=step, t0=0.0)
    for i in range(round(seconds / step) + 1):
        clock.t = i * step
        sampler.poll(clock.t)
    return sampler.summaries(window_end=clock.t)


def test_healthy_mi300x_reads_every_metric_in_base_units(use_amdsmi: Install, clock: ManualClock) -> None:
    use_amdsmi("healthy MI300X")
    src = AmdSmiSource()
    assert src.available and src.reason is None
    assert [(d.key, d.name) for d in src.devices()] == [("amd:0", "AMD Instinct MI300X"),
                                                       ("amd:1", "AMD Instinct MI300X")]
    clock.t = 10.0
    got = {r.metric: r.value for r in src.read(10.0) if r.device.key == "amd:0"}
    assert got == {
        "util_ratio": pytest.approx(0.93), "mem_util_ratio": pytest.approx(0.37),
        "memory_used_bytes": 150 * GIB, "memory_total_bytes": 192 * GIB, "power_w": 550.0,
        "power_limit_w": 750.0, "energy_j": pytest.approx(5500.0, rel=1e-4), "temperature_hotspot_c": 71.0,
        "sm_clock_hz": 2100e6, "mem_clock_hz": 1300e6,
    }
    # MI300X has no edge sensor: a reason, not a zero
    assert src.unavailable()["amd:0"]["temperature_c"] == "amdsmi: N/A on this GPU"


def test_healthy_window_uses_the_validated_counter(use_amdsmi: Install, clock: ManualClock) -> None:
    use_amdsmi("healthy MI300X")
    s0, _ = sample_window(AmdSmiSource(), clock)
    assert (s0.energy_method, s0.energy_reason, s0.valid) == ("counter", None, True)
    assert s0.energy_j == pytest.approx(1100.0, rel=0.01)
    assert s0.mean_power_w == pytest.approx(550.0) and s0.sources == ["amdsmi"]


def test_counter_disagreeing_with_power_falls_back_to_integrated(use_amdsmi: Install,
                                                                 clock: ManualClock) -> None:
    use_amdsmi("counter disagrees with power")
    (s,) = sample_window(AmdSmiSource(), clock, seconds=10.0)
    assert s.energy_method == "integrated"
    assert s.energy_reason == "counter disagreed with integrated power by 37 %"
    assert s.energy_j == pytest.approx(2000.0)


def test_mi250_secondary_die_reporting_zero_is_not_taken_as_zero_watts(use_amdsmi: Install,
                                                                       clock: ManualClock) -> None:
    use_amdsmi("MI250 die reporting 0")
    primary, secondary = sample_window(AmdSmiSource(), clock)
    assert primary.energy_method == "counter" and primary.mean_power_w == pytest.approx(380.0)
    assert secondary.mean_power_w is None and secondary.peak_power_w is None
    assert secondary.energy_j is None and secondary.energy_method is None
    assert secondary.energy_reason is not None
    assert secondary.energy_reason.startswith("counter stuck at 0 and no power readings")
    assert secondary.unavailable["power_w"] == f"amdsmi: {SECONDARY_DIE}"
    assert secondary.valid  # the die was sampled all along; only its power lives elsewhere


def test_temperature_in_millidegrees_is_converted(use_amdsmi: Install) -> None:
    use_amdsmi("temperature in millidegrees")
    got = {r.metric: r.value for r in AmdSmiSource().read(0.0)}
    assert got["temperature_c"] == 45.0 and got["temperature_hotspot_c"] == 52.0


def test_value_helpers_follow_amdsmi_conventions() -> None:
    assert number("N/A") is None and number(0xFFFF) is None and number(0xFFFFFFFF) is None
    assert number(6) == 6.0 and number("6.5") == 6.5 and number("nan") is None and number(True) is None
    assert celsius(45) == 45 and celsius(45000) == 45.0


def test_driver_not_loaded_is_a_reason(use_amdsmi: Install) -> None:
    use_amdsmi("driver not loaded")
    src = AmdSmiSource()
    assert src.available is False
    assert src.reason == ("amdsmi: AMDSMI_STATUS_DRIVER_NOT_LOADED - Driver not loaded "
                          "(AmdSmiLibraryException)")


def test_gpu_lost_mid_window_keeps_the_other_gpu(use_amdsmi: Install, clock: ManualClock) -> None:
    use_amdsmi("GPU lost mid-window")
    ok, lost = sample_window(AmdSmiSource(), clock, seconds=1.0)
    assert ok.valid and not lost.valid
    assert "AMDSMI_STATUS_NOT_FOUND" in (lost.validity_reason or "")


def test_amdsmi_not_installed_is_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    src = AmdSmiSource()
    assert src.available is False
    assert src.reason is not None and src.reason.startswith(
        "amdsmi unavailable: the amdsmi Python package is not installed")


def test_amdsmi_without_rocm_prints_nothing_to_stdout_and_gives_its_reason(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # What the real amdsmi 7.0.2 wheel does on a machine without ROCm (COOKBOOK): two print() lines
    # on stdout, then KeyError('libamd_smi.so'). Built as a real package on sys.path.
    pkg = tmp_path / "site" / "amdsmi"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        'print("/opt/rocm/lib/libamd_smi.so: cannot open shared object file: No such file or directory")\n'
        'print("Unable to find libamd_smi.so library try installing amd-smi-lib from your package manager")\n'
        "raise KeyError('libamd_smi.so')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, "amdsmi", raising=False)
    src = AmdSmiSource()
    out, _ = capfd.readouterr()
    assert out == ""
    assert src.available is False
    assert src.reason == (
        "amdsmi unavailable: libamd_smi.so could not be loaded (/opt/rocm/lib/libamd_smi.so: cannot open "
        "shared object file: No such file or directory); is ROCm installed?"
    )
    inv = amdsmi_inventory()
    assert inv.error_class == "KeyError" and inv.error_message == src.reason
    assert capfd.readouterr().out == ""


def test_inventory_lists_versions_and_devices(use_amdsmi: Install) -> None:
    use_amdsmi("healthy MI300X")
    inv = amdsmi_inventory()
    assert inv.ok and inv.amdsmi_version == "7.0.2" and inv.lib_version == "25.5.1"
    assert inv.driver_version == "6.10.5"
    assert inv.to_dict()["devices"][0] == {
        "index": 0, "name": "AMD Instinct MI300X", "uuid": "c4ff74a1-0000-1000-80b2-000000000000",
        "gfx_target": "gfx942", "bdf": "0000:0c:00.0", "device_id": "0x74a1", "memory_total_bytes": 192 * GIB,
    }


def test_inventory_reports_the_init_error(use_amdsmi: Install) -> None:
    use_amdsmi("driver not loaded")
    inv = amdsmi_inventory()
    assert inv.error_class == "AmdSmiLibraryException" and "DRIVER_NOT_LOADED" in (inv.error_message or "")
