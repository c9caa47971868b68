"""The answer first: what a unit of work costs on each run's stack (or how two stacks compare), the few
figures beside it, and a short "why" — before any table.

For a run: the price of its headline unit at the priced operating point (and its other price units), the
key measured figures of its kind (its ``report`` facet's ``answer_facts``: output tok/s, TTFT and TPOT
p50/p99 for inference; images/s and s/image for image generation; training tok/s, step time and MFU for
training), power and energy per unit — or why not — and the profile; why: the largest hourly cost component
with its share, the operating-point rule of a sweep, what makes the figure noisy or estimated, the kind's
own why lines (``answer_why``), and the input that moves the answer most (the top row of the run's
sensitivity). For a comparison: the ratio first, with its decomposition.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpuledger.bench.validity import run_verdict
from gpuledger.cost import Comparison, RunCost
from gpuledger.cost.comparison.breakeven import CostSensitivity
from gpuledger.cost.comparison.groups import compare_groups
from gpuledger.cost.pricing.efficiency import run_efficiency
from gpuledger.cost.pricing.operating import operating_point
from gpuledger.cost.pricing.runcost import stored_cost
from gpuledger.errors import GpuledgerError, InvalidInputError
from gpuledger.quantity import percent
from gpuledger.records import RequestRecord, RunInfo, RunSummary
from gpuledger.records.run import NOISE_WARNINGS
from gpuledger.records.validity import Verdict
from gpuledger.report import fmt
from gpuledger.report.costs import Costs
from gpuledger.report.groups import group_answer, group_comparison_answer, groups_in
from gpuledger.report.kinds import report_of, report_of_summary
from gpuledger.report.model import Answer, Section, Table
from gpuledger.report.rundata import RunData
from gpuledger.report.verdict import verdict_fact, verdict_table, verdict_why

MAX_WHY = 5
# The factors of a ratio (``cost.comparison.compare.LogShares``), as the answer names them.
_FACTOR_WORDS = (("throughput", "throughput"), ("utilisation", "utilisation"), ("hourly_cost", "hourly cost"))
_COMPONENT_WORDS = {
    "capex": "hardware amortisation",
    "rental": "the rental price",
    "energy": "energy",
    "labour": "labour (setup + maintenance)",
    "other": "other opex",
}


def _money(value: float | None, currency: str) -> str:
    return f"{fmt.num(value, 3)} {currency}" if value is not None else fmt.MISSING


def price_line(cost: RunCost) -> str:
    """``"0.622 USD per 1M output tokens"``: the run's headline price."""
    per = cost.inputs.unit(cost.headline).per_text()
    return f"{_money(cost.evaluation.headline_cost(), cost.currency)} {per}"


def _other_prices(cost: RunCost) -> list[str]:
    out = []
    for unit in cost.summary.yield_units():
        if unit == cost.headline:
            continue
        value = cost.evaluation.cost_per(unit)
        if value is not None:
            out.append(f"{_money(value, cost.currency)} {cost.inputs.unit(unit).per_text()}")
    return out


def power_fact(cost: RunCost) -> str:
    """What power the price rests on, worded by the profile's mode."""
    pw = cost.power
    if cost.profile.mode == "rental":
        if pw.measured:
            return f"{fmt.num(pw.serving_w)} W measured ({pw.source}) — not priced: rental includes energy"
        return "not measured — not needed for the price: rental includes energy"
    mark = " (estimate)" if pw.estimate else ""
    return f"{fmt.num(cost.inputs.average_power_w)} W priced{mark} — {pw.source}"


def energy_fact(cost: RunCost) -> str:
    unit = cost.inputs.unit(cost.headline)
    energy = cost.energy
    joules = energy.per(cost.headline)
    if joules is None:
        return f"unavailable — {energy.reason or 'no energy measured'}"
    return f"{fmt.num(joules)} J per {unit.singular} ({energy.how()}: {energy.method})"


def _largest_component(cost: RunCost) -> str:
    hourly = cost.evaluation.hourly
    shares = hourly.shares()
    key = max(shares, key=lambda k: shares[k])
    return (
        f"{_COMPONENT_WORDS.get(key, key)} is {percent(shares[key], 1.0)} of the "
        f"{_money(hourly.total, cost.currency)}/h this stack costs"
    )


