"""The cost part of a report: each run priced by ``gpuledger.cost``, and the comparison.

Pricing is the cost model's job (``cost_of_run``, ``compare``); this module only asks for it and lays
out what it answers — in whatever unit each run measured (output tokens, training tokens, images, ...):
the hourly cost by component, the cost per unit (stacked by component), the ratio between runs with its
decomposition, break-even values and sensitivity. A run that cannot be priced (no work, no power and no
TDP, a GPU without a catalog price) gets a "not measured" line with the cost model's own reason; an
unknown profile the user named is an error.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpuledger.catalog import load_catalog
from gpuledger.cost import Comparison, RunCost, compare, cost_of_run, default_profile_for, load_profile
from gpuledger.cost.comparison.breakeven import CostSensitivity, run_sensitivity
from gpuledger.cost.comparison.compare import PairComparison
from gpuledger.cost.comparison.decomposition import SideValue
from gpuledger.cost.pricing.document import CostDocument, UnitPrice
from gpuledger.errors import GpuledgerError
from gpuledger.records import DoctorRunRecord, UnitInfo
from gpuledger.report import fmt
from gpuledger.report.model import Figure, Section, Series, Table
from gpuledger.report.rundata import RunData

COMPONENTS: tuple[tuple[str, str], ...] = (
    ("capex", "hardware amortisation"),
    ("rental", "rental"),
    ("energy", "energy"),
    ("labour_setup", "setup labour"),
    ("labour_maintenance", "maintenance labour"),
    ("other", "other opex"),
)
SENSITIVITY_ROWS = 12


@dataclass
class Costs:
    """What the cost model answered: ``per_run`` the priced runs by id, ``errors`` the reason a run could
    not be priced, ``sensitivity`` each priced run's inputs by how much they move its cost;
    ``comparison`` the first run against the others (two or more runs priced)."""

    per_run: dict[str, RunCost] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    sensitivity: dict[str, list[CostSensitivity]] = field(default_factory=dict)
    comparison: Comparison | None = None
    comparison_error: str | None = None

    def document(self, run_id: str) -> CostDocument | None:
        """The run's cost document (``cost --json``), None when it was not priced."""
        cost = self.per_run.get(run_id)
        return cost.document() if cost is not None else None


def _why(exc: GpuledgerError) -> str:
    return exc.message + (f" ({exc.hint})" if exc.hint else "")


def cost_runs(runs: Sequence[RunData], doctor_runs: Sequence[DoctorRunRecord]) -> Costs:
    """Price every run; compare the first with the others when two or more could be priced."""
    catalog = load_catalog()
    out = Costs()
    priced: list[RunCost] = []
    # A profile the user named must exist and parse: that is an error, not a missing section.
    explicit = {r.info.id: load_profile(r.profile, catalog) for r in runs if r.profile}
    for r in runs:
        try:
            profile = explicit.get(r.info.id) or default_profile_for(r.info, catalog)
            cost = cost_of_run(r.info, profile, catalog=catalog, doctor_records=list(doctor_runs))
        except GpuledgerError as exc:
            out.errors[r.info.id] = _why(exc)
            continue
        out.per_run[r.info.id] = cost
        out.sensitivity[r.info.id] = run_sensitivity(cost)
        priced.append(cost)
    if len(runs) < 2:
        return out
    first = runs[0].info.id
    if first in out.errors:
        out.comparison_error = (
            f"the first run ({runs[0].ref.name}) could not be priced, and the comparison is made against it"
        )
    elif len(priced) < 2:
        out.comparison_error = "fewer than two runs could be priced"
    else:
        try:
            out.comparison = compare(priced, catalog=catalog)
        except GpuledgerError as exc:
            out.comparison_error = _why(exc)
    return out


