"""How ``cost``, ``compare`` and ``estimate`` print: the answer first (gpuledger.report.headline),
then what the price is made of, fitted to the terminal's width (gpuledger.report.layout); long provenance
sentences once, as numbered notes at the end."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text

from gpuledger.cli.common import console
from gpuledger.quantity import percent

if TYPE_CHECKING:
    from gpuledger.cost import Comparison, Estimate, RunCost
    from gpuledger.cost.comparison.compare import PairComparison
    from gpuledger.cost.comparison.decomposition import SideValue
    from gpuledger.cost.pricing.document import CostDocument
    from gpuledger.report.layout import Cell, Notes

NA = "—"


def _num(value: float | None, fmt: str = ",.4g") -> str:
    if value is None:
        return NA
    if fmt == ",.4g" and abs(value) >= 1000:
        return format(value, ",.0f")
    return format(value, fmt)


def _money(value: float | None, currency: str, per: str = "") -> str:
    if value is None:
        return NA
    digits = ",.2f" if abs(value) >= 100 else ",.4g"
    return f"{format(value, digits)} {currency}{per}"


def _pct(value: float | None) -> str:
    return NA if value is None else f"{value:.0%}"


def render_operating_point(cost: CostDocument, notes: Notes) -> None:
    """What each stage of a sweep would cost under the same hourly cost, the priced one marked (the
    rule that picked it is a "why" line of the answer)."""
    from gpuledger.report.layout import print_table

    op = cost.operating_point
    if op is None or not op.stages:
        return
    cur = cost.currency
    first = op.stages[0]
    rows = []
    for row in op.stages:
        mark = " ◀ priced" if row.stage == op.stage else ""
        rows.append(
            (row.stage + mark, _num(row.rate.value), _pct(row.slo_met_ratio), _money(row.price.value, ""))
        )
    print_table(
        console,
        f"Every stage under the same hourly cost ({cur})",
        ("stage", first.price.info.rate_text, "SLOs met", first.price.label(cur)),
        rows,
    )


def _cost_rows(doc: CostDocument) -> list[tuple[str, str]]:
    """The cost per unit of work: each unit's price, what a currency unit buys, the prices of the run's
    kind (input and output tokens priced separately, the price at SLO), and the energy per unit."""
    cur = doc.currency
    head = doc.throughput.served_per_hour.unit
    rows: list[tuple[str, str]] = []
    for price in doc.prices:
        if price.value is not None or price.unit == head:
            rows.append((price.label(cur), _money(price.value, cur)))
    for extra in doc.extras:
        for price in extra.prices():
            indent = "  " if price.qualifier == "priced separately" else ""
            rows.append((indent + price.label(cur), _money(price.value, cur)))
    for y in doc.yields:
        if y.value is not None:
            rows.append((f"{y.plural} per {cur}", _num(y.value, ",.0f")))
    mark = " (estimate)" if doc.energy.estimate else ""
    for e in doc.energy.per_unit:
        if e.value is not None:
            rows.append((f"J per {e.singular}{mark}", _num(e.value)))
    return rows


def render_cost(
    cost: RunCost, notes: Notes | None = None, *, answer: bool = True, doc: CostDocument | None = None
) -> None:
    """The answer first (price, key figures, power, why), then what the price is made of: the hourly
    cost, every stage of a sweep, the cost per unit of work, and every input with its source. Long
    provenance sentences are printed once, at the end, and referred to by their marker. ``doc``: the
    cost's document when the caller has it already."""
    from gpuledger.cost.comparison.breakeven import run_sensitivity
    from gpuledger.report.headline import cost_answer
    from gpuledger.report.layout import Notes, paragraph, print_table
    from gpuledger.report.terminal import print_answer

    own_notes = notes is None
    notes = Notes() if notes is None else notes
    d = doc if doc is not None else cost.document()
    run = cost.run
    cur = d.currency
    notes.file(d.power.power_source)
    name = f"{run.label} (run {run.id})" if run.label.strip() else f"run {run.id}"
    if answer:
        print_answer(cost_answer(cost, run_sensitivity(cost), name), console, notes)
    described = f": {notes.cell(d.profile.description)}" if d.profile.description else ""
    paragraph(
        console,
        f"model {d.model or NA}, engine {d.engine or NA}; profile {d.profile.name} "
        f"({d.profile.mode}, {cur}){described}",
        style="dim",
        indent=2,
    )
    hourly = d.hourly
    labels = {
        "capex": "hardware amortisation",
        "rental": "rental",
        "energy": "energy (W x PUE x price)",
        "labour": "labour (setup + maintenance)",
        "other": "other opex (hosting, software)",
    }
    rows: list[tuple[Cell, ...]] = []
    for key, value in hourly.components():
        if value or key == "labour" or (key == "energy" and hourly.mode == "ownership"):
            # percent: never "-0%", nor "100%" for a share just under the whole
            rows.append((labels[key], _money(value, ""), percent(hourly.share(key), 1.0)))
    rows.append((Text("total", style="bold"), Text(_money(hourly.total, ""), style="bold"), "100 %"))
    print_table(console, f"Hourly cost ({cur} per wall-clock hour)", ("component", f"{cur}/h", "share"), rows)
    render_operating_point(d, notes)
    print_table(console, "Cost per unit of work", ("metric", "value"), _cost_rows(d))
    for extra in d.extras:
        for lead, text in extra.notes():
            paragraph(console, notes.shorten(text), lead=f"{lead}: ", indent=2)
    energy_text = d.energy.method or d.energy.reason or NA
    paragraph(console, notes.shorten(energy_text), lead="energy: ", indent=2)
    inputs = []
    for key, row in d.inputs.items():
        shown = row.value
        inputs.append((
            key,
            _num(shown) if isinstance(shown, int | float) else NA if shown is None else shown,
            row.unit,
            notes.cell(row.source),
        ))
    print_table(console, "Inputs", ("input", "value", "unit", "source"), inputs, align_numbers=False)
    for a in d.assumptions:
        paragraph(console, notes.shorten(a), lead="assumption: ", indent=2)
    for w in d.warnings:
        paragraph(console, notes.shorten(w), lead=Text("warning: ", style="yellow"), indent=2)
    if own_notes:
        notes.print(console)


