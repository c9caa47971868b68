"""What would make two runs cost the same per unit of work (break-even), and which input moves the ratio
most (sensitivity). Every break-even value is checked by recomputing the cost with it (``verified_ratio``
~ 1). "Throughput" scales every rate of a run together (the same work done faster).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from pydantic import ConfigDict, computed_field
from pydantic.dataclasses import dataclass

from gpuledger.cost.pricing.model import CostInputs, Evaluation, evaluate
from gpuledger.cost.pricing.runcost import RunCost

SENSITIVITY_STEP = 0.20
# The rows are typed document parts (a ``compare --json`` / ``report --json`` row): strict, frozen.
_ROW = ConfigDict(extra="forbid")


def ratio_of(a: Evaluation, b: Evaluation, unit: str) -> float:
    """Units of work per currency unit of ``a`` over that of ``b``."""
    ya, yb = a.per_money(unit), b.per_money(unit)
    if ya is None or yb is None:
        raise ValueError(f"both runs must have done work in {unit!r} to compare them by it")
    return ya / yb


@dataclass(frozen=True, config=_ROW)
class BreakEven:
    """The value of one of B's inputs at which A and B cost the same per token (or why there is none)."""

    input: str
    run_id: str
    unit: str
    current: float | None
    value: float | None
    reason: str | None = None
    verified_ratio: float | None = None


@dataclass(frozen=True, config=_ROW)
class SensitivityRow:
    """One input of A or B moved -20 % and +20 % (one at a time): the ratio at each."""

    input: str
    run: str  # "A" or "B"
    run_id: str
    value: float
    unit: str
    ratio_at_minus_20pct: float
    ratio_at_plus_20pct: float
    note: str | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def swing(self) -> float:
        return abs(self.ratio_at_plus_20pct - self.ratio_at_minus_20pct)


def _yield(ev: Evaluation, unit: str) -> float:
    value = ev.per_money(unit)
    if value is None:
        raise ValueError(f"the run did no work in {unit!r}")
    return value


def _done(ev: Evaluation, unit: str) -> float:
    value = ev.per_hour(unit)
    if value is None:
        raise ValueError(f"the run did no work in {unit!r}")
    return value


def _with_profile(inputs: CostInputs, **fields: Any) -> CostInputs:
    return replace(inputs, profile=inputs.profile.model_copy(update=fields))


def _verified(a: Evaluation, inputs_b: CostInputs, unit: str) -> float:
    return ratio_of(a, evaluate(inputs_b), unit)


def _price_field(b: RunCost) -> str:
    prof = b.profile
    if prof.rental_per_gpu_hour is not None:
        return "rental_per_gpu_hour"
    if prof.rental_per_hour is not None:
        return "rental_per_hour"
    return "gpu_price" if prof.gpu_price is not None else "host_price"


def _affine_solve(
    b_inputs: CostInputs,
    set_value: Callable[[CostInputs, float], CostInputs],
    x0: float,
    target_hourly: float,
) -> float | None:
    """x with hourly(x) = target for an hourly cost affine in x (exact for prices and hours)."""
    h0 = evaluate(set_value(b_inputs, x0)).hourly.total
    h1 = evaluate(set_value(b_inputs, x0 + 1.0)).hourly.total
    slope = h1 - h0
    if slope <= 0:
        return None
    return x0 + (target_hourly - h0) / slope