def cost_section(runs: Sequence[RunData], costs: Costs) -> Section:
    missing: list[str] = []
    notes: list[str] = []
    tables: list[Table] = []
    figures: list[Figure] = []
    names = {r.info.id: r.ref.name for r in runs}
    for r in runs:
        if r.info.id in costs.errors:
            missing.append(f"{r.ref.name}: could not be priced — {costs.errors[r.info.id]}")

    priced = [(r, costs.per_run[r.info.id]) for r in runs if r.info.id in costs.per_run]
    if priced:
        tables.extend(_per_run_tables(priced))
        figures.append(_stacked_figure(priced))
        for r, c in priced:
            for w in c.warnings:
                notes.append(f"{r.ref.name} — warning: {fmt.text(w)}")
            for a in c.assumptions:
                notes.append(f"{r.ref.name} — assumption: {fmt.text(a)}")

    if len(runs) > 1:
        if costs.comparison is not None:
            tables.extend(_comparison_tables(costs.comparison, names))
            tables.extend(throughput_tables(costs.comparison, names))
            figures.extend(parts_figure(pair, names) for pair in costs.comparison.pairs)
            for pair in costs.comparison.pairs:
                for w in pair.warnings:
                    a, b = names.get(pair.a.run.id, pair.a.run.id), names.get(pair.b.run.id, pair.b.run.id)
                    notes.append(f"{a} vs {b} — warning: {fmt.text(w)}")
        else:
            missing.append(f"comparison: {costs.comparison_error}")
    what = _units_in_words(runs)
    return Section(
        key="cost",
        title="Cost",
        intro=f"What a unit of work ({what}) costs under each run's cost profile, what the cost is made of "
        "and — for a comparison — the ratio, what drives it and what would flip it. Money is in the "
        "profile's currency.",
        tables=tuple(tables),
        figures=tuple(figures),
        not_measured=tuple(missing),
        notes=tuple(notes),
    )


def _units_in_words(runs: Sequence[RunData]) -> str:
    """The headline units of the runs (``output tokens``, ``images``), priced or not."""
    summaries = [s for r in runs if (s := r.info.summary) is not None and s.headline()]
    words = sorted({s.unit(s.headline()).plural for s in summaries})
    return ", ".join(words) if words else "none measured"


def _price_heading(info: UnitInfo) -> str:
    """``per 1M output tokens`` — a column heading (the currency is in its own column)."""
    return info.per_text()


def _used_components(priced: Sequence[tuple[RunData, RunCost]]) -> list[tuple[str, str]]:
    """The hourly components that are non-zero for at least one run (rental vs ownership differ)."""
    used = []
    for key, label in COMPONENTS:
        if any(_component(c, key) for _, c in priced):
            used.append((key, label))
    return used


def _component(cost: RunCost, key: str) -> float:
    h = cost.evaluation.hourly
    return {
        "capex": h.capex,
        "rental": h.rental,
        "energy": h.energy,
        "labour_setup": h.labour_setup,
        "labour_maintenance": h.labour_maintenance,
        "other": h.other,
    }[key]


def _price_units(priced: Sequence[tuple[RunData, RunCost]]) -> list[tuple[str, UnitInfo]]:
    """The units priced in the per-run table: every run's price units, the headline units first."""
    seen: dict[str, UnitInfo] = {}
    for _, c in priced:
        seen.setdefault(c.headline, c.inputs.unit(c.headline))
    for _, c in priced:
        for u in c.summary.price_units():
            seen.setdefault(u, c.inputs.unit(u))
    return list(seen.items())