def _moves_most(cost: RunCost, rows: Sequence[CostSensitivity]) -> str | None:
    if not rows:
        return None
    top = rows[0]
    per = cost.inputs.unit(cost.headline).per_text()
    lo, hi = sorted((top.cost_at_minus_20pct, top.cost_at_plus_20pct))
    return (
        f"the input that moves it most: {top.input} ±20 % gives {_money(lo, cost.currency)} … "
        f"{_money(hi, cost.currency)} {per}"
    )


def _noise(info: RunInfo) -> list[str]:
    out = []
    for w in [*(info.client.get("warnings") or []), *(info.server.get("warnings") or [])]:
        text = str(w)
        if any(phrase in text for phrase in NOISE_WARNINGS):
            out.append(f"noisy: {text}")
    return out


def _facts(summary: RunSummary, estimate: bool = False) -> list[tuple[str, str]]:
    """The key facts of the summary's kind (its ``report`` facet); of an ``estimate`` (a summary scaled to
    another GPU), only the figures it carries, each marked an estimate."""
    return report_of_summary(summary).answer_facts(summary, estimate)


def cost_answer(
    cost: RunCost, rows: Sequence[CostSensitivity], name: str | None = None, verdict: Verdict | None = None
) -> Answer:
    """The answer for one priced run, in a report or on its own (``cost``, ``estimate``, ``run``):
    ``name`` is how the run is called (default: its label, else its id). The run's validity verdict comes
    first (``verdict``; default the stored one, or what the run's header supports), its worst checks
    among the why lines."""
    run = cost.run
    verdict = verdict if verdict is not None else run_verdict(run)
    origin = cost.summary.origin()
    # An estimate's rates are not the published ones it was scaled from.
    scaled = "estimated from the rates" if cost.rate_source.startswith("estimate") else "rates"
    sub = ([f"{scaled} {origin.label}"] if origin is not None else []) + _other_prices(cost)
    if cost.operating_point:
        sub.append(f"at stage {cost.operating_point.stage} of the sweep")
    facts = [verdict_fact(verdict), *_facts(cost.summary, estimate=cost.rate_source.startswith("estimate"))]
    facts.append(("power", power_fact(cost)))
    facts.append((f"energy per {cost.inputs.unit(cost.headline).singular}", energy_fact(cost)))
    if cost.efficiency is not None and cost.efficiency.applies:
        facts.append(("MBU / MFU", cost.efficiency.text()))
    facts.append(("profile", f"{cost.profile.name or '(unnamed)'} ({cost.profile.mode}, {cost.currency})"))
    why = [*verdict_why(verdict), _largest_component(cost)]
    if cost.operating_point:
        why.append(f"priced at stage {cost.operating_point.stage}: {cost.operating_point.rule}")
    why.extend(_noise(run))
    if cost.power.estimate and cost.profile.mode == "ownership":
        why.append(f"power is not measured: {cost.power.source}")
    moves = _moves_most(cost, rows)
    if moves:
        # The input that moves the answer most is always shown, within the five lines.
        why = [*why[: MAX_WHY - 1], moves]
    return Answer(
        title=name or run.label.strip() or run.id,
        headline=price_line(cost),
        subline=" · ".join(sub),
        facts=tuple(facts),
        why=tuple(why[:MAX_WHY]),
    )


def run_answer(
    r: RunData, cost: RunCost, rows: Sequence[CostSensitivity], verdict: Verdict | None = None
) -> Answer:
    """A priced run's answer in a report; ``verdict``: its verdict when the caller has judged it already."""
    judged = verdict if verdict is not None else run_verdict(r.info, r.requests)
    return cost_answer(cost, rows, r.ref.name, judged)


