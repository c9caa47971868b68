"""Which mean and which standard deviation a group's figures use, and that the printed mean survives a wide
interval (issues 33 and 30): every figure is the arithmetic mean of the runs' figures with the sample
standard deviation (n − 1); the price is the reciprocal of the mean units per currency unit (the harmonic
mean of the runs' prices), so the two agree; and a mean narrower than its interval keeps its digits.
Groups are stored the way ``bench --repeat`` stores them (test_groups_cli.store_group: summaries from
``bench.metrics.summarize``, verdicts from ``bench.validity``) and read through ``gpuledger cost``."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
from test_groups_cli import cli_json, requests, store_group

from gpuledger.bench.metrics import summarize
from gpuledger.cli.main import main
from gpuledger.cost.comparison.groups import fmt_at, fmt_with_interval, mean_interval, measured_figures
from gpuledger.records import RunInfo
from gpuledger.report.groups import METHOD, RATIO_METHOD, figure_cell, group_answer
from gpuledger.store import Store, open_store


@pytest.fixture
def st() -> Iterator[Store]:
    s = open_store(None)
    yield s
    s.close()


def test_a_mean_narrower_than_its_interval_keeps_its_significant_digits() -> None:
    # Issue 30: two repeats at 659 and 10.1 tok/s printed "0 ± 4,000 tok/s".
    iv = mean_interval([659.0, 10.1])
    assert iv is not None and iv.mean == pytest.approx(334.55)
    assert iv.text("tok/s") == "335 ± 4,100 tok/s"
    assert fmt_with_interval(0.4, 2.0) == "0.400 ± 2.0"
    assert fmt_at(10.1, iv.half_width) == "10.1"  # each run's own figure too
    # An interval narrower than the mean still sets the precision.
    assert fmt_with_interval(12.13, 3.61) == "12 ± 4"


def test_a_group_figure_says_its_interval_its_runs_and_its_spread() -> None:
    runs = [
        RunInfo(id=f"r{i}", engine="openai", status="complete", summary=summarize(requests(itl)))
        for i, itl in enumerate((0.004, 0.4))
    ]
    rate = next(f for f in measured_figures(runs) if f.label == "output tokens")
    cell = figure_cell(rate)
    assert rate.interval is not None and rate.interval.mean > 100
    assert cell.startswith(fmt_with_interval(rate.interval.mean, rate.interval.half_width))
    assert not cell.startswith("0 ±")
    assert "(95 % CI, n = 2; CV " in cell


def test_the_group_price_is_the_reciprocal_of_its_units_per_currency(
    st: Store, capsys: pytest.CaptureFixture[str], prof: tuple[str, str]
) -> None:
    group, _ = store_group(st, [0.004, 0.005, 0.006])
    figures = cli_json(capsys, "cost", group, "--no-save", *prof)["figures"]
    price = figures["cost per 1M output tokens"]
    per_usd = figures["output tokens per USD"]
    # The arithmetic mean of the runs' yields, with the sample standard deviation (n - 1).
    yields = per_usd["values"]
    mean = math.fsum(yields) / 3
    assert per_usd["mean"] == pytest.approx(mean)
    assert per_usd["sd"] == pytest.approx(math.sqrt(math.fsum((y - mean) ** 2 for y in yields) / 2))
    assert per_usd["mean_of"] == "the arithmetic mean of the runs' figures"
    assert "n − 1" in per_usd["sd_of"]
    # The price: 1M ÷ that mean (the harmonic mean of the runs' prices), its interval the reciprocal one.
    assert price["mean"] == pytest.approx(1e6 / per_usd["mean"])
    assert price["mean"] == pytest.approx(3 / math.fsum(1 / p for p in price["values"]))
    assert price["mean"] < math.fsum(price["values"]) / 3  # not the arithmetic mean of the prices
    assert price["ci95_low"] == pytest.approx(1e6 / per_usd["ci95_high"])
    assert price["ci95_high"] == pytest.approx(1e6 / per_usd["ci95_low"])
    assert "harmonic mean" in price["mean_of"] and "reciprocal" in price["mean_of"]


def test_the_terminal_says_which_mean_and_which_standard_deviation(
    st: Store, capsys: pytest.CaptureFixture[str], prof: tuple[str, str]
) -> None:
    group, _ = store_group(st, [0.004, 0.005, 0.006])
    assert main(["cost", group, "--no-save", *prof]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "arithmetic mean of the runs' figures" in text
    assert "sample standard deviation, n − 1" in text
    assert "harmonic mean of the runs' prices" in text
    assert "arithmetic means" in RATIO_METHOD and "(n − 1)" in RATIO_METHOD
    assert "arithmetic mean" in METHOD


def test_a_wildly_varying_group_does_not_price_its_runs_at_zero(
    st: Store, capsys: pytest.CaptureFixture[str], prof: tuple[str, str]
) -> None:
    # Issue 30: a 100x spread between two repeats printed "0 ± 600 USD".
    group, _ = store_group(st, [0.004, 0.4])
    doc = cli_json(capsys, "cost", group, "--no-save", *prof)
    price = doc["figures"]["cost per 1M output tokens"]
    assert price["ci95_high"] is None and price["ci95_high_unbounded"] is True  # the yield's reaches 0
    assert main(["cost", group, "--no-save", *prof]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "… unbounded, n = 2" in text
    assert " 0 ± " not in text
    assert f"{price['mean']:.3g}" in text.replace(",", "")


def test_the_group_answer_puts_the_price_first_with_its_interval(
    st: Store, prof: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    from gpuledger.cost.comparison.groups import resolve, summarize_group

    group, _ = store_group(st, [0.004, 0.005, 0.006])
    doc = cli_json(capsys, "cost", group, "--no-save", *prof)
    runs = resolve(st, group).runs
    answer = group_answer(summarize_group(group, runs))  # measured figures only: bench --repeat
    assert answer.headline.startswith("output tokens: ")
    assert "(95 % CI, n = 3; CV" in answer.headline
    assert doc["figures"]["output tokens"]["mean_of"] == "the arithmetic mean of the runs' figures"