def _per_run_tables(priced: Sequence[tuple[RunData, RunCost]]) -> list[Table]:
    components = _used_components(priced)
    units = _price_units(priced)
    heads = [(c.headline, c.inputs.unit(c.headline)) for _, c in priced]
    head_unit, head_info = heads[0]
    same_head = all(u == head_unit for u, _ in heads)
    main_rows = []
    hourly_rows = []
    docs = {r.info.id: c.document() for r, c in priced}
    at_slo_info = next((p.info for d in docs.values() for p in _at_slo(d)), None)
    for r, c in priced:
        ev = c.evaluation
        doc = docs[r.info.id]
        at_slo = next((p.value for p in _at_slo(doc)), None)
        per_unit_energy = doc.energy.per(c.headline)
        main_rows.append(
            (
                r.ref.name,
                fmt.text(c.profile.name),
                fmt.text(c.profile.mode),
                c.currency,
                *(fmt.num(ev.cost_per(u), 4) for u, _ in units),
                fmt.num(ev.per_money(c.headline), 4),
                *((fmt.num(at_slo, 4),) if at_slo_info is not None else ()),
                fmt.pct(c.inputs.utilisation),
                fmt.num(c.inputs.average_power_w),
                fmt.text(c.power.source),
                fmt.num(per_unit_energy) + (" (estimate)" if per_unit_energy and c.power.estimate else ""),
            )
        )
        hourly_rows.append(
            (
                r.ref.name,
                c.currency,
                *(fmt.num(_component(c, k), 4) for k, _ in components),
                fmt.num(ev.hourly.total, 4),
            )
        )
    yield_heading = f"{head_info.plural} per currency unit" if same_head else "units per currency unit"
    energy_heading = f"J per {head_info.singular}" if same_head else "J per headline unit"
    tables = [
        Table(
            key="cost",
            title="Cost per run",
            columns=(
                "run",
                "profile",
                "mode",
                "currency",
                *(_price_heading(info) for _, info in units),
                yield_heading,
                *((f"{at_slo_info.per_text()} at SLO",) if at_slo_info is not None else ()),
                "utilisation (%)",
                "priced power (W)",
                "power source",
                energy_heading,
            ),
            rows=tuple(main_rows),
            provenance="gpuledger.cost: cost per N units = hourly cost ÷ (units/s × 3600 × utilisation) × N, "
            "with the run's measured rate of each unit; money in the profile's currency; priced power = "
            "utilisation × serving W + (1 − utilisation) × idle W; J per unit from measured energy when "
            "valid, else priced power × window, marked (estimate).",
        ),
        Table(
            key="cost_hourly",
            title="Hourly cost by component (currency per hour)",
            columns=("run", "currency", *(label for _, label in components), "total"),
            rows=tuple(hourly_rows),
            provenance="Hardware = (GPU price × GPUs + host share) ÷ (amortisation months × 730 h); energy = "
            "average W ÷ 1000 × PUE × price per kWh; labour = setup hours amortised the same way + "
            "maintenance hours per month ÷ 730 h; components that are zero for every run are left out; "
            "every input with its source in --json (numbers.runs[].cost.inputs).",
        ),
    ]
    split_rows = []
    split_heads: tuple[str, ...] = ()
    for r, _c in priced:
        doc = docs[r.info.id]
        split = next((s for s in (e.split() for e in doc.extras) if s is not None), None)
        if split is None:
            continue
        split_heads = split_heads or (*(p.info.per_text() for p in split.parts),
                                      f"{split.parts[0].plural} share (%)")
        split_rows.append(
            (
                r.ref.name,
                doc.currency,
                *(fmt.num(p.value, 4) for p in split.parts),
                fmt.pct(split.share),
                fmt.text(split.rule or split.reason),
            )
        )
    if split_rows:
        tables.append(
            Table(
                key="cost_split",
                title="Input and output tokens priced separately",
                columns=("run", "currency", *split_heads, "rule"),
                rows=tuple(split_rows),
                provenance="The hourly cost split between input and output tokens by the rule shown (the "
                "text kind's pricing: gpuledger.kinds.text.pricing).",
            )
        )
    return tables


def _at_slo(doc: CostDocument) -> list[UnitPrice]:
    """The run's prices counting only the requests that met its SLOs (its kind's, when it has them)."""
    return [p for e in doc.extras for p in e.prices() if p.qualifier == "at SLO"]


def _stacked_figure(priced: Sequence[tuple[RunData, RunCost]]) -> Figure:
    currencies = sorted({c.currency for _, c in priced})
    heads = {c.inputs.unit(c.headline).per_text() for _, c in priced}
    per = next(iter(heads)) if len(heads) == 1 else "per headline unit"
    series = []
    for key, label in COMPONENTS:
        ys: list[float] = []
        for _, c in priced:
            total = c.evaluation.hourly.total
            ys.append(c.evaluation.headline_cost() * _component(c, key) / total if total else 0.0)
        if any(ys):
            series.append(Series(name=label, x=tuple(r.ref.name for r, _ in priced), y=tuple(ys)))
    unit = currencies[0] if len(currencies) == 1 else "each run's profile currency"
    return Figure(
        key="cost_breakdown",
        title=f"Cost {per}, by component",
        kind="bar",
        x_title="run",
        y_title=f"{unit} {per}",
        series=tuple(series),
        provenance="gpuledger.cost: each hourly cost component ÷ units served per hour (units/s × 3600 × "
        "utilisation) × N; the bar's height is the run's cost per N of its headline unit.",
    )