def break_even(a: RunCost, b: RunCost, basis: str) -> list[BreakEven]:
    """B's price, throughput, utilisation and setup hours at which A and B cost the same per unit of
    ``basis`` (a unit both runs measured)."""
    ea = a.evaluation
    k_a = _yield(ea, basis)
    b_in = b.inputs
    prof = b.profile
    out: list[BreakEven] = []
    # target hourly cost for B at its current throughput and utilisation
    target_hourly = _done(b.evaluation, basis) / k_a

    # 1. B's price
    price = _price_field(b)
    current_price = float(getattr(prof, price) or 0.0)

    def set_price(inp: CostInputs, x: float) -> CostInputs:
        return _with_profile(inp, **{price: x})

    x = _affine_solve(b_in, set_price, current_price, target_hourly)
    unit = prof.unit(price)
    if x is None:
        out.append(
            BreakEven(price, b.run.id, unit, current_price, None, f"B's cost does not depend on {price}")
        )
    elif x <= 0:
        out.append(
            BreakEven(
                price,
                b.run.id,
                unit,
                current_price,
                None,
                f"B would need {price} <= 0: its other costs alone exceed A's cost per "
                f"{b_in.unit(basis).singular}",
            )
        )
    else:
        out.append(
            BreakEven(price, b.run.id, unit, current_price, x, None, _verified(ea, set_price(b_in, x), basis))
        )

    # 2. B's throughput (all of B's rates scaled by one factor)
    factor = k_a / _yield(b.evaluation, basis)
    scaled = b_in.scaled(factor)
    head = b_in.unit(b_in.headline)
    out.append(
        BreakEven(
            b.summary.rate_key(b_in.headline),
            b.run.id,
            f"{head.plural.split()[-1]}/s",
            b_in.headline_rate,
            scaled.headline_rate,
            None,
            _verified(ea, scaled, basis),
        )
    )

    # 3. B's utilisation: hourly(u) = F + e*u (energy is affine in u), tokens/money = T*u / (F + e*u)
    h_full = evaluate(_with_profile(b_in, utilisation=1.0)).hourly.total
    h_half = evaluate(_with_profile(b_in, utilisation=0.5)).hourly.total
    e = (h_full - h_half) / 0.5
    f_fixed = h_full - e
    t = (b_in.rate(basis) or 0.0) * 3600.0
    denom = t - k_a * e
    u_star = k_a * f_fixed / denom if denom > 0 else math.inf
    if not 0 < u_star <= 1.0:
        out.append(
            BreakEven(
                "utilisation",
                b.run.id,
                "fraction of wall time serving",
                b_in.utilisation,
                None,
                "B cannot match A even at 100 % utilisation",
            )
        )
    else:
        u_in = _with_profile(b_in, utilisation=u_star)
        out.append(
            BreakEven(
                "utilisation",
                b.run.id,
                "fraction of wall time serving",
                b_in.utilisation,
                u_star,
                None,
                _verified(ea, u_in, basis),
            )
        )

    # 4. B's setup labour hours
    if prof.labour_rate_per_hour <= 0:
        out.append(
            BreakEven(
                "setup_hours",
                b.run.id,
                "hours",
                b_in.setup_hours,
                None,
                "B's labour_rate_per_hour is 0: setup hours do not change its cost",
            )
        )
    else:

        def set_hours(inp: CostInputs, s: float) -> CostInputs:
            return replace(inp, setup_hours=s)

        s_star = _affine_solve(b_in, set_hours, b_in.setup_hours, target_hourly)
        if s_star is None or s_star < 0:
            out.append(
                BreakEven(
                    "setup_hours",
                    b.run.id,
                    "hours",
                    b_in.setup_hours,
                    None,
                    f"B costs more per {b_in.unit(basis).singular} than A even with zero setup hours",
                )
            )
        else:
            out.append(
                BreakEven(
                    "setup_hours",
                    b.run.id,
                    "hours",
                    b_in.setup_hours,
                    s_star,
                    None,
                    _verified(ea, set_hours(b_in, s_star), basis),
                )
            )
    return out


# ------------------------------------------------------------------------------------- sensitivity
_PROFILE_INPUTS = (
    "gpu_price",
    "host_price",
    "rental_per_gpu_hour",
    "rental_per_hour",
    "electricity_per_kwh",
    "pue",
    "amortisation_months",
    "labour_rate_per_hour",
    "maintenance_hours_per_month",
    "hosting_per_month",
    "software_per_month",
    "utilisation",
)


