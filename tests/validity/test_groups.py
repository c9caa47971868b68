"""Group statistics (cost/comparison/groups.py): Student-t quantiles against published table values, the t
interval of a mean, the ratio of two groups' means with its interval, and figures printed to the precision
their interval supports."""

from __future__ import annotations

import math

import pytest

from gpuledger.cost.comparison.groups import (
    fmt_at,
    fmt_with_interval,
    mean_interval,
    ratio_interval,
    t_cdf,
    t_quantile,
)

# Two-sided 95 % (p = 0.975), 90 % (0.95) and 99 % (0.995) critical values of Student's t, from the
# standard table (NIST/SEMATECH e-Handbook of Statistical Methods, 1.3.6.7.2).
TABLE = [
    (0.975, 1, 12.706),
    (0.975, 2, 4.303),
    (0.975, 3, 3.182),
    (0.975, 4, 2.776),
    (0.975, 5, 2.571),
    (0.975, 9, 2.262),
    (0.975, 10, 2.228),
    (0.975, 20, 2.086),
    (0.975, 30, 2.042),
    (0.975, 100, 1.984),
    (0.95, 1, 6.314),
    (0.95, 5, 2.015),
    (0.95, 30, 1.697),
    (0.995, 2, 9.925),
    (0.995, 10, 3.169),
]


@pytest.mark.parametrize(("p", "df", "want"), TABLE)
def test_t_quantile_matches_the_published_table(p: float, df: int, want: float) -> None:
    assert t_quantile(p, df) == pytest.approx(want, abs=5e-4)


def test_t_quantile_tends_to_the_normal_quantile_and_is_symmetric() -> None:
    assert t_quantile(0.975, 1e7) == pytest.approx(1.959964, abs=1e-5)
    assert t_quantile(0.025, 7) == pytest.approx(-t_quantile(0.975, 7))
    assert t_quantile(0.5, 3) == 0.0


def test_t_quantile_takes_fractional_degrees_of_freedom_between_the_whole_ones() -> None:
    # Welch-Satterthwaite gives fractional df: the quantile lies between its neighbours.
    assert t_quantile(0.975, 4) > t_quantile(0.975, 4.5) > t_quantile(0.975, 5)


def test_t_cdf_inverts_the_quantile() -> None:
    for df in (1, 2.5, 8, 60):
        for p in (0.6, 0.9, 0.975, 0.999):
            assert t_cdf(t_quantile(p, df), df) == pytest.approx(p, abs=1e-10)


def test_t_quantile_refuses_a_probability_outside_0_1() -> None:
    with pytest.raises(ValueError):
        t_quantile(1.0, 4)
    with pytest.raises(ValueError):
        t_quantile(0.975, 0)


def test_mean_interval_is_mean_plus_minus_t_s_over_root_n() -> None:
    # The three identical `run --quick`: 12.1, 11.1, 5.4 tok/s.
    iv = mean_interval([12.1, 11.1, 5.4])
    assert iv is not None
    mean = (12.1 + 11.1 + 5.4) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in (12.1, 11.1, 5.4)) / 2)
    assert iv.mean == pytest.approx(mean)
    assert iv.sd == pytest.approx(sd)
    assert iv.half_width == pytest.approx(4.303 * sd / math.sqrt(3), rel=1e-3)
    assert iv.cv == pytest.approx(sd / mean)
    # Printed to the precision it supports: not "9.533".
    assert iv.text("tok/s") == "10 ± 9 tok/s"


def test_one_value_has_no_interval() -> None:
    iv = mean_interval([3.2])
    assert iv is not None and iv.half_width is None and iv.low is None
    assert iv.text("s") == "3.20 s"
    assert mean_interval([]) is None


def test_ratio_interval_excludes_1_when_the_groups_are_2x_apart() -> None:
    r = ratio_interval([10.0, 10.4, 9.7], [5.1, 4.9, 5.05])
    assert r is not None and r.low is not None and r.high is not None
    assert r.ratio == pytest.approx(30.1 / 15.05)
    assert 1.0 < r.low < r.ratio < r.high
    assert r.distinguishable is True
    assert "distinguishable at 95 %" in r.meaning() and "not" not in r.meaning()


def test_ratio_interval_spans_1_for_overlapping_groups() -> None:
    r = ratio_interval([10.0, 12.0, 8.0], [9.0, 11.5, 10.5])
    assert r is not None and r.distinguishable is False
    assert r.meaning().startswith("not distinguishable at 95 %")


def test_ratio_interval_of_b_over_a_is_the_reciprocal() -> None:
    a, b = [10.0, 11.0, 9.5, 10.2], [6.0, 7.5, 6.6]
    ab, ba = ratio_interval(a, b), ratio_interval(b, a)
    assert ab is not None and ba is not None and ab.low and ab.high and ba.low and ba.high
    assert ab.ratio == pytest.approx(1 / ba.ratio)
    assert ab.low == pytest.approx(1 / ba.high) and ab.high == pytest.approx(1 / ba.low)


def test_ratio_interval_widens_with_the_spread_of_the_repeats() -> None:
    tight = ratio_interval([10.0, 10.1, 9.9], [5.0, 5.05, 4.95])
    wide = ratio_interval([10.0, 13.0, 7.0], [5.0, 6.5, 3.5])
    assert tight is not None and wide is not None
    assert tight.low and tight.high and wide.low and wide.high
    assert wide.high / wide.low > tight.high / tight.low


def test_a_side_with_one_run_gives_a_ratio_without_interval() -> None:
    r = ratio_interval([10.0], [5.0, 5.2])
    assert r is not None and r.ratio == pytest.approx(10 / 5.1)
    assert r.distinguishable is None and "no interval" in r.text()


@pytest.mark.parametrize(
    ("mean", "half", "want"),
    [
        (12.13, 3.61, "12 ± 4"),
        (0.6224, 0.0143, "0.622 ± 0.014"),
        (2034.0, 340.0, "2,000 ± 300"),
        (1.8812, 0.6, "1.9 ± 0.6"),
        (4.1733, 1.25, "4.2 ± 1.3"),
        (98765.4, 25.0, "98,770 ± 30"),
        (98765.4, 14.0, "98,765 ± 14"),
        (0.004567, 0.00031, "0.0046 ± 0.0003"),
        (12.1, None, "12.1"),
    ],
)
def test_fmt_with_interval_rounds_to_the_interval_leading_digit(
    mean: float, half: float | None, want: str
) -> None:
    assert fmt_with_interval(mean, half) == want


def test_no_four_significant_figures_on_a_30_percent_value() -> None:
    text = fmt_with_interval(1.8812, 0.56)
    assert text == "1.9 ± 0.6"
    assert fmt_at(2.0412, 0.56) == "2.0"