def _comparison_tables(comparison: Comparison, names: dict[str, str]) -> list[Table]:
    def name(run_id: str) -> str:
        return names.get(run_id, run_id)

    ratio_rows = []
    diff_rows = []
    be_rows = []
    sens_rows = []
    first = comparison.pairs[0] if comparison.pairs else None
    words = first.words() if first is not None else "units"
    singular = first.a.inputs.unit(first.unit).singular if first is not None else "unit"
    for pair in comparison.pairs:
        a, b = name(pair.a.run.id), name(pair.b.run.id)
        d = pair.decomposition
        carried = d.share_of_log_ratio
        ratio_rows.append(
            (
                a,
                b,
                fmt.num(pair.ratio, 4),
                fmt.num(d.throughput_ratio, 4),
                fmt.num(d.utilisation_ratio, 4),
                fmt.num(d.hourly_cost_ratio, 4),
                fmt.pct(carried.throughput if carried is not None else None),
                fmt.pct(carried.utilisation if carried is not None else None),
                fmt.pct(carried.hourly_cost if carried is not None else None),
            )
        )
        diff = d.hourly.difference_as_share_of_a
        diff_rows.append((a, b, *(fmt.pct(v) for _, v in diff.items())))
        for be in pair.break_even:
            be_rows.append(
                (
                    a,
                    b,
                    name(be.run_id),
                    fmt.text(be.input),
                    fmt.text(be.unit),
                    fmt.num(be.current, 4),
                    fmt.num(be.value, 4) if be.value is not None else fmt.text(be.reason),
                    fmt.num(be.verified_ratio, 6),
                )
            )
        for s in pair.sensitivity[:SENSITIVITY_ROWS]:
            sens_rows.append(
                (
                    a,
                    b,
                    f"{s.run}: {name(s.run_id)}",
                    fmt.text(s.input),
                    fmt.num(s.value, 4),
                    fmt.text(s.unit),
                    fmt.num(s.ratio_at_minus_20pct, 4),
                    fmt.num(s.ratio_at_plus_20pct, 4),
                    fmt.num(s.swing, 3),
                    fmt.text(s.note or ""),
                )
            )
    return [
        Table(
            key="comparison",
            title="Cost-efficiency ratio and what it is made of",
            columns=(
                "A",
                "B",
                f"ratio: A's {words} per currency unit ÷ B's",
                "throughput ratio (A/B)",
                "utilisation ratio (A/B)",
                "hourly cost ratio (B/A)",
                "carried by throughput (%)",
                "carried by utilisation (%)",
                "carried by hourly cost (%)",
            ),
            rows=tuple(ratio_rows),
            provenance="gpuledger.cost.comparison.compare: ratio = throughput ratio × utilisation "
            "ratio × hourly cost ratio; "
            f"'carried by' = each factor's share of ln(ratio). A ratio above 1 means A is cheaper per "
            f"{singular}.",
        ),
        Table(
            key="comparison_hourly",
            title="Where the hourly costs differ: (B − A) per component, as % of A's hourly cost",
            columns=("A", "B", "hardware", "rental", "energy", "labour", "other opex"),
            rows=tuple(diff_rows),
            provenance="The components sum to (hourly cost ratio − 1) × 100 %.",
        ),
        Table(
            key="break_even",
            title=f"Break-even: B's input at which A and B cost the same per {singular}",
            columns=("A", "B", "run changed", "input", "unit", "now", "break-even", "ratio when recomputed"),
            rows=tuple(be_rows),
            provenance="Each break-even value was put back into the cost model: 'ratio when recomputed' ≈ 1 "
            "confirms it.",
        ),
        Table(
            key="sensitivity",
            title=f"Sensitivity: each input −20 % / +20 % → ratio (largest {SENSITIVITY_ROWS} swings)",
            columns=(
                "A",
                "B",
                "input of",
                "input",
                "value",
                "unit",
                "ratio at −20 %",
                "ratio at +20 %",
                "swing",
                "note",
            ),
            rows=tuple(sens_rows),
            provenance="One input moved at a time, everything else as measured and profiled.",
        ),
    ]