def _side_cell(v: SideValue, notes: Notes) -> str:
    """An input's value on one side, its origin, and its source as a note."""
    value = v.value
    shown = _num(value) if isinstance(value, float) else NA if value is None else str(value)
    return f"{shown} {v.origin} {notes.ref(v.source)}" if v.source else f"{shown} {v.origin}"


def render_throughput_parts(pair: PairComparison, notes: Notes) -> None:
    """The throughput ratio's parts (hardware x precision x software x load, or what of it could be split
    and the unexplained remainder, named as such), what each stands for, and its inputs with their
    origins."""
    from gpuledger.report.layout import paragraph, print_table

    dec = pair.decomposition
    chain = " x ".join(f"{p.part} x{p.factor:.3g}" for p in dec.throughput_parts)
    paragraph(console, f"{dec.throughput_ratio:.3g}x = {chain}",
              lead="  throughput parts (A / B; they multiply to the ratio): ", indent=4)
    for part in dec.throughput_parts:
        paragraph(console, notes.shorten(part.what), lead=f"    {part.part} x{part.factor:.3g}: ", indent=6)
    rows = [
        (part.part, f"{i.name} ({i.unit})", _side_cell(i.a, notes), _side_cell(i.b, notes))
        for part in dec.throughput_parts for i in part.inputs
    ]
    if rows:
        print_table(
            console,
            "Inputs of the throughput parts (value, origin: catalog, run, published, derived or "
            "assumption; [n] its source)",
            ("part", "input", "A", "B"),
            rows,
            keys=2,
            align_numbers=False,
        )


def render_likeness(pair: PairComparison, notes: Notes) -> None:
    """What differs between the two runs in ways that change the ratio, each with both sides (or "like for
    like"), and, for a pair that is not, the closest like-for-like pair the store holds."""
    from gpuledger.report.layout import paragraph

    like = pair.likeness
    settings = (f" ({len(pair.warnings)} warning(s) about the runs' settings and measurements below)"
                if like.like_for_like and pair.warnings else "")
    paragraph(console, Text(like.summary + settings, style="bold" if not like.like_for_like else ""),
              lead="  ", indent=4)
    for d in like.differences:
        mark = "not known" if d.status == "unknown" else "expected" if d.expected else "differs"
        paragraph(console, f"{d.a} vs {d.b} — {notes.shorten(d.why)}", lead=f"    {d.aspect} ({mark}): ",
                  indent=6)
    found = pair.closest
    if found is None:
        return
    lead = "  closest like-for-like pair in this store: "
    c = found.found
    if c is None:
        paragraph(console, found.why, lead=lead, indent=4)
        return
    still = "" if c.likeness.like_for_like else f" — {c.likeness.summary}"
    paragraph(console, f"{c.label_a} ({c.a}) vs {c.label_b} ({c.b}), ratio {c.throughput_ratio_per_gpu:.3g}x "
                       f"({c.rate_unit}, A / B){still}; gpuledger compare {c.a} {c.b}", lead=lead, indent=4)


