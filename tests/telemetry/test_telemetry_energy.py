"""Energy maths and window summaries: pure functions over known inputs."""

from __future__ import annotations

import pytest

from gpuledger.records import TelemetrySample
from gpuledger.telemetry.base import DeviceInfo
from gpuledger.telemetry.energy import audit_energy, integrate_window, interpolate
from gpuledger.telemetry.sampler import (
    choose_energy,
    counter_delta,
    find_gaps,
    summarize_device,
    trapezoid_energy_j,
)

GPU = DeviceInfo(key="nvidia:0", vendor="nvidia", index=0, name="NVIDIA H100 80GB HBM3", uuid="GPU-1")


def constant_300w_for_10s() -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    times = [i * 0.1 for i in range(101)]
    power = [(t, 300.0) for t in times]
    counter = [(t, 5_000.0 + 300.0 * t) for t in times]  # counters start anywhere
    return power, counter


def test_constant_300_w_for_10_s_is_3000_j_by_both_methods() -> None:
    power, counter = constant_300w_for_10s()
    assert trapezoid_energy_j([t for t, _ in power], [w for _, w in power]) == pytest.approx(3000.0)
    assert counter_delta([v for _, v in counter]) == pytest.approx(3000.0)
    result = choose_energy(power, counter)
    assert result.method == "counter"
    assert result.energy_j == pytest.approx(3000.0)
    assert result.reason is None


def test_trapezoid_integrates_a_ramp_exactly() -> None:
    # 0 W -> 100 W linearly over 10 s: 500 J
    times = [float(t) for t in range(11)]
    assert trapezoid_energy_j(times, [10.0 * t for t in times]) == pytest.approx(500.0)


def test_trapezoid_handles_uneven_spacing() -> None:
    assert trapezoid_energy_j([0.0, 1.0, 4.0], [100.0, 100.0, 100.0]) == pytest.approx(400.0)


def test_counter_delta_adds_the_range_back_on_wraparound() -> None:
    # counter range 1000: 900 -> 950 -> (wrap) 20 -> 70 is 50 + 70 + 50 = 170
    assert counter_delta([900.0, 950.0, 20.0, 70.0], wrap_at=1000.0) == pytest.approx(170.0)


def test_counter_that_goes_backwards_without_a_known_range_is_rejected() -> None:
    with pytest.raises(ValueError, match="went backwards"):
        counter_delta([900.0, 20.0])


def test_no_counter_falls_back_to_integrated_power_and_says_so() -> None:
    power, _ = constant_300w_for_10s()
    result = choose_energy(power, [])
    assert (result.method, result.reason) == ("integrated", "no counter")
    assert result.energy_j == pytest.approx(3000.0)


def test_counter_disagreeing_by_37_percent_is_not_used() -> None:
    power, _ = constant_300w_for_10s()
    counter = [(t, 1.37 * 300.0 * t) for t, _ in power]
    result = choose_energy(power, counter)
    assert result.method == "integrated"
    assert result.energy_j == pytest.approx(3000.0)
    assert result.reason == "counter disagreed with integrated power by 37 %"
    assert result.counter_j == pytest.approx(4110.0)


def test_counter_within_5_percent_is_used() -> None:
    power, _ = constant_300w_for_10s()
    counter = [(t, 1.04 * 300.0 * t) for t, _ in power]
    result = choose_energy(power, counter)
    assert result.method == "counter"
    assert result.energy_j == pytest.approx(3120.0)


def test_counter_stuck_at_zero_is_flagged() -> None:
    power, _ = constant_300w_for_10s()
    result = choose_energy(power, [(t, 0.0) for t, _ in power])
    assert (result.method, result.reason) == ("integrated", "counter stuck at 0")
    assert result.energy_j == pytest.approx(3000.0)


def test_counter_stuck_at_zero_without_power_gives_no_energy_at_all() -> None:
    result = choose_energy([], [(0.0, 0.0), (1.0, 0.0)])
    assert result.energy_j is None and result.method is None
    assert result.reason == "counter stuck at 0 and no power readings"


def test_counter_without_power_is_used_but_marked_unvalidated() -> None:
    result = choose_energy([], [(0.0, 10.0), (2.0, 110.0)], counter_only_reason="not validated: rapl only")
    assert (result.energy_j, result.method, result.reason) == (100.0, "counter", "not validated: rapl only")


def test_nothing_measured_gives_none_with_a_reason() -> None:
    result = choose_energy([], [])
    assert result.energy_j is None and result.method is None and result.reason


def test_gaps_longer_than_the_limit_are_found_between_samples_that_bear_on_the_window() -> None:
    times = [-1.0, 0.5, 1.0, 6.0, 7.0, 20.0]
    assert find_gaps(times, 0.0, 7.0, 3.0) == [(1.0, pytest.approx(5.0))]
    # the nearest sample beyond each edge counts (it brackets the edge); samples further out do not
    assert find_gaps(times, 0.0, 8.0, 3.0) == [(1.0, pytest.approx(5.0)), (7.0, pytest.approx(13.0))]
    assert find_gaps([0.0, 1.0, 2.0, 3.0], 0.0, 3.0, 3.0) == []


