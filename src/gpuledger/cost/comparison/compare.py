"""Comparing the cost efficiency of runs: the ratio, what it is made of, what would flip it.

    ratio(A, B) = units of work per currency unit of A / that of B                 (ratio(B, A) = 1/ratio)
                = throughput ratio (A/B) x utilisation ratio (A/B) x hourly-cost ratio (B/A)

The unit compared (``basis``) is one both runs measured: by default the first run's headline unit
(output tokens for inference, training tokens for training, images for image generation); aliases such
as ``output`` / ``total`` name text-generation units. Break-even values and the sensitivity table are in
``cost/comparison/breakeven.py``, the like-for-like warnings in ``cost/comparison/differences.py``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuledger.cost.comparison.basis import resolve_basis
from gpuledger.cost.comparison.breakeven import BreakEven, SensitivityRow, break_even, ratio_of, sensitivity
from gpuledger.cost.comparison.differences import comparison_warnings
from gpuledger.cost.pricing.model import money_prefix
from gpuledger.cost.pricing.runcost import RunCost
from gpuledger.errors import InvalidInputError, UsageError
from gpuledger.records import resolve_alias


@dataclass(frozen=True, slots=True)
class PairComparison:
    a: RunCost
    b: RunCost
    basis: str  # as the user named it ("output", "image", ...)
    unit: str  # the unit compared ("output_token", "image", ...)
    ratio: float
    decomposition: dict[str, Any]
    break_even: list[BreakEven]
    sensitivity: list[SensitivityRow]
    warnings: list[str]

    def words(self) -> str:
        """What is compared, in words: "output tokens", "images"."""
        _, words = resolve_alias(self.basis)
        return words or self.a.inputs.unit(self.unit).plural

    def to_dict(self) -> dict[str, Any]:
        return {
            "a": self.a.run.id,
            "b": self.b.run.id,
            "basis": self.basis,
            "ratio": self.ratio,
            "meaning": f"run {self.a.run.id} gets {self.ratio:.4g}x the {self.words()} per "
            f"{self.a.currency} of run {self.b.run.id}",
            "decomposition": self.decomposition,
            "break_even": [b.to_dict() for b in self.break_even],
            "sensitivity": [s.to_dict() for s in self.sensitivity],
            "warnings": self.warnings,
        }


@dataclass(frozen=True, slots=True)
class Comparison:
    """The first run against each of the others."""

    basis: str
    currency: str
    costs: list[RunCost]
    pairs: list[PairComparison] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return self.pairs[0].ratio

    def to_dict(self) -> dict[str, Any]:
        p = money_prefix(self.currency)
        runs = []
        for c in self.costs:
            ev = c.evaluation
            row: dict[str, Any] = {
                "run_id": c.run.id,
                "label": c.run.label,
                "model": c.run.model,
                "engine": c.run.engine,
                "devices": c.device_names,
                "profile": c.profile.name,
                "mode": c.profile.mode,
                f"{p}_per_hour": ev.hourly.total,
            }
            for u in c.summary.yield_units():
                info = c.inputs.unit(u)
                row[info.price_key(p)] = ev.cost_per(u)
                row[info.per_money_key(p)] = ev.per_money(u)
            row["power_source"] = c.power.source
            row["priced_stage"] = (c.operating_point or {}).get("stage")
            runs.append(row)
        out: dict[str, Any] = {
            "currency": self.currency,
            "basis": self.basis,
            "reference": self.costs[0].run.id,
            "runs": runs,
            "pairs": [p_.to_dict() for p_ in self.pairs],
        }
        if len(self.pairs) == 1:
            out["ratio"] = self.pairs[0].ratio
        return out


def decompose(a: RunCost, b: RunCost, unit: str) -> dict[str, Any]:
    ea, eb = a.evaluation, b.evaluation
    thr = (a.inputs.rate(unit) or 0.0) / (b.inputs.rate(unit) or math.inf)
    util = a.inputs.utilisation / b.inputs.utilisation
    hourly = eb.hourly.total / ea.hourly.total
    ratio = thr * util * hourly
    logs = {"throughput": math.log(thr), "utilisation": math.log(util), "hourly_cost": math.log(hourly)}
    total_log = math.log(ratio)
    carried = {k: v / total_log for k, v in logs.items()} if abs(total_log) > 1e-12 else None
    comps_a, comps_b = ea.hourly.components(), eb.hourly.components()
    p = money_prefix(a.currency)
    return {
        "formula": "ratio = throughput_ratio (A/B) x utilisation_ratio (A/B) x hourly_cost_ratio (B/A)",
        "throughput_ratio": thr,
        "utilisation_ratio": util,
        "hourly_cost_ratio": hourly,
        "product": ratio,
        "share_of_log_ratio": carried,
        "share_of_log_ratio_meaning": "how much of ln(ratio) each factor carries (they sum to 1)",
        "hourly": {
            "a": {f"{k}_{p}_per_hour": v for k, v in comps_a.items()} | {"shares": ea.hourly.shares()},
            "b": {f"{k}_{p}_per_hour": v for k, v in comps_b.items()} | {"shares": eb.hourly.shares()},
            "difference_as_share_of_a": {k: (comps_b[k] - comps_a[k]) / ea.hourly.total for k in comps_a},
            "difference_meaning": "(B's component - A's component) / A's hourly cost; they sum to "
            "hourly_cost_ratio - 1",
        },
    }


def compare_pair(a: RunCost, b: RunCost, basis: str | None = None) -> PairComparison:
    name, unit = resolve_basis([a, b], basis)
    ratio = ratio_of(a.evaluation, b.evaluation, unit)
    return PairComparison(
        a,
        b,
        name,
        unit,
        ratio,
        decompose(a, b, unit),
        break_even(a, b, unit),
        sensitivity(a, b, unit),
        comparison_warnings(a, b),
    )


def compare(runs_costs: Sequence[RunCost], basis: str | None = None) -> Comparison:
    """The first run against each of the others. All must be priced in one currency (no silent FX)."""
    costs = list(runs_costs)
    if len(costs) < 2:
        raise UsageError("compare needs at least two runs")
    name, _ = resolve_basis(costs, basis)
    currencies = {c.currency for c in costs}
    if len(currencies) > 1:
        listing = ", ".join(f"{c.run.id}: {c.currency} ({c.profile.name})" for c in costs)
        raise InvalidInputError(
            f"the runs are priced in different currencies ({listing}); gpuledger does no currency conversion",
            hint="use cost profiles in one currency",
        )
    pairs = [compare_pair(costs[0], other, name) for other in costs[1:]]
    return Comparison(name, costs[0].currency, costs, pairs)


__all__ = [
    "BreakEven",
    "Comparison",
    "PairComparison",
    "SensitivityRow",
    "compare",
    "compare_pair",
    "decompose",
    "ratio_of",
]
