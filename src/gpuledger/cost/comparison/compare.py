"""Comparing the cost efficiency of runs: the ratio, what it is made of, what would flip it.

    ratio(A, B) = units of work per currency unit of A / that of B                 (ratio(B, A) = 1/ratio)
                = throughput ratio (A/B) x utilisation ratio (A/B) x hourly-cost ratio (B/A)

The unit compared (``basis``) is one both runs measured: by default the first run's headline unit
(output tokens for inference, training tokens for training, images for image generation); aliases such
as ``output`` / ``total`` name text-generation units. Break-even values and the sensitivity table are in
``cost/comparison/breakeven.py``. The throughput ratio is taken apart into hardware x precision x software x
load (``cost/comparison/decomposition.py``); what differs between the two runs in ways that change the
ratio, each with both sides, is ``cost/comparison/likeness.py`` (the pair's ``differences``); the warnings
(``cost/comparison/differences.py``) are about the runs' settings and measurements, and say nothing a
difference says (docs/cost.md, "Compare").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import model_serializer

from gpuledger.catalog import Catalog, load_catalog
from gpuledger.cost.comparison.basis import resolve_basis
from gpuledger.cost.comparison.breakeven import BreakEven, SensitivityRow, break_even, ratio_of, sensitivity
from gpuledger.cost.comparison.decomposition import (
    ORDER,
    DecompositionError,
    NotComputed,
    ThroughputDecomposition,
    ThroughputPart,
    decompose_throughput,
    unsplit,
)
from gpuledger.cost.comparison.differences import comparison_warnings
from gpuledger.cost.comparison.likeness import ClosestSearch, Difference, Likeness, closest_search, likeness
from gpuledger.cost.pricing.document import COMPONENTS, Doc, HourlyShares, MoneyKeys, UnitPrice, UnitYield
from gpuledger.cost.pricing.model import HourlyCost
from gpuledger.cost.pricing.profile import Mode
from gpuledger.cost.pricing.runcost import RunCost
from gpuledger.errors import InvalidInputError, UsageError
from gpuledger.records import RunInfo, resolve_alias

# How many of a store's newest runs ``compare`` reads to find the closest like-for-like pair of a pair
# that is not like for like (every pair of them is weighed).
CLOSEST_SEARCH_LIMIT = 200
THROUGHPUT_PARTS_MEANING = (
    "the throughput ratio (A/B) = the product of the parts' factors; a part that cannot be computed is in "
    "throughput_not_computed with its reason, and the unexplained remainder (part 'remainder') holds it. "
    "Model: decode n x peak bandwidth x MBU x sequences / bytes per step, prefill FLOPs / (output tokens x n "
    "x peak FLOP/s x MFU), weighted by each run's decode and prefill share of its time "
    f"(gpuledger.cost.comparison.decomposition). Order: {ORDER}"
)


class RunRow(Doc):
    """One run of a comparison: what it is, its hourly cost, its price and yield of every unit it
    reports, the power its price rests on and the stage of a sweep it is priced at."""

    run_id: str
    label: str
    model: str
    engine: str
    devices: list[str]
    profile: str
    mode: Mode
    currency: str
    hourly_total: float
    prices: list[UnitPrice]
    yields: list[UnitYield]
    power_source: str
    priced_stage: str | None

    @model_serializer(mode="plain")
    def _dump(self) -> dict[str, Any]:
        m = MoneyKeys(self.currency)
        out: dict[str, Any] = {
            "run_id": self.run_id, "label": self.label, "model": self.model, "engine": self.engine,
            "devices": self.devices, "profile": self.profile, "mode": self.mode,
            m.per_hour(): self.hourly_total,
        }
        out |= {m.price(p): p.value for p in self.prices} | {m.units_per(y): y.value for y in self.yields}
        return out | {"power_source": self.power_source, "priced_stage": self.priced_stage}

    def yield_of(self, unit: str) -> float | None:
        return next((y.value for y in self.yields if y.unit == unit), None)


class HourlySide(Doc):
    """One run's hourly cost by component (currency per hour) and each component's share."""

    currency: str
    components: HourlyShares
    shares: HourlyShares

    @model_serializer(mode="plain")
    def _dump(self) -> dict[str, Any]:
        m = MoneyKeys(self.currency)
        return {m.per_hour(k): getattr(self.components, k) for k in COMPONENTS} | {"shares": self.shares}


class HourlyDifference(Doc):
    a: HourlySide
    b: HourlySide
    difference_as_share_of_a: HourlyShares
    difference_meaning: str = (
        "(B's component - A's component) / A's hourly cost; they sum to hourly_cost_ratio - 1"
    )


class LogShares(Doc):
    """How much of ln(ratio) each factor carries (they sum to 1)."""

    throughput: float
    utilisation: float
    hourly_cost: float


class Decomposition(Doc):
    """ratio = throughput ratio (A/B) x utilisation ratio (A/B) x hourly-cost ratio (B/A), each factor's
    share of ln(ratio), and the hourly costs side by side. ``throughput_parts``: the throughput ratio's own
    parts (hardware, precision, software, load — or an unexplained remainder, named as such), which
    multiply to it exactly; ``throughput_not_computed``: the parts that could not be computed, and why."""

    formula: str = "ratio = throughput_ratio (A/B) x utilisation_ratio (A/B) x hourly_cost_ratio (B/A)"
    throughput_ratio: float
    utilisation_ratio: float
    hourly_cost_ratio: float
    product: float
    share_of_log_ratio: LogShares | None
    share_of_log_ratio_meaning: str = "how much of ln(ratio) each factor carries (they sum to 1)"
    hourly: HourlyDifference
    throughput_parts: list[ThroughputPart]
    throughput_not_computed: list[NotComputed]
    throughput_parts_meaning: str = THROUGHPUT_PARTS_MEANING

    def part(self, name: str) -> ThroughputPart | None:
        return next((p for p in self.throughput_parts if p.part == name), None)

    def biggest_part(self) -> ThroughputPart | None:
        """The part of the throughput ratio furthest from x1 (either way)."""
        return max(self.throughput_parts, key=lambda p: abs(math.log(p.factor)), default=None)


class PairDocument(Doc):
    """One pair of ``compare --json``: A against B in one unit, the ratio, what it is made of, what would
    flip it, the warnings about the runs' settings and measurements, and like for like: ``differences``
    (each aspect that changes the ratio, with both sides; empty when there is none), ``like_for_like`` and
    its summary; ``closest_like_for_like``: for a pair that is not, the store's most nearly like-for-like
    pair of the same two vendors (``gpuledger compare`` looks it up; absent when not looked up)."""

    a: str
    b: str
    basis: str
    ratio: float
    meaning: str
    decomposition: Decomposition
    break_even: list[BreakEven]
    sensitivity: list[SensitivityRow]
    warnings: list[str]
    differences: list[Difference]
    like_for_like: bool
    like_for_like_summary: str
    closest_like_for_like: ClosestSearch | None = None

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        if self.closest_like_for_like is None:
            out.pop("closest_like_for_like")
        return out


class ComparisonDocument(Doc):
    """``gpuledger compare A B ... --json``: the runs priced in one currency, the first against each of the
    others (``ratio``: the one pair's, when there is one pair)."""

    currency: str
    basis: str
    reference: str
    runs: list[RunRow]
    pairs: list[PairDocument]

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        if len(self.pairs) == 1:
            out["ratio"] = self.pairs[0].ratio
        return out


@dataclass(frozen=True, slots=True)
class PairComparison:
    a: RunCost
    b: RunCost
    basis: str  # as the user named it ("output", "image", ...)
    unit: str  # the unit compared ("output_token", "image", ...)
    ratio: float
    decomposition: Decomposition
    break_even: list[BreakEven]
    sensitivity: list[SensitivityRow]
    warnings: list[str]
    likeness: Likeness
    closest: ClosestSearch | None = None  # looked up in a store (``with_closest``)

    def words(self) -> str:
        """What is compared, in words: "output tokens", "images"."""
        _, words = resolve_alias(self.basis)
        return words or self.a.inputs.unit(self.unit).plural

    def document(self) -> PairDocument:
        return PairDocument(
            a=self.a.run.id,
            b=self.b.run.id,
            basis=self.basis,
            ratio=self.ratio,
            meaning=f"run {self.a.run.id} gets {self.ratio:.4g}x the {self.words()} per "
            f"{self.a.currency} of run {self.b.run.id}",
            decomposition=self.decomposition,
            break_even=self.break_even,
            sensitivity=self.sensitivity,
            warnings=self.warnings,
            differences=self.likeness.differences,
            like_for_like=self.likeness.like_for_like,
            like_for_like_summary=self.likeness.summary,
            closest_like_for_like=self.closest,
        )


def run_row(c: RunCost) -> RunRow:
    ev = c.evaluation
    units = c.summary.yield_units()
    return RunRow(
        run_id=c.run.id, label=c.run.label, model=c.run.model, engine=c.run.engine, devices=c.device_names,
        profile=c.profile.name, mode=c.profile.mode, currency=c.currency, hourly_total=ev.hourly.total,
        prices=[UnitPrice.of(u, c.inputs.unit(u), ev.cost_per(u)) for u in units],
        yields=[UnitYield.of(u, c.inputs.unit(u), ev.per_money(u)) for u in units],
        power_source=c.power.source,
        priced_stage=c.operating_point.stage if c.operating_point is not None else None,
    )


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

    def document(self) -> ComparisonDocument:
        """The ``compare --json`` document."""
        return ComparisonDocument(
            currency=self.currency,
            basis=self.basis,
            reference=self.costs[0].run.id,
            runs=[run_row(c) for c in self.costs],
            pairs=[p.document() for p in self.pairs],
        )


def _side(h: HourlyCost) -> HourlySide:
    return HourlySide(currency=h.currency, components=HourlyShares(**h.components()),
                      shares=HourlyShares(**h.shares()))


def throughput_parts(a: RunCost, b: RunCost, unit: str, catalog: Catalog) -> ThroughputDecomposition:
    """The throughput ratio of what was priced of ``a`` and ``b`` (each run's priced stage) taken apart;
    a pair the model cannot take apart is one unexplained remainder, saying why."""
    ra, rb = a.inputs.rate(unit) or 0.0, b.inputs.rate(unit) or 0.0
    rate_unit = f"{a.inputs.unit(unit).rate_text} (all the run's devices)"
    try:
        parts = decompose_throughput(a.run, b.run, summary_a=a.summary, summary_b=b.summary, unit=unit,
                                     catalog=catalog)
    except DecompositionError as exc:
        return unsplit(a.run, b.run, unit=unit, rate_unit=rate_unit, throughput_a=ra, throughput_b=rb,
                       reason=str(exc))
    if not math.isclose(parts.throughput_ratio, ra / rb, rel_tol=1e-9):
        return unsplit(a.run, b.run, unit=unit, rate_unit=rate_unit, throughput_a=ra, throughput_b=rb,
                       reason=f"the priced rates ({a.rate_source}; {b.rate_source}) are not the runs' "
                       "summaries' the model reads")
    return parts


def decompose(a: RunCost, b: RunCost, unit: str, catalog: Catalog | None = None) -> Decomposition:
    ea, eb = a.evaluation, b.evaluation
    thr = (a.inputs.rate(unit) or 0.0) / (b.inputs.rate(unit) or math.inf)
    util = a.inputs.utilisation / b.inputs.utilisation
    hourly = eb.hourly.total / ea.hourly.total
    ratio = thr * util * hourly
    logs = {"throughput": math.log(thr), "utilisation": math.log(util), "hourly_cost": math.log(hourly)}
    total_log = math.log(ratio)
    carried = LogShares(**{k: v / total_log for k, v in logs.items()}) if abs(total_log) > 1e-12 else None
    comps_a, comps_b = ea.hourly.components(), eb.hourly.components()
    parts = throughput_parts(a, b, unit, catalog if catalog is not None else load_catalog())
    return Decomposition(
        throughput_ratio=thr,
        utilisation_ratio=util,
        hourly_cost_ratio=hourly,
        product=ratio,
        share_of_log_ratio=carried,
        hourly=HourlyDifference(
            a=_side(ea.hourly),
            b=_side(eb.hourly),
            difference_as_share_of_a=HourlyShares(
                **{k: (comps_b[k] - comps_a[k]) / ea.hourly.total for k in comps_a}
            ),
        ),
        throughput_parts=parts.throughput_parts,
        throughput_not_computed=parts.not_computed,
    )


def compare_pair(
    a: RunCost, b: RunCost, basis: str | None = None, catalog: Catalog | None = None
) -> PairComparison:
    name, unit = resolve_basis([a, b], basis)
    ratio = ratio_of(a.evaluation, b.evaluation, unit)
    cat = catalog if catalog is not None else load_catalog()
    return PairComparison(
        a,
        b,
        name,
        unit,
        ratio,
        decompose(a, b, unit, cat),
        break_even(a, b, unit),
        sensitivity(a, b, unit),
        comparison_warnings(a, b),
        likeness(a.run, b.run, profile_a=a.profile, profile_b=b.profile, summary_a=a.summary,
                 summary_b=b.summary, catalog=cat),
    )


def with_closest(
    comp: Comparison, stored: Sequence[RunInfo], *, limit: int = CLOSEST_SEARCH_LIMIT,
    catalog: Catalog | None = None,
) -> Comparison:
    """``comp`` with, for each pair that is not like for like, the closest like-for-like pair of the same
    two vendors among ``stored`` (a store's newest ``limit`` runs) — or why there is none."""
    cat = catalog if catalog is not None else load_catalog()
    pairs = [
        p if p.likeness.like_for_like else replace(p, closest=closest_search(
            (p.a.run, p.b.run), stored, limit=limit, summaries=(p.a.summary, p.b.summary), catalog=cat))
        for p in comp.pairs
    ]
    return replace(comp, pairs=pairs)


def compare(
    runs_costs: Sequence[RunCost], basis: str | None = None, *, catalog: Catalog | None = None
) -> Comparison:
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
    cat = catalog if catalog is not None else load_catalog()
    pairs = [compare_pair(costs[0], other, name, cat) for other in costs[1:]]
    return Comparison(name, costs[0].currency, costs, pairs)


__all__ = [
    "CLOSEST_SEARCH_LIMIT",
    "BreakEven",
    "Comparison",
    "ComparisonDocument",
    "Decomposition",
    "PairDocument",
    "RunRow",
    "PairComparison",
    "SensitivityRow",
    "compare",
    "compare_pair",
    "decompose",
    "ratio_of",
    "throughput_parts",
    "with_closest",
]