def test_the_window_integral_interpolates_at_both_edges() -> None:
    # 0 W -> 100 W linearly, sampled each second from t=-0.5: the window 0..10 s holds exactly 500 J
    ramp = [(t - 0.5, 10.0 * (t - 0.5)) for t in range(12)]
    assert integrate_window(ramp, 0.0, 10.0) == pytest.approx(500.0)
    assert interpolate(ramp, 0.0) == pytest.approx(0.0) and interpolate(ramp, 10.0) == pytest.approx(100.0)


def test_a_ramp_audited_over_its_window_is_valid_and_exact() -> None:
    ramp = [(t - 0.5, 10.0 * (t - 0.5)) for t in range(12)]
    audit = audit_energy(ramp, [], start=0.0, end=10.0)
    assert audit.valid and audit.reasons == ()
    assert audit.energy_j == pytest.approx(500.0) and audit.method == "integrated"
    assert audit.mean_power_w == pytest.approx(50.0)


def test_a_five_second_gap_is_gap_over_limit_and_keeps_the_figure() -> None:
    power = [(float(t), 200.0) for t in (0, 1, 2, 7, 8, 9, 10)]
    audit = audit_energy(power, [], start=0.0, end=10.0)
    assert audit.reasons == ("gap_over_limit",) and not audit.valid
    assert audit.details == ("no power sample for 5.00 s from t=2.00 s (limit 3 s)",)
    assert audit.energy_j == pytest.approx(2000.0)  # the figure stays: an estimate, labelled by its reason


def test_a_device_that_stops_early_does_not_cover_the_window() -> None:
    power = [(t * 0.5, 300.0) for t in range(11)]  # 0..5 s of a 10 s window
    audit = audit_energy(power, [], start=0.0, end=10.0, edge_tolerance_s=0.5)
    assert audit.reasons == ("window_not_covered",)
    assert audit.details == ("power samples cover t=0.00..5.00 s of the window t=0.00..10.00 s",)
    assert audit.energy_j == pytest.approx(3000.0)  # the last reading held to the end


def test_a_first_sample_within_the_edge_tolerance_covers_the_edge() -> None:
    power = [(0.3 + t, 100.0) for t in range(10)]  # 0.3 .. 9.3 s, window 0 .. 9.6 s
    audit = audit_energy(power, [], start=0.0, end=9.6, edge_tolerance_s=0.5)
    assert audit.valid and audit.energy_j == pytest.approx(960.0)
    assert not audit_energy(power, [], start=0.0, end=9.6, edge_tolerance_s=0.2).valid


def test_a_counter_that_agrees_is_used_over_the_window() -> None:
    power = [(t - 0.5, 250.0) for t in range(12)]
    counter = [(t - 0.5, 1e6 + 250.0 * (t - 0.5)) for t in range(12)]
    audit = audit_energy(power, counter, start=0.0, end=10.0)
    assert audit.valid and audit.method == "counter" and audit.reason is None
    assert audit.energy_j == pytest.approx(2500.0) and audit.integrated_j == pytest.approx(2500.0)


def test_a_counter_disagreeing_by_more_than_5_percent_is_counter_mismatch() -> None:
    power = [(float(t), 250.0) for t in range(11)]
    counter = [(float(t), 1.08 * 250.0 * t) for t in range(11)]
    audit = audit_energy(power, counter, start=0.0, end=10.0)
    assert audit.reasons == ("counter_mismatch",)
    assert audit.details == ("counter disagreed with integrated power by 8 %",)
    assert audit.method == "integrated" and audit.energy_j == pytest.approx(2500.0)
    assert audit.counter_j == pytest.approx(2700.0)


def samples(device: str, t_values: list[float], metric: str, value: float, source: str = "nvml"
            ) -> list[TelemetrySample]:
    return [TelemetrySample(t, device, metric, value, source) for t in t_values]