def _side(v: SideValue) -> str:
    value = v.value
    shown = fmt.num(value) if isinstance(value, float) else fmt.MISSING if value is None else fmt.text(value)
    return f"{shown} ({v.origin})"


def throughput_tables(comparison: Comparison, names: dict[str, str]) -> list[Table]:
    """Each pair's throughput ratio taken apart (its parts, what each stands for, its inputs with their
    origins) and what differs between the two runs in ways that change the ratio, both sides of each (or
    "like for like")."""
    def name(run_id: str) -> str:
        return names.get(run_id, run_id)

    part_rows = []
    like_rows = []
    for pair in comparison.pairs:
        a, b = name(pair.a.run.id), name(pair.b.run.id)
        d = pair.decomposition
        for part in d.throughput_parts:
            inputs = "; ".join(f"{i.name} ({i.unit}): {_side(i.a)} vs {_side(i.b)}" for i in part.inputs)
            part_rows.append(
                (a, b, part.part, fmt.num(part.factor, 4), fmt.text(part.what), fmt.text(inputs))
            )
        like = pair.likeness
        if not like.differences:
            like_rows.append((a, b, fmt.MISSING, fmt.text(like.summary), "", "", ""))
        for diff in like.differences:
            status = "expected (each vendor's own)" if diff.expected else diff.status
            like_rows.append(
                (a, b, diff.aspect, status, fmt.text(diff.a), fmt.text(diff.b), fmt.text(diff.why))
            )
    return [
        Table(
            key="throughput_parts",
            title="The throughput ratio taken apart: hardware × precision × software × load",
            columns=("A", "B", "part", "factor (A/B)", "what it is", "inputs: A vs B (origin)"),
            rows=tuple(part_rows),
            provenance="gpuledger.cost.comparison.decomposition: the factors multiply to the throughput "
            "ratio (A/B); a part that cannot be computed says why, and the unexplained remainder holds it. "
            "The model and the order of the swaps: docs/published.md, 'Checking a 5x'; each input's source: "
            "--json (numbers.comparison.pairs[].decomposition.throughput_parts[].inputs).",
        ),
        Table(
            key="like_for_like",
            title="Like for like: what differs between the two runs in ways that change the ratio",
            columns=("A", "B", "aspect", "status", "A's side", "B's side", "why it changes the ratio"),
            rows=tuple(like_rows),
            provenance="gpuledger.cost.comparison.likeness: the hardware generation (the catalog's "
            "architecture and launch year), precision, model, workload (mean lengths per request, 5 % "
            "apart), scenario, framework and version, submitter, devices, accuracy target and division, "
            "price basis; 'unknown' where a run does not record it; 'like for like' when nothing differs "
            "(each vendor's own serving stack apart). The warnings (notes) are about the runs' settings "
            "and measurements.",
        ),
    ]


def parts_figure(pair: PairComparison, names: dict[str, str]) -> Figure:
    """A bar per factor of the pair's ratio — the throughput parts, utilisation, hourly cost — as log10 of
    the factor: above 0 in A's favour, below in B's; the bars sum to log10 of the ratio."""
    a, b = names.get(pair.a.run.id, pair.a.run.id), names.get(pair.b.run.id, pair.b.run.id)
    d = pair.decomposition
    factors: list[tuple[str, float]] = [(p.part, p.factor) for p in d.throughput_parts]
    factors += [("utilisation", d.utilisation_ratio), ("hourly cost (B/A)", d.hourly_cost_ratio)]
    series = Series(name=f"{a} vs {b}", x=tuple(k for k, _ in factors),
                    y=tuple(math.log10(v) for _, v in factors))
    return Figure(
        key=f"ratio_parts_{pair.a.run.id}_{pair.b.run.id}",
        title=f"{a} vs {b}: what the {fmt.num(pair.ratio)}x is made of",
        kind="bar",
        x_title="factor of the ratio (A/B)",
        y_title="log10 of the factor (0: x1, +1: x10, −1: ÷10)",
        series=(series,),
        provenance="gpuledger.cost.comparison: ratio = throughput parts (hardware × precision × software × "
        "load, or the unexplained remainder) × utilisation ratio × hourly-cost ratio (B/A); the bars' log10 "
        "values sum to log10 of the ratio.",
    )
