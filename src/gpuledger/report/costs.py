"""The cost part of a report: each run priced by ``gpuledger.cost``, and the comparison.

Pricing is the cost model's job (``cost_of_run``, ``compare``); this module only asks for it and lays
out what it answers: the hourly cost by component, cost per 1M tokens (stacked by component), the
ratio between runs with its decomposition, break-even values and sensitivity. A run that cannot be
priced (no tokens, no power and no TDP, a GPU without a catalog price) gets a "not measured" line
with the cost model's own reason; an unknown profile the user named is an error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuledger.errors import GpuledgerError
from gpuledger.records import DoctorRunRecord
from gpuledger.report import fmt
from gpuledger.report.model import Figure, Section, Series, Table

if TYPE_CHECKING:
    from gpuledger.report.build import RunData

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
    """What the cost model answered: ``per_run`` holds ``RunCost.to_dict()`` by run id, ``errors`` the
    reason a run could not be priced; ``comparison`` is ``Comparison.to_dict()`` (two or more runs)."""

    per_run: dict[str, dict[str, Any]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    comparison: dict[str, Any] | None = None
    comparison_error: str | None = None


def _why(exc: GpuledgerError) -> str:
    return exc.message + (f" ({exc.hint})" if exc.hint else "")


def cost_runs(runs: Sequence[RunData], doctor_runs: Sequence[DoctorRunRecord]) -> Costs:
    """Price every run; compare the first with the others when two or more could be priced."""
    from gpuledger.catalog import load_catalog
    from gpuledger.cost import compare, cost_of_run, default_profile_for, load_profile

    catalog = load_catalog()
    out = Costs()
    priced: list[Any] = []
    # A profile the user named must exist and parse: that is an error, not a missing section.
    explicit = {r.info.id: load_profile(r.profile, catalog) for r in runs if r.profile}
    for r in runs:
        try:
            profile = explicit.get(r.info.id) or default_profile_for(r.info, catalog)
            cost = cost_of_run(r.info, profile, catalog=catalog, doctor_records=list(doctor_runs))
        except GpuledgerError as exc:
            out.errors[r.info.id] = _why(exc)
            continue
        out.per_run[r.info.id] = cost.to_dict()
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
            out.comparison = compare(priced).to_dict()
        except GpuledgerError as exc:
            out.comparison_error = _why(exc)
    return out


def _num(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def _money_key(cost: Mapping[str, Any], template: str) -> Any:
    return cost.get(template.format(p=str(cost.get("currency", "USD")).lower()))


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
            for w in c.get("warnings", []):
                notes.append(f"{r.ref.name} — warning: {fmt.text(w)}")
            for a in c.get("assumptions", []):
                notes.append(f"{r.ref.name} — assumption: {fmt.text(a)}")

    if len(runs) > 1:
        if costs.comparison is not None:
            tables.extend(_comparison_tables(costs.comparison, names))
            for pair in costs.comparison.get("pairs", []):
                for w in pair.get("warnings", []):
                    notes.append(
                        f"{names.get(pair.get('a'), pair.get('a'))} vs "
                        f"{names.get(pair.get('b'), pair.get('b'))} — "
                        f"warning: {fmt.text(w)}"
                    )
        else:
            missing.append(f"comparison: {costs.comparison_error}")
    return Section(
        key="cost",
        title="Cost",
        intro="What a token costs under each run's cost profile, what the cost is made of and — for a "
        "comparison — the ratio, what drives it and what would flip it. Money is in the profile's currency.",
        tables=tuple(tables),
        figures=tuple(figures),
        not_measured=tuple(missing),
        notes=tuple(notes),
    )


def _used_components(priced: list[tuple[RunData, dict[str, Any]]]) -> list[tuple[str, str]]:
    """The hourly components that are non-zero for at least one run (rental vs ownership differ)."""
    used = []
    for key, label in COMPONENTS:
        for _, c in priced:
            value = _num((c.get("hourly") or {}).get(f"{key}_{str(c.get('currency', '')).lower()}_per_hour"))
            if value:
                used.append((key, label))
                break
    return used


def _per_run_tables(priced: list[tuple[RunData, dict[str, Any]]]) -> list[Table]:
    components = _used_components(priced)
    headline = []
    hourly_rows = []
    split_rows = []
    for r, c in priced:
        cur = str(c.get("currency", ""))
        power = c.get("power") or {}
        energy = c.get("energy") or {}
        profile = c.get("profile") or {}
        headline.append(
            (
                r.ref.name,
                fmt.text(profile.get("name")),
                fmt.text(profile.get("mode")),
                cur,
                fmt.num(_money_key(c, "{p}_per_1m_output_tokens"), 4),
                fmt.num(_money_key(c, "{p}_per_1m_tokens"), 4),
                fmt.num(_money_key(c, "output_tokens_per_{p}"), 4),
                fmt.num(_money_key(c, "{p}_per_request"), 4),
                fmt.num(_money_key(c, "{p}_per_1m_output_tokens_at_slo"), 4),
                fmt.pct(c.get("utilisation")),
                fmt.num(power.get("average_w")),
                fmt.text(power.get("power_source")),
                fmt.num(energy.get("joules_per_output_token")),
            )
        )
        hourly = c.get("hourly") or {}
        p = cur.lower()
        hourly_rows.append(
            (
                r.ref.name,
                cur,
                *(fmt.num(hourly.get(f"{k}_{p}_per_hour"), 4) for k, _ in components),
                fmt.num(hourly.get(f"{p}_per_hour"), 4),
            )
        )
        split = c.get("split") or {}
        split_rows.append(
            (
                r.ref.name,
                cur,
                fmt.num(split.get(f"{p}_per_1m_input_tokens"), 4),
                fmt.num(split.get(f"{p}_per_1m_output_tokens"), 4),
                fmt.pct(split.get("input_cost_share")),
                fmt.text(split.get("rule") or split.get("reason")),
            )
        )
    return [
        Table(
            key="cost",
            title="Cost per run",
            columns=(
                "run",
                "profile",
                "mode",
                "currency",
                "per 1M output tokens",
                "per 1M tokens (in+out)",
                "output tokens per currency unit",
                "per request",
                "per 1M output tokens at SLO",
                "utilisation (%)",
                "priced power (W)",
                "power source",
                "J per output token",
            ),
            rows=tuple(headline),
            provenance="gpuledger.cost: cost per 1M tokens = hourly cost ÷ (tokens/s × "
            "3600 × utilisation) × 1e6, "
            "with the run's measured tokens/s; money in the profile's currency; priced power = utilisation × "
            "serving W + (1 − utilisation) × idle W; J per output token from measured energy when valid.",
        ),
        Table(
            key="cost_hourly",
            title="Hourly cost by component (currency per hour)",
            columns=("run", "currency", *(label for _, label in components), "total"),
            rows=tuple(hourly_rows),
            provenance="Hardware = (GPU price × GPUs + host share) ÷ (amortisation months × 730 h); energy = "
            "average W ÷ 1000 × PUE × price per kWh; labour = setup hours "
            "amortised the same way + maintenance "
            "hours per month ÷ 730 h; components that are zero for every run are "
            "left out; every input with its "
            "source in --json (numbers.runs[].cost.inputs).",
        ),
        Table(
            key="cost_split",
            title="Input and output tokens priced separately",
            columns=(
                "run",
                "currency",
                "per 1M input tokens",
                "per 1M output tokens",
                "input share (%)",
                "rule",
            ),
            rows=tuple(split_rows),
            provenance="The hourly cost split between input and output tokens by the "
            "rule shown (gpuledger.cost).",
        ),
    ]


def _stacked_figure(priced: list[tuple[RunData, dict[str, Any]]]) -> Figure:
    currencies = sorted({str(c.get("currency", "")) for _, c in priced})
    series = []
    for key, label in COMPONENTS:
        ys: list[float] = []
        for _, c in priced:
            hourly = c.get("hourly") or {}
            p = str(c.get("currency", "")).lower()
            total = _num(hourly.get(f"{p}_per_hour"))
            per_m = _num(_money_key(c, "{p}_per_1m_output_tokens"))
            part = _num(hourly.get(f"{key}_{p}_per_hour"))
            ys.append(per_m * part / total if per_m is not None and part is not None and total else 0.0)
        if any(ys):
            series.append(Series(name=label, x=tuple(r.ref.name for r, _ in priced), y=tuple(ys)))
    unit = currencies[0] if len(currencies) == 1 else "each run's profile currency"
    return Figure(
        key="cost_breakdown",
        title="Cost per 1M output tokens, by component",
        kind="bar",
        x_title="run",
        y_title=f"{unit} per 1M output tokens",
        series=tuple(series),
        provenance="gpuledger.cost: each hourly cost component ÷ output tokens served "
        "per hour (tokens/s × 3600 × "
        "utilisation) × 1e6; the bar's height is the run's cost per 1M output tokens.",
    )


def _comparison_tables(comparison: Mapping[str, Any], names: Mapping[str, str]) -> list[Table]:
    def name(run_id: Any) -> str:
        return names.get(str(run_id), str(run_id))

    basis = str(comparison.get("basis", "output"))
    ratio_rows = []
    diff_rows = []
    be_rows = []
    sens_rows = []
    for pair in comparison.get("pairs", []):
        a, b = name(pair.get("a")), name(pair.get("b"))
        d = pair.get("decomposition") or {}
        carried = d.get("share_of_log_ratio") or {}
        ratio_rows.append(
            (
                a,
                b,
                fmt.num(pair.get("ratio"), 4),
                fmt.num(d.get("throughput_ratio"), 4),
                fmt.num(d.get("utilisation_ratio"), 4),
                fmt.num(d.get("hourly_cost_ratio"), 4),
                fmt.pct(carried.get("throughput")),
                fmt.pct(carried.get("utilisation")),
                fmt.pct(carried.get("hourly_cost")),
            )
        )
        diff = (d.get("hourly") or {}).get("difference_as_share_of_a") or {}
        diff_rows.append(
            (a, b, *(fmt.pct(diff.get(k)) for k in ("capex", "rental", "energy", "labour", "other")))
        )
        for be in pair.get("break_even", []):
            be_rows.append(
                (
                    a,
                    b,
                    name(be.get("run_id")),
                    fmt.text(be.get("input")),
                    fmt.text(be.get("unit")),
                    fmt.num(be.get("current"), 4),
                    fmt.num(be.get("value"), 4)
                    if be.get("value") is not None
                    else fmt.text(be.get("reason")),
                    fmt.num(be.get("verified_ratio"), 6),
                )
            )
        for s in list(pair.get("sensitivity", []))[:SENSITIVITY_ROWS]:
            sens_rows.append(
                (
                    a,
                    b,
                    f"{s.get('run')}: {name(s.get('run_id'))}",
                    fmt.text(s.get("input")),
                    fmt.num(s.get("value"), 4),
                    fmt.text(s.get("unit")),
                    fmt.num(s.get("ratio_at_minus_20pct"), 4),
                    fmt.num(s.get("ratio_at_plus_20pct"), 4),
                    fmt.num(s.get("swing"), 3),
                    fmt.text(s.get("note") or ""),
                )
            )
    what = "output tokens" if basis == "output" else "tokens (input + output)"
    return [
        Table(
            key="comparison",
            title="Cost-efficiency ratio and what it is made of",
            columns=(
                "A",
                "B",
                f"ratio: A's {what} per currency unit ÷ B's",
                "throughput ratio (A/B)",
                "utilisation ratio (A/B)",
                "hourly cost ratio (B/A)",
                "carried by throughput (%)",
                "carried by utilisation (%)",
                "carried by hourly cost (%)",
            ),
            rows=tuple(ratio_rows),
            provenance="gpuledger.cost.compare: ratio = throughput ratio × utilisation "
            "ratio × hourly cost ratio; "
            "'carried by' = each factor's share of ln(ratio). A ratio above 1 means A is cheaper per token.",
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
            title="Break-even: B's input at which A and B cost the same per token",
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
