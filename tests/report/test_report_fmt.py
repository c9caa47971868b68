"""Cell formatting shared by every renderer."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from gpuledger.report import fmt


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "—"),
        (float("nan"), "—"),
        (0, "0"),
        (0.0, "0"),
        (12, "12"),
        (123456, "123,456"),
        (123456.7, "123,457"),
        (1234.5, "1,234"),
        (12.345, "12.3"),
        (1.2345, "1.23"),
        (0.012345, "0.0123"),
        (0.00001234, "1.23e-05"),
        (-3.14159, "-3.14"),
        (100.0, "100"),
        (True, "—"),
        ("n/a", "n/a"),
    ],
)
def test_numbers_get_three_significant_figures_and_missing_values_a_dash(value: object, text: str) -> None:
    assert fmt.num(value) == text


def test_ratios_print_as_percent_and_bytes_as_gib() -> None:
    assert fmt.pct(0.4567) == "45.7"
    assert fmt.pct(None) == "—"
    assert fmt.gib(80 * 2**30) == "80"
    assert fmt.gib(1.5 * 2**30) == "1.50"


def test_aware_times_print_in_utc_and_naive_times_as_stored() -> None:
    tz = timezone(timedelta(hours=8))
    assert fmt.when(datetime(2025, 1, 2, 11, 0, 0, tzinfo=tz)) == "2025-01-02 03:00:00 UTC"
    assert fmt.when(datetime(2025, 1, 2, 3, 0, 0, tzinfo=UTC)) == "2025-01-02 03:00:00 UTC"
    assert fmt.when(datetime(2025, 1, 2, 3, 0, 0)) == "2025-01-02 03:00:00"
    assert fmt.when(None) == "—"


def test_text_is_one_line() -> None:
    assert fmt.text("a\nb\t c") == "a b c"
    assert fmt.text(["x", "y"]) == "x, y"
    assert fmt.text("") == "—"


@pytest.mark.parametrize("cell", ["1", "1,234", "0.5", "-3.2", "1.2e-05", "12.0 / 80.0"])
def test_numeric_cells_are_recognised_for_right_alignment(cell: str) -> None:
    assert fmt.NUMERIC.match(cell)


@pytest.mark.parametrize("cell", ["—", "abc", "12 W", "1.2.3"])
def test_non_numeric_cells_are_not(cell: str) -> None:
    assert not fmt.NUMERIC.match(cell)