def measured_answer(
    info: RunInfo,
    name: str | None = None,
    records: Sequence[RequestRecord] | None = None,
    verdict: Verdict | None = None,
) -> Answer:
    """The answer for a run that is not priced here (``bench``, ``show``): its headline rate — for a
    sweep, the rate of the stage ``gpuledger cost`` prices, named with the rule that picks it (the
    whole sweep's rate blends every load and describes none) — the key measured figures, and how to
    price it. The run's validity verdict comes first (stored, else computed from ``records`` and the
    header; ``verdict``: one the caller already has), its worst checks among the why lines."""
    title = name or info.label.strip() or info.id
    summary = info.summary
    kind = report_of(info)
    if summary is None or not summary.headline():
        reasons = {
            "running": "still running",
            "incomplete": "the run did not finish",
            "failed": "the run failed",
        }
        return Answer(
            title=title,
            headline=f"no measurement — {reasons.get(info.status, 'no summary stored')}",
            facts=((f"{kind.items} stored", fmt.num(info.num_requests)),),
        )
    op = None
    verdict = verdict if verdict is not None else run_verdict(info, records)
    why: list[str] = verdict_why(verdict)
    try:
        op = operating_point(info)
    except GpuledgerError as exc:
        why.append(f"no stage to price: {exc.message}")
    priced = op.summary if op is not None else summary
    unit = summary.headline()
    info_u = summary.unit(unit)
    rate = priced.rate(unit)
    headline = f"{fmt.num(rate)} {info_u.rate_text}"
    if op is not None:
        headline += f" at stage {op.stage}"
        subline = "the stage gpuledger cost prices"
        blend = summary.rate(unit)
        why.append(f"priced at stage {op.stage}: {op.rule}")
        why.append(
            f"the whole sweep's {fmt.num(blend)} {info_u.rate_text} blends "
            f"{len(summary.stage_summaries())} loads: no load runs at that rate"
        )
        if op.warning:
            why.append(op.warning)
    else:
        origin = summary.origin()
        subline = origin.label if origin is not None else "over the measured window"
    facts = [verdict_fact(verdict), *_facts(priced)[1:]]
    facts.append((f"{kind.items} ok / failed", f"{priced.num_ok:,} / {priced.num_failed:,}"))
    efficiency = run_efficiency(info, priced)
    if efficiency.applies:
        facts.append(("MBU / MFU", efficiency.text()))
    facts.append(("price", f"not priced here — gpuledger cost {info.id} [--profile NAME]"))
    why.extend(kind.answer_why(summary))
    why.extend(_noise(info))
    return Answer(
        title=title, headline=headline, subline=subline, facts=tuple(facts), why=tuple(why[:MAX_WHY])
    )


def saved_price(info: RunInfo, result: object) -> str | None:
    """The headline price of a saved ``cost --json`` document (``store.list_cost_evaluations``), in the
    run's own unit: ``"0.986 USD per 1M output tokens"``; None when it has none — the run has no work, or
    the document is not one this gpuledger reads (``cost.pricing.runcost.stored_cost``: another shape)."""
    summary = info.summary
    if summary is None or not isinstance(result, Mapping) or not summary.headline():
        return None
    try:
        doc = stored_cost(result, summary)
    except InvalidInputError:
        return None
    head = summary.headline()
    value = doc.price(head)
    return None if value is None else f"{_money(value, doc.currency)} {summary.unit(head).per_text()}"


def stage_table(info: RunInfo, priced: str | None = None) -> Table | None:
    """A sweep's stages side by side (their key figures, SLO attainment), the priced one marked; None
    for a run without stages."""
    summary = info.summary
    stages = summary.stage_summaries() if summary is not None else []
    if len(stages) < 2:
        return None
    if priced is None:
        try:
            op = operating_point(info)
        except GpuledgerError:
            op = None
        priced = op.stage if op is not None else None
    heads: list[str] = []
    rows: list[tuple[str, ...]] = []
    for st in stages:
        figures = st.key_figures()
        if not heads:
            head = st.headline()
            heads = [
                st.unit(head).rate_text if i == 0 else f"{label} ({q.unit})"
                for i, (label, q) in enumerate(figures)
            ]
        cells = [fmt.num(q.value) for _, q in figures]
        met = st.slo_attainment()
        mark = " ◀ priced" if st.stage_name() == priced else ""
        rows.append((st.stage_name() + mark, *cells, fmt.pct(met) if met is not None else fmt.MISSING))
    return Table(
        key="stages",
        title="Per stage of the sweep",
        columns=("stage", *heads, "SLOs met (%)"),
        rows=tuple(rows),
        provenance="Each stage over its own measured window; ◀ priced = the stage gpuledger cost prices.",
    )