def _variants(inputs: CostInputs) -> list[tuple[str, float, str, Callable[[float], CostInputs]]]:
    """(name, base value, unit, factor -> changed inputs) for every input that is set and non-zero."""
    out: list[tuple[str, float, str, Callable[[float], CostInputs]]] = []
    prof = inputs.profile
    for name in _PROFILE_INPUTS:
        value = getattr(prof, name)
        if not value:
            continue
        if prof.mode == "rental" and name in ("electricity_per_kwh", "pue"):
            continue

        def change(f: float, name: str = name, value: float = float(value)) -> CostInputs:
            new = value * f
            if name == "utilisation":
                new = min(new, 1.0)
            if name == "pue":
                new = max(new, 1.0)
            return _with_profile(inputs, **{name: new})

        out.append((name, float(value), prof.unit(name), change))
    if prof.mode == "ownership" and inputs.power_serving_w > 0:

        def power(f: float) -> CostInputs:
            return replace(
                inputs, power_serving_w=inputs.power_serving_w * f, power_idle_w=inputs.power_idle_w * f
            )

        out.append(("power_w", inputs.power_serving_w, "W (serving and idle together)", power))

    def throughput(f: float) -> CostInputs:
        return inputs.scaled(f)

    head = inputs.unit(inputs.headline)
    word = head.singular.split()[-1]
    what = f"{head.plural}/s (all {word} rates together)"
    out.append(("throughput", inputs.headline_rate, what, throughput))
    if inputs.setup_hours and prof.labour_rate_per_hour:

        def setup(f: float) -> CostInputs:
            return replace(inputs, setup_hours=inputs.setup_hours * f)

        out.append(("setup_hours", inputs.setup_hours, "hours", setup))
    return out


def sensitivity(a: RunCost, b: RunCost, basis: str) -> list[SensitivityRow]:
    """Each input of A and of B moved -20 % and +20 % (one at a time) -> the ratio; largest swing first."""
    rows: list[SensitivityRow] = []
    ea, eb = a.evaluation, b.evaluation
    for side, cost in (("A", a), ("B", b)):
        for name, value, unit, change in _variants(cost.inputs):
            lo_ev = evaluate(change(1.0 - SENSITIVITY_STEP))
            hi_ev = evaluate(change(1.0 + SENSITIVITY_STEP))
            if side == "A":
                lo, hi = ratio_of(lo_ev, eb, basis), ratio_of(hi_ev, eb, basis)
            else:
                lo, hi = ratio_of(ea, lo_ev, basis), ratio_of(ea, hi_ev, basis)
            note = None
            if name == "utilisation" and value * (1 + SENSITIVITY_STEP) > 1.0:
                note = "+20 % capped at utilisation 1.0"
            if name == "pue" and value * (1 - SENSITIVITY_STEP) < 1.0:
                note = "-20 % floored at PUE 1.0"
            rows.append(SensitivityRow(name, side, cost.run.id, value, unit, lo, hi, note))
    rows.sort(key=lambda r: r.swing, reverse=True)
    return rows


@dataclass(frozen=True, config=_ROW)
class CostSensitivity:
    """One input of one run moved -20 % and +20 %: the run's cost per headline unit at each."""

    input: str
    value: float
    unit: str
    cost_at_minus_20pct: float
    cost_at_plus_20pct: float
    cost_now: float

    @computed_field  # type: ignore[prop-decorator]
    @property
    def swing(self) -> float:
        """The spread of the two costs as a share of today's cost."""
        return abs(self.cost_at_plus_20pct - self.cost_at_minus_20pct) / self.cost_now


def run_sensitivity(cost: RunCost) -> list[CostSensitivity]:
    """Each input of one run moved -20 % and +20 % (one at a time) -> its cost per headline unit;
    the input that moves the answer most first."""
    now = cost.evaluation.headline_cost()
    rows = [
        CostSensitivity(
            name,
            value,
            unit,
            evaluate(change(1.0 - SENSITIVITY_STEP)).headline_cost(),
            evaluate(change(1.0 + SENSITIVITY_STEP)).headline_cost(),
            now,
        )
        for name, value, unit, change in _variants(cost.inputs)
    ]
    rows.sort(key=lambda r: r.swing, reverse=True)
    return rows