def test_summary_of_a_steady_gpu_window() -> None:
    ts = [i * 0.1 for i in range(101)]
    data = (samples("nvidia:0", ts, "util_ratio", 0.5) + samples("nvidia:0", ts, "memory_used_bytes", 1e9)
            + samples("nvidia:0", ts, "memory_total_bytes", 8e10) + samples("nvidia:0", ts, "power_w", 300.0)
            + [TelemetrySample(t, "nvidia:0", "energy_j", 100.0 + 300.0 * t, "nvml") for t in ts]
            + samples("nvidia:1", ts, "power_w", 999.0))  # another device: ignored
    s = summarize_device(GPU, data, window_start=0.0, window_end=10.0, interval_s=0.1)
    d = s.to_dict()
    assert d["device"] == "nvidia:0" and d["vendor"] == "nvidia" and d["uuid"] == "GPU-1"
    assert d["mean_util_ratio"] == pytest.approx(0.5) and d["peak_util_ratio"] == pytest.approx(0.5)
    assert d["peak_memory_bytes"] == 1e9 and d["memory_total_bytes"] == 8e10
    assert d["mean_power_w"] == pytest.approx(300.0) and d["peak_power_w"] == 300.0
    assert d["energy_j"] == pytest.approx(3000.0) and d["energy_method"] == "counter"
    assert d["valid"] is True and d["validity_reason"] is None
    assert d["samples"] == 101 and d["sources"] == ["nvml"] and d["unavailable"] == {}
    contract_keys = {"device", "vendor", "name", "uuid", "index", "mean_util_ratio", "peak_util_ratio",
                     "peak_memory_bytes", "memory_total_bytes", "mean_power_w", "peak_power_w", "energy_j",
                     "energy_method", "energy_reason", "valid", "validity_reason", "samples", "interval_s",
                     "sources", "unavailable", "reasons", "assigned", "assigned_by",
                     "gap_limit_s"}
    assert contract_keys <= set(d)


def test_summary_marks_a_window_with_a_gap_over_the_limit() -> None:
    ts = [0.0, 0.1, 0.2, 0.3, 3.5, 3.6]
    s = summarize_device(GPU, samples("nvidia:0", ts, "power_w", 100.0), window_start=0.0, window_end=3.6,
                         interval_s=0.1)
    assert s.valid is False and s.reasons == ["gap_over_limit"]
    assert s.validity_reason == "no power sample for 3.20 s from t=0.30 s (limit 3 s)"
    shorter = summarize_device(GPU, samples("nvidia:0", [0.0, 0.1, 1.5, 1.6], "power_w", 100.0),
                               window_start=0.0, window_end=1.6, interval_s=0.1)
    assert shorter.valid  # 1.4 s without a sample is within the 3 s limit


def test_summary_of_a_device_without_samples_is_device_missing() -> None:
    s = summarize_device(GPU, samples("nvidia:1", [0.0, 1.0], "power_w", 100.0), window_start=0.0,
                         window_end=1.0, interval_s=0.1)
    assert s.reasons == ["device_missing"] and s.valid is False and s.energy_j is None


def test_summary_without_power_says_why_energy_is_missing() -> None:
    ts = [i * 0.1 for i in range(11)]
    why = {"power_w": "nvml: Not Supported (NVMLError_NotSupported)"}
    s = summarize_device(GPU, samples("nvidia:0", ts, "util_ratio", 0.1), window_start=0.0, window_end=1.0,
                         interval_s=0.1, unavailable=why)
    assert s.energy_j is None and s.energy_method is None
    assert s.energy_reason == "no power or energy readings (nvml: Not Supported (NVMLError_NotSupported))"
    assert s.unavailable["power_w"] == "nvml: Not Supported (NVMLError_NotSupported)"
    assert s.unavailable["energy_j"] == "no energy counter"


def test_counter_only_device_derives_mean_and_peak_power_from_the_counter() -> None:
    cpu = DeviceInfo(key="cpu", vendor="cpu", index=None, name="AMD EPYC")
    readings = ((0.0, 0.0), (1.0, 50.0), (2.0, 150.0))
    data = [TelemetrySample(t, "cpu", "energy_j", j, "rapl") for t, j in readings]
    s = summarize_device(cpu, data, window_start=0.0, window_end=2.0, interval_s=1.0,
                         counter_only_reason="not validated: rapl reports energy only")
    assert (s.energy_j, s.energy_method) == (150.0, "counter")
    assert s.mean_power_w == pytest.approx(75.0) and s.peak_power_w == pytest.approx(100.0)
    assert s.energy_reason == "not validated: rapl reports energy only"


def test_a_counter_that_moves_in_coarse_steps_is_not_used_and_not_called_a_mismatch() -> None:
    # read every 0.1 s, refreshed every 0.5 s (as an exporter refreshes its counter): over 2 s a step at
    # each end is up to 50 % of the window's energy, so a 5 % check means nothing
    power = [(t / 10, 300.0) for t in range(21)]
    counter = [(t / 10, 300.0 * (t // 5) * 0.5) for t in range(21)]
    audit = audit_energy(power, counter, start=0.0, end=2.0)
    assert audit.valid and audit.method == "integrated" and audit.energy_j == pytest.approx(600.0)
    assert (audit.reason or "").startswith("counter not used: it advances in steps of 0.50 s")


def test_a_counter_that_moves_at_every_read_is_checked_however_short_the_window() -> None:
    power = [(t / 10, 300.0) for t in range(21)]
    counter = [(t / 10, 30.0 * t) for t in range(21)]
    audit = audit_energy(power, counter, start=0.0, end=2.0)
    assert audit.valid and audit.method == "counter" and audit.energy_j == pytest.approx(600.0)
