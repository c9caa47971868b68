"""NVML source and inventory against a fake ``pynvml`` at the import boundary, one test per scenario."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable

import pytest
from telemetry_fakes import GIB, ManualClock, h100, make_fake_pynvml

from gpuledger.facts.nvml import nvml_inventory
from gpuledger.records import DeviceWindow
from gpuledger.telemetry.nvml import NvmlSource
from gpuledger.telemetry.sampler import BackgroundSampler

Install = Callable[[str], types.ModuleType]


def sample_window(source: NvmlSource, clock: ManualClock, seconds: float = 1.0, step: float = 0.1
                  ) -> list[DeviceWindow]:
    sampler = BackgroundSampler([source], interval_s=step, t0=0.0)
    n = round(seconds / step)
    for i in range(n + 1):
        clock.t = i * step
        sampler.poll(clock.t)
    return sampler.summaries(window_end=clock.t)


def test_healthy_multi_gpu_reads_every_metric_in_base_units(use_nvml: Install, clock: ManualClock) -> None:
    use_nvml("healthy multi-GPU")
    src = NvmlSource()
    assert src.available and src.reason is None
    assert [(d.key, d.index, d.vendor) for d in src.devices()] == [("nvidia:0", 0, "nvidia"),
                                                                  ("nvidia:1", 1, "nvidia")]
    readings = {(r.device.key, r.metric): r for r in src.read(42.0)}
    gpu0 = {m: r.value for (k, m), r in readings.items() if k == "nvidia:0"}
    assert gpu0 == {
        "util_ratio": pytest.approx(0.87), "mem_util_ratio": pytest.approx(0.41),
        "memory_used_bytes": 61 * GIB, "memory_total_bytes": 80 * GIB, "power_w": pytest.approx(312.0),
        "energy_j": pytest.approx(123_456.789), "temperature_c": 64.0, "sm_clock_hz": 1980e6,
        "mem_clock_hz": 2619e6, "power_limit_w": 700.0, "process_memory_bytes": 0.0,
    }
    assert all(r.source == "nvml" and r.t == 42.0 for r in readings.values())
    assert readings[("nvidia:1", "power_w")].value == pytest.approx(118.0)


def test_healthy_window_uses_the_validated_energy_counter(use_nvml: Install, clock: ManualClock) -> None:
    use_nvml("healthy multi-GPU")
    s0, s1 = sample_window(NvmlSource(), clock, seconds=2.0)
    assert (s0.energy_method, s0.energy_reason) == ("counter", None)
    assert s0.energy_j == pytest.approx(312.0 * 2.0, rel=0.01)
    assert s1.energy_j == pytest.approx(118.0 * 2.0, rel=0.01)
    assert s0.valid and s0.samples == 21 and s0.sources == ["nvml"]
    assert s0.mean_util_ratio == pytest.approx(0.87) and s0.peak_memory_bytes == 61 * GIB
    assert s0.name == "NVIDIA H100 80GB HBM3" and s0.uuid and s0.uuid.startswith("GPU-")


def test_power_not_supported_is_a_reason_not_a_zero(use_nvml: Install, clock: ManualClock) -> None:
    use_nvml("power NotSupported")
    src = NvmlSource()
    (summary,) = sample_window(src, clock)
    assert summary.mean_power_w is None and summary.energy_j is None and summary.energy_method is None
    assert summary.unavailable["power_w"] == "nvml: NVML: Not Supported (NVMLError_NotSupported)"
    assert "Not Supported" in (summary.energy_reason or "")
    assert summary.mean_util_ratio == pytest.approx(0.87)  # the rest still reads
    assert summary.valid


def test_unsupported_metrics_are_asked_once_not_every_tick(use_nvml: Install, clock: ManualClock) -> None:
    fake = use_nvml("power NotSupported")
    calls = {"n": 0}
    original = fake.nvmlDeviceGetPowerUsage

    def counting(h: int) -> int:
        calls["n"] += 1
        result: int = original(h)
        return result

    fake.nvmlDeviceGetPowerUsage = counting  # type: ignore[attr-defined]
    src = NvmlSource()
    for t in range(5):
        src.read(float(t))
    assert calls["n"] == 1


def test_gpu_lost_mid_window_keeps_the_other_gpu_and_marks_the_window(use_nvml: Install,
                                                                      clock: ManualClock) -> None:
    use_nvml("GPU lost mid-window")
    healthy, lost = sample_window(NvmlSource(), clock, seconds=1.0)
    assert healthy.valid and healthy.samples == 11
    assert lost.valid is False
    reason = lost.validity_reason or ""
    assert "GPU is lost (NVMLError_GpuIsLost)" in reason
    assert "power samples cover t=0.00..0.40 s of the window t=0.00..1.00 s" in reason
    assert lost.reasons == ["device_error", "window_not_covered"]
    assert lost.samples == 5  # t = 0.0 .. 0.4


def test_driver_not_loaded_is_a_reason(use_nvml: Install) -> None:
    use_nvml("driver not loaded")
    src = NvmlSource()
    assert src.available is False
    assert src.reason == ("Driver Not Loaded (NVMLError_DriverNotLoaded): "
                          "the nvidia kernel module is not loaded")


def test_library_not_found_is_a_reason(use_nvml: Install) -> None:
    use_nvml("library not found")
    src = NvmlSource()
    assert src.available is False and src.devices() == []
    assert src.reason is not None and src.reason.startswith(
        "NVML Shared Library Not Found (NVMLError_LibraryNotFound)")


def test_pre_volta_gpu_integrates_power_because_there_is_no_counter(use_nvml: Install,
                                                                    clock: ManualClock) -> None:
    use_nvml("energy counter absent (pre-Volta)")
    (summary,) = sample_window(NvmlSource(), clock, seconds=10.0)
    assert summary.energy_method == "integrated" and summary.energy_reason == "no counter"
    assert summary.energy_j == pytest.approx(281.6)
    assert "needs a Volta or newer GPU" in summary.unavailable["energy_j"]


def test_process_memory_counts_only_the_watched_pids(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = h100(0, processes=[(100, 3 * GIB), (200, 5 * GIB), (300, None)])  # 300: not reported
    monkeypatch.setitem(sys.modules, "pynvml", make_fake_pynvml([gpu], ManualClock()))
    every = {r.metric: r.value for r in NvmlSource().read(0.0)}
    mine = {r.metric: r.value for r in NvmlSource(pids=[200, 300]).read(0.0)}
    assert every["process_memory_bytes"] == 8 * GIB
    assert mine["process_memory_bytes"] == 5 * GIB


def test_close_shuts_nvml_down_once(use_nvml: Install) -> None:
    fake = use_nvml("healthy multi-GPU")
    src = NvmlSource()
    src.close()
    src.close()
    assert fake.calls == {"init": 1, "shutdown": 1}  # type: ignore[attr-defined]


def test_inventory_lists_versions_and_devices(use_nvml: Install) -> None:
    use_nvml("healthy multi-GPU")
    inv = nvml_inventory()
    assert inv.ok and inv.driver_version == "550.127.05" and inv.cuda_driver_version == "12.4"
    d = inv.to_dict()["devices"][1]
    assert d == {"index": 1, "name": "NVIDIA H100 80GB HBM3",
                 "uuid": "GPU-5a1c0000-0000-0000-0000-000000000001", "pci_bus_id": "00000000:18:00.0",
                 "pci_device_id": "0x2330", "pci_vendor_id": "0x10de",
                 "memory_total_bytes": 80 * GIB, "vbios": "96.00.99.00.01"}


@pytest.mark.parametrize(("scenario", "error_class"), [
    ("library not found", "NVMLError_LibraryNotFound"),
    ("driver not loaded", "NVMLError_DriverNotLoaded"),
])
def test_inventory_reports_the_error_class_for_doctor(use_nvml: Install, scenario: str,
                                                      error_class: str) -> None:
    use_nvml(scenario)
    inv = nvml_inventory()
    assert not inv.ok and inv.error_class == error_class and inv.devices == []
    assert inv.error_message and error_class in inv.error_message