def render_comparison(comp: Comparison) -> None:
    """The ratio first (with its decomposition), then each run's price, the hourly-cost difference, the
    throughput ratio's parts, what differs (like for like) and the closest like-for-like pair, break-even
    values, sensitivity and the warnings."""
    from gpuledger.report.headline import price_line, ratio_answer
    from gpuledger.report.layout import Notes, paragraph, print_table
    from gpuledger.report.terminal import print_answer

    notes = Notes()
    cur = comp.currency
    answer = ratio_answer(comp)
    if answer is not None:
        print_answer(answer, console, notes)
        console.print()
    head_unit = comp.costs[0].headline
    head = comp.costs[0].inputs.unit(head_unit)
    doc = comp.document()
    rows = []
    for c, row in zip(comp.costs, doc.runs, strict=True):
        rows.append((
            row.run_id,
            ", ".join(row.devices) or NA,
            row.profile,
            _money(row.hourly_total, ""),
            price_line(c),
            _num(row.yield_of(head_unit), ",.0f"),
            notes.cell(row.power_source, 30),
        ))
    print_table(
        console,
        f"Runs ({cur}; price per run's own unit)",
        ("run", "devices", "profile", f"{cur}/h", "price", f"{head.plural} per {cur}", "power"),
        rows,
    )
    for c in comp.costs:
        if c.operating_point:
            paragraph(
                console,
                f"{c.run.id} priced at stage {c.operating_point.stage} of its sweep: "
                f"{c.operating_point.rule}",
                indent=2,
            )
    for pair in comp.pairs:
        dec = pair.decomposition
        a, b = pair.a.run.id, pair.b.run.id
        console.print()
        paragraph(
            console,
            Text(f"{a} vs {b}: ratio {pair.ratio:.3g}x ({pair.words()} per {cur}; {a} / {b})", style="bold"),
            indent=2,
        )
        paragraph(
            console,
            f"= throughput {dec.throughput_ratio:.3g}x  x  utilisation {dec.utilisation_ratio:.3g}x"
            f"  x  hourly cost (B/A) {dec.hourly_cost_ratio:.3g}x",
            lead="  ",
            indent=4,
        )
        carried = dec.share_of_log_ratio
        if carried is not None:
            paragraph(
                console,
                f"throughput {carried.throughput:.0%}, utilisation {carried.utilisation:.0%}, "
                f"hourly cost {carried.hourly_cost:.0%}",
                lead="  carried by: ",
                indent=4,
            )
        diff = dec.hourly.difference_as_share_of_a
        paragraph(
            console,
            ", ".join(f"{k} {v:+.0%}" for k, v in diff.items() if v) or "none",
            lead="  hourly cost difference (B - A, share of A's): ",
            indent=4,
        )
        render_throughput_parts(pair, notes)
        render_likeness(pair, notes)
        print_table(
            console,
            "Break-even (B's value at which A and B cost the same per unit)",
            ("input of B", "now", "break-even", "unit", "ratio check"),
            [
                (
                    be.input,
                    _num(be.current),
                    _num(be.value) if be.value is not None else notes.cell(be.reason or NA, 20),
                    be.unit,
                    "" if be.verified_ratio is None else f"{be.verified_ratio:.6f}",
                )
                for be in pair.break_even
            ],
        )
        print_table(
            console,
            "Sensitivity: each input -20 % / +20 % -> ratio",
            ("input", "run", "value", "-20 %", "+20 %", "note"),
            [
                (
                    row.input,
                    f"{row.run} {row.run_id}",
                    _num(row.value),
                    f"{row.ratio_at_minus_20pct:.3g}x",
                    f"{row.ratio_at_plus_20pct:.3g}x",
                    row.note or "",
                )
                for row in pair.sensitivity[:12]
            ],
            keys=2,
        )
        for w in pair.warnings:
            paragraph(console, notes.shorten(w), lead=Text("warning: ", style="yellow"), indent=2)
    notes.print(console)


def _ratio_text(value: float | None) -> str:
    """A utilisation share with significant digits: 0.0058 %, 4.3 %, never a "0%" that hides a figure."""
    if value is None:
        return NA
    from gpuledger.report import fmt

    return f"{fmt.num(value * 100, 2)} %"


def render_estimate(est: Estimate) -> None:
    from gpuledger.report.layout import Notes, paragraph

    notes = Notes()
    paragraph(
        console,
        Text("ESTIMATE", style="bold yellow")
        + Text(
            f" (roofline model, not a measurement): run {est.run.id} measured on {est.source.name} -> "
            f"{est.target.name}"
        ),
        indent=2,
    )
    sc = est.scale
    paragraph(
        console,
        f"throughput x{sc.speedup:.3g} (bandwidth x{sc.bandwidth_ratio:.3g}, compute "
        f"x{sc.compute_ratio:.3g}, prefill share {sc.prefill_share:.0%})",
        indent=2,
    )
    render_cost(est.cost, notes)
    eff = est.efficiency
    if eff.available:
        paragraph(
            console,
            f"{eff.origin} efficiency carried over: MFU {_ratio_text(eff.mfu)}, MBU {_ratio_text(eff.mbu)}"
            + (f" (assuming {', '.join(eff.premises)})" if eff.premises else ""),
            indent=2,
        )
    else:
        paragraph(console, f"MBU/MFU of the run: {eff.text()}", indent=2, style="dim")
    for a in est.assumptions:
        paragraph(console, notes.shorten(a), lead="assumption: ", indent=2)
    notes.print(console)
