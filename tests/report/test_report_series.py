"""The pure helpers that keep plots small and exact: CDF points, bucket means, Pareto frontier."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuledger.report.series import bucket_means, cdf_points, pareto_front, stride_for


def test_cdf_of_few_values_keeps_every_value_with_its_cumulative_fraction() -> None:
    x, y = cdf_points([3.0, 1.0, 2.0, 2.0])
    assert x == [1.0, 2.0, 2.0, 3.0]
    assert y == [0.25, 0.5, 0.75, 1.0]


def test_cdf_of_one_value_is_one_point_at_fraction_one() -> None:
    assert cdf_points([42.0]) == ([42.0], [1.0])


def test_cdf_of_nothing_is_empty_and_nan_is_dropped() -> None:
    assert cdf_points([]) == ([], [])
    assert cdf_points([math.nan, 5.0]) == ([5.0], [1.0])


def test_cdf_of_a_huge_sample_is_bounded_and_keeps_min_max_and_exact_ranks() -> None:
    values = [float(i) for i in range(100_000, 0, -1)]
    x, y = cdf_points(values, max_points=500)
    assert len(x) <= 500
    assert x[0] == 1.0 and x[-1] == 100_000.0
    assert y[-1] == 1.0
    # each drawn point is an exact (value, fraction <= value) pair of the full sample
    for xv, yv in zip(x, y, strict=True):
        assert yv == pytest.approx(xv / 100_000)


@given(
    st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), min_size=1, max_size=3000),
    st.integers(min_value=2, max_value=700),
)
def test_cdf_points_are_monotonic_and_within_the_budget(values: list[float], budget: int) -> None:
    x, y = cdf_points(values, max_points=budget)
    assert len(x) == len(y)
    assert len(x) <= budget
    assert x == sorted(x)
    assert y == sorted(y)
    assert x[0] == min(values) and x[-1] == max(values) and y[-1] == 1.0


def test_bucket_means_leave_short_series_alone() -> None:
    assert bucket_means([0.0, 1.0], [5.0, 7.0], max_points=10) == ([0.0, 1.0], [5.0, 7.0], 1)


def test_bucket_means_average_equal_buckets_of_long_series() -> None:
    t = [float(i) for i in range(10)]
    v = [float(i * 10) for i in range(10)]
    out_t, out_v, size = bucket_means(t, v, max_points=5)
    assert size == 2
    assert out_t == [0.5, 2.5, 4.5, 6.5, 8.5]
    assert out_v == [5.0, 25.0, 45.0, 65.0, 85.0]


def test_bucket_means_reject_mismatched_lengths() -> None:
    with pytest.raises(ValueError):
        bucket_means([0.0], [1.0, 2.0])


def test_stride_keeps_the_number_of_items_taken_within_budget() -> None:
    assert stride_for(100, 200) == 1
    assert stride_for(1000, 200) == 5
    assert len(range(0, 1001, stride_for(1001, 200))) <= 200


def test_pareto_front_keeps_only_points_no_other_beats_on_both_axes() -> None:
    points = [(10.0, 100.0), (20.0, 80.0), (15.0, 70.0), (30.0, 40.0), (5.0, 90.0)]
    assert pareto_front(points) == [(10.0, 100.0), (20.0, 80.0), (30.0, 40.0)]