def comparison_answer(costs: Costs, names: dict[str, str]) -> Answer | None:
    return ratio_answer(costs.comparison, names) if costs.comparison is not None else None


def ratio_answer(comp: Comparison, names: dict[str, str] | None = None) -> Answer | None:
    """The answer for a comparison: the first pair's ratio, with its decomposition (``names`` maps run
    ids to the names shown; default the ids)."""
    names = names or {}
    if not comp.pairs:
        return None
    pair = comp.pairs[0]
    a, b = names.get(pair.a.run.id, pair.a.run.id), names.get(pair.b.run.id, pair.b.run.id)
    d = pair.decomposition
    why = [
        f"= throughput {fmt.num(d.throughput_ratio)}x × utilisation {fmt.num(d.utilisation_ratio)}x × "
        f"hourly cost (B/A) {fmt.num(d.hourly_cost_ratio)}x",
    ]
    carried = d.share_of_log_ratio
    if carried is not None:
        parts = (f"{words} {percent(getattr(carried, k))}" for k, words in _FACTOR_WORDS)
        why.append("carried by: " + ", ".join(parts))
    biggest = d.biggest_part()
    if biggest is not None and len(d.throughput_parts) > 1:
        chain = " × ".join(f"{p.part} {fmt.num(p.factor)}x" for p in d.throughput_parts)
        name = "the unexplained remainder" if biggest.part == "remainder" else biggest.part
        why.append(f"throughput {fmt.num(d.throughput_ratio)}x = {chain}; the biggest part: {name}")
    elif biggest is not None:
        why.append(f"throughput {fmt.num(d.throughput_ratio)}x not taken apart: {biggest.what}")
    like = pair.likeness
    settings = f"; {len(pair.warnings)} warning(s) about the runs' settings and measurements" if (
        pair.warnings) else ""
    why.append(f"{like.summary}{settings} (see Cost)")
    if pair.sensitivity:
        top = pair.sensitivity[0]
        lo, hi = sorted((top.ratio_at_minus_20pct, top.ratio_at_plus_20pct))
        why.append(
            f"moves it most: {top.input} of {names.get(top.run_id, top.run_id)} ±20 % gives "
            f"{fmt.num(lo)}x … {fmt.num(hi)}x"
        )
    facts = tuple(
        (names.get(c.run.id, c.run.id), price_line(c)) for c in (pair.a, pair.b)
    )
    return Answer(
        title=f"{a} vs {b}",
        headline=f"{fmt.num(pair.ratio)}x the {pair.words()} per {comp.currency}",
        subline=f"{a} ÷ {b}; above 1: {a} is cheaper per {pair.a.inputs.unit(pair.unit).singular}",
        facts=facts,
        why=tuple(why[:MAX_WHY]),
    )


def answer_section(runs: Sequence[RunData], costs: Costs) -> Section:
    names = {r.info.id: r.ref.name for r in runs}
    answers: list[Answer] = []
    # Repeats first: a group's mean with its interval says more than any one of its runs.
    groups = groups_in([costs.per_run[r.info.id] for r in runs if r.info.id in costs.per_run])
    missing = []
    if len(groups) == 2:
        try:
            answers.append(group_comparison_answer(compare_groups(groups[0], groups[1])))
        except GpuledgerError as exc:
            missing.append(f"group comparison: {exc.message}")
    answers.extend(group_answer(g) for g in groups)
    comparison = comparison_answer(costs, names)
    if comparison is not None:
        answers.append(comparison)
    verdicts = [(r.ref.name, run_verdict(r.info, r.requests)) for r in runs]  # each run judged once
    for r, (_, verdict) in zip(runs, verdicts, strict=True):
        cost = costs.per_run.get(r.info.id)
        if cost is None:
            missing.append(f"{r.ref.name}: no price — {costs.errors.get(r.info.id, 'not priced')}")
            continue
        answers.append(run_answer(r, cost, costs.sensitivity.get(r.info.id, []), verdict))
    if len(runs) > 1 and comparison is None and costs.comparison_error:
        missing.append(f"comparison: {costs.comparison_error}")
    return Section(
        key="answer",
        title="The answer",
        answers=tuple(answers),
        not_measured=tuple(missing),
        tables=tuple(verdict_table(v, name) for name, v in verdicts if v is not None),
    )
