"""Properties of the cost model that must hold for every input (hypothesis)."""

from __future__ import annotations

import dataclasses

import pytest
from cost_runs import build_run
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuledger.catalog import load_catalog
from gpuledger.cost import CostInputs, CostProfile, compare, cost_of_run, evaluate

CATALOG = load_catalog()

prices = st.floats(min_value=100, max_value=100_000)
rates = st.floats(min_value=0.05, max_value=20)
electricity = st.floats(min_value=0.01, max_value=1.0)
power = st.floats(min_value=10, max_value=3000)
throughput = st.floats(min_value=1, max_value=50_000)
utilisation = st.floats(min_value=0.01, max_value=1.0)
hours = st.floats(min_value=0, max_value=2000)
factor = st.floats(min_value=1.01, max_value=5)
RUN_WINDOW_S = 2.0
# 10 to 50,000 tokens/s over the run's window (at least 2 output tokens for each of its 10 requests)
tokens_in_window = st.integers(min_value=20, max_value=100_000)


@st.composite
def owned_inputs(draw: st.DrawFn) -> CostInputs:
    prof = CostProfile(
        gpu_price=draw(prices),
        electricity_per_kwh=draw(electricity),
        pue=draw(st.floats(1.0, 2.0)),
        amortisation_months=draw(st.floats(6, 96)),
        labour_rate_per_hour=draw(st.floats(0, 300)),
        maintenance_hours_per_month=draw(st.floats(0, 40)),
        hosting_per_month=draw(st.floats(0, 1000)),
        utilisation=draw(utilisation),
    )
    serving = draw(power)
    idle = draw(st.floats(min_value=0, max_value=serving))
    out_tps = draw(throughput)
    in_tps = draw(throughput) / 3
    return CostInputs(
        prof,
        draw(st.integers(1, 8)),
        serving,
        idle,
        rates={"output_token": out_tps, "input_token": in_tps, "token": out_tps + in_tps},
        headline="output_token",
        setup_hours=draw(hours),
    )


def cost(inputs: CostInputs) -> float:
    value = evaluate(inputs).cost_per("output_token")
    assert value is not None
    return value


def with_profile(inputs: CostInputs, **fields: float) -> CostInputs:
    return dataclasses.replace(inputs, profile=inputs.profile.model_copy(update=fields))


@settings(max_examples=150, deadline=None)
@given(owned_inputs(), factor)
def test_cost_rises_with_the_gpu_price(inputs: CostInputs, f: float) -> None:
    assert cost(with_profile(inputs, gpu_price=inputs.profile.gpu_price * f)) > cost(inputs)  # type: ignore[operator]


@settings(max_examples=150, deadline=None)
@given(owned_inputs(), factor)
def test_cost_rises_with_power_and_the_electricity_price(inputs: CostInputs, f: float) -> None:
    more_power = dataclasses.replace(
        inputs, power_serving_w=inputs.power_serving_w * f, power_idle_w=inputs.power_idle_w * f
    )
    assert cost(more_power) > cost(inputs)
    dearer = with_profile(inputs, electricity_per_kwh=inputs.profile.electricity_per_kwh * f)  # type: ignore[operator]
    assert cost(dearer) > cost(inputs)


@settings(max_examples=150, deadline=None)
@given(owned_inputs(), factor)
def test_cost_falls_with_throughput(inputs: CostInputs, f: float) -> None:
    faster = dataclasses.replace(inputs, rates={unit: rate * f for unit, rate in inputs.rates.items()})
    assert cost(faster) < cost(inputs)
    assert cost(faster) * f == pytest.approx(cost(inputs))


@settings(max_examples=150, deadline=None)
@given(owned_inputs(), st.floats(min_value=0.01, max_value=0.99))
def test_cost_falls_with_utilisation(inputs: CostInputs, share: float) -> None:
    u = inputs.profile.utilisation
    lower = with_profile(inputs, utilisation=max(u * share, 1e-3))
    if lower.profile.utilisation < u:
        assert cost(lower) > cost(inputs)


@settings(max_examples=100, deadline=None)
@given(rates, factor, throughput)
def test_rental_cost_rises_with_the_rental_rate(rate: float, f: float, tps: float) -> None:
    base = CostInputs(
        CostProfile(rental_per_gpu_hour=rate),
        1,
        300.0,
        300.0,
        rates={"output_token": tps, "input_token": 0.0},
        headline="output_token",
    )
    dearer = with_profile(base, rental_per_gpu_hour=rate * f)
    assert cost(dearer) == pytest.approx(cost(base) * f)


@st.composite
def run_costs(draw: st.DrawFn):  # type: ignore[no-untyped-def]
    def one(run_id: str):  # type: ignore[no-untyped-def]
        prof = CostProfile(
            gpu_price=draw(prices),
            electricity_per_kwh=draw(electricity),
            pue=draw(st.floats(1.0, 2.0)),
            labour_rate_per_hour=draw(st.floats(1, 300)),
            setup_hours=draw(hours),
            utilisation=draw(utilisation),
            idle_power_w=draw(st.floats(0, 100)),
        )
        # A short window of few requests keeps the generated streams small; the rates are whole tokens
        # per window, as a real run's are.
        run = build_run(
            run_id,
            output_tps=draw(tokens_in_window) / RUN_WINDOW_S,
            input_tps=draw(tokens_in_window) / RUN_WINDOW_S,
            window_s=RUN_WINDOW_S,
            num_ok=10,
            e2e_ms=1000.0,
            power_w=draw(st.floats(101, 1500)),
        )
        return cost_of_run(run, prof, catalog=CATALOG)

    return one("runaaaa"), one("runbbbb")


@settings(max_examples=60, deadline=None)
@given(run_costs())
def test_compare_a_b_is_the_reciprocal_of_compare_b_a(pair) -> None:  # type: ignore[no-untyped-def]
    a, b = pair
    for basis in ("output", "total"):
        assert compare([a, b], basis).ratio * compare([b, a], basis).ratio == pytest.approx(1.0)


@settings(max_examples=60, deadline=None)
@given(run_costs())
def test_break_even_values_really_equalise(pair) -> None:  # type: ignore[no-untyped-def]
    a, b = pair
    result = compare([a, b]).pairs[0]
    for be in result.break_even:
        if be.value is not None:
            assert be.verified_ratio == pytest.approx(1.0, rel=1e-6), be
        else:
            assert be.reason
    throughput_be = next(be for be in result.break_even if be.input == "output_tokens_per_s")
    assert throughput_be.value is not None  # always solvable: tokens/money is proportional to throughput
