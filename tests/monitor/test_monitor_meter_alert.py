"""The live energy counter and the low-utilisation alert, on a hand-moved clock."""

from __future__ import annotations

import pytest

from gpuledger.monitor import EnergyMeter, LowUtilAlert

GAP = 3.5  # what max_gap(1 s) gives


def test_constant_300_w_for_10_s_is_3000_j_from_the_counter_and_from_integrated_power() -> None:
    by_counter, by_power = EnergyMeter(), EnergyMeter()
    for t in range(11):
        by_counter.add(float(t), 300.0, 1000.0 + 300.0 * t, GAP)
        by_power.add(float(t), 300.0, None, GAP)
    assert by_counter.total_j == pytest.approx(3000.0)
    assert by_counter.method == "counter"
    assert by_power.total_j == pytest.approx(3000.0)
    assert (by_power.method, by_power.reason) == ("integrated", "no counter")


def test_a_counter_running_37_percent_fast_is_dropped_after_the_check_and_said_so() -> None:
    m = EnergyMeter()
    notes = [m.add(float(t), 200.0, 200.0 * 1.37 * t, GAP) for t in range(60)]
    said = [n for n in notes if n]
    assert len(said) == 1 and "disagreed with integrated power by 37 %" in said[0]
    assert m.method == "integrated"
    assert m.reason == "counter disagreed with integrated power by 37 %"
    # 29 intervals counted from the (fast) counter; the 30th completes the check and is integrated,
    # as are the 29 after it
    assert m.total_j == pytest.approx(29 * 274.0 + 30 * 200.0)


def test_a_counter_stuck_at_zero_is_not_a_counter() -> None:
    m = EnergyMeter()
    for t in range(5):
        m.add(float(t), 380.0, 0.0, GAP)
    assert m.total_j == pytest.approx(4 * 380.0)
    assert (m.method, m.reason) == ("integrated", "counter stuck at 0")

    dead = EnergyMeter()
    for t in range(5):
        dead.add(float(t), None, 0.0, GAP)
    assert dead.total_j == 0.0 and dead.method is None and not dead.has_data
    assert dead.reason == "counter stuck at 0 and no power readings"


def test_a_counter_going_backwards_falls_back_to_power_for_that_interval_only() -> None:
    m = EnergyMeter()
    m.add(0.0, 100.0, 5000.0, GAP)
    m.add(1.0, 100.0, 5100.0, GAP)
    m.add(2.0, 100.0, 10.0, GAP)  # reset
    assert m.reason is not None and "went backwards" in m.reason
    m.add(3.0, 100.0, 110.0, GAP)
    assert m.total_j == pytest.approx(300.0)
    assert m.method == "counter"


def test_counter_only_devices_count_the_counter_and_derive_power_from_it() -> None:
    m = EnergyMeter()  # RAPL: energy, no power reading
    m.add(0.0, None, 0.0, GAP)
    m.add(2.0, None, 50.0, GAP)
    assert m.total_j == 50.0 and m.method == "counter"
    assert m.last_power_w == pytest.approx(25.0) and m.power_derived


def test_power_is_not_integrated_across_a_gap() -> None:
    m = EnergyMeter()
    m.add(0.0, 100.0, None, GAP)
    m.add(1.0, 100.0, None, GAP)
    m.add(30.0, 100.0, None, GAP)  # 29 s without a reading: not made up
    m.add(31.0, 100.0, None, GAP)
    assert m.total_j == pytest.approx(200.0)


def test_alert_fires_once_utilisation_stayed_below_the_level_for_the_window() -> None:
    a = LowUtilAlert(level=0.2, window_s=60.0)
    events = {t: a.update(float(t), 0.05, GAP) for t in range(0, 61)}
    assert [t for t, e in events.items() if e] == [60]
    assert events[60] == "fired" and a.active


def test_alert_clears_on_the_first_reading_at_or_above_the_level() -> None:
    a = LowUtilAlert(level=0.2, window_s=10.0)
    for t in range(11):
        a.update(float(t), 0.0, GAP)
    assert a.active
    assert a.update(11.0, 0.19, GAP) is None
    assert a.update(12.0, 0.2, GAP) == "recovered"
    assert not a.active and a.below_since is None


def test_one_busy_reading_restarts_the_window() -> None:
    a = LowUtilAlert(level=0.2, window_s=10.0)
    for t in range(8):
        a.update(float(t), 0.1, GAP)
    a.update(8.0, 0.9, GAP)
    fired = [t for t in range(9, 25) if a.update(float(t), 0.1, GAP)]
    assert fired == [19]


def test_a_gap_in_the_readings_restarts_the_window() -> None:
    a = LowUtilAlert(level=0.2, window_s=10.0)
    for t in range(6):
        a.update(float(t), 0.1, GAP)
    assert a.update(100.0, 0.1, GAP) is None  # nothing is known about 5..100 s
    assert a.below_since == 100.0
    assert a.update(110.0 - 5, 0.1, GAP) is None  # 105: a gap again
    assert a.below_since == 105.0
