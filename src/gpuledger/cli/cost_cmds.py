"""``gpuledger cost``, ``compare``, ``estimate``, ``gpus``, ``profiles`` (docs/cost.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated

import typer
from rich.text import Text

from gpuledger.cli.common import DbOpt, JsonOpt, console, print_json, warn
from gpuledger.cli.groups import any_group, compare_group_args, cost_group
from gpuledger.errors import NotFoundError, StoreError, UsageError

if TYPE_CHECKING:
    from gpuledger.catalog import Catalog, GpuSpec
    from gpuledger.cost import Comparison, CostProfile, Estimate, RunCost
    from gpuledger.records import DoctorRunRecord, RunInfo
    from gpuledger.report.layout import Cell, Notes
    from gpuledger.store import Store

NA = "—"

ProfileOpt = Annotated[
    str | None,
    typer.Option(
        "--profile",
        "-p",
        help="Cost profile: a preset name (see `gpuledger profiles`) or a YAML file. "
        "Default: the catalog preset of the run's GPU.",
    ),
]


# ------------------------------------------------------------------------------------- formatting
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


# ------------------------------------------------------------------------------------- shared plumbing
def _open(db: str | None) -> Store:
    from gpuledger.store import open_store

    return open_store(db)


def _doctor_records(store: Store, profile: CostProfile) -> list[DoctorRunRecord] | None:
    return store.list_doctor_runs() if profile.from_doctor_history else None


def _profile_for(run: RunInfo, name: str | None, catalog: Catalog) -> CostProfile:
    from gpuledger.cost import default_profile_for, load_profile

    return load_profile(name, catalog) if name else default_profile_for(run, catalog)


def _cost(
    store: Store,
    run: RunInfo,
    profile_name: str | None,
    catalog: Catalog,
    stage: str | None = None,
    slo_attainment: float | None = None,
    gpus: int | None = None,
    gpu: str | None = None,
) -> RunCost:
    from gpuledger.cost import cost_of_run
    from gpuledger.cost.operating import DEFAULT_ATTAINMENT

    profile = _profile_for(run, profile_name, catalog)
    return cost_of_run(
        run,
        profile,
        catalog=catalog,
        doctor_records=_doctor_records(store, profile),
        stage=stage,
        slo_attainment=DEFAULT_ATTAINMENT if slo_attainment is None else slo_attainment,
        gpus=gpus,
        gpu=gpu,
    )


def render_operating_point(cost: RunCost, notes: Notes) -> None:
    """What each stage of a sweep would cost under the same hourly cost, the priced one marked (the
    rule that picked it is a "why" line of the answer)."""
    from gpuledger.cost.model import money_prefix
    from gpuledger.report.layout import print_table

    op = cost.operating_point
    if not op:
        return
    cur = cost.currency
    head = cost.inputs.unit(cost.headline)
    rate_key = cost.summary.rate_key(cost.headline)
    price_key = head.price_key(money_prefix(cur))
    rows = []
    for row in op["stages"]:
        mark = " ◀ priced" if row["stage"] == op["stage"] else ""
        rows.append((
            row["stage"] + mark,
            _num(row.get(rate_key)),
            _pct(row.get("slo_met_ratio")),
            _money(row.get(price_key), ""),
        ))
    print_table(
        console,
        f"Every stage under the same hourly cost ({cur})",
        ("stage", head.rate_text, "SLOs met", f"{cur} {head.per_text()}"),
        rows,
    )


def _cost_rows(cost: RunCost) -> list[tuple[str, str]]:
    """The cost per unit of work: each unit's price, what a currency unit buys, the extras of the run's
    kind (input and output tokens priced separately, the price at SLO), and the energy per unit."""
    from gpuledger.cost.model import money_prefix

    cur = cost.currency
    p = money_prefix(cur)
    ev, inp = cost.evaluation, cost.inputs
    d = cost.to_dict()
    rows: list[tuple[str, str]] = []
    for u in cost.summary.price_units():
        value = ev.cost_per(u)
        if value is not None or u == cost.headline:
            rows.append((f"{cur} {inp.unit(u).per_text()}", _money(value, cur)))
    split = d.get("split")
    if isinstance(split, dict) and split.get("rule"):
        for key, words in (("input", "input"), ("output", "output")):
            rows.append((
                f"  priced separately: {cur} per 1M {words} tokens",
                _money(split.get(f"{p}_per_1m_{key}_tokens"), cur),
            ))
    at_slo = {inp.unit(u).price_key(p) + "_at_slo": inp.unit(u) for u in cost.summary.price_units()}
    for key, unit in at_slo.items():
        value = d.get(key)
        if isinstance(value, int | float):
            rows.append((f"{cur} {unit.per_text()} at SLO", _money(value, cur)))
    for u in cost.summary.yield_units():
        value = ev.per_money(u)
        if value is not None:
            rows.append((f"{inp.unit(u).plural} per {cur}", _num(value, ",.0f")))
    for u in cost.summary.yield_units():
        joules = cost.energy.get(f"joules_per_{inp.unit(u).singular_key}")
        if isinstance(joules, int | float):
            mark = " (estimate)" if cost.energy.get("estimate") else ""
            rows.append((f"J per {inp.unit(u).singular}{mark}", _num(joules)))
    return rows


def render_cost(cost: RunCost, notes: Notes | None = None, *, answer: bool = True) -> None:
    """The answer first (price, key figures, power, why), then what the price is made of: the hourly
    cost, every stage of a sweep, the cost per unit of work, and every input with its source. Long
    provenance sentences are printed once, at the end, and referred to by their marker."""
    from gpuledger.cost.breakeven import run_sensitivity
    from gpuledger.report.headline import cost_answer
    from gpuledger.report.layout import Notes, paragraph, print_table
    from gpuledger.report.terminal import print_answer

    own_notes = notes is None
    notes = Notes() if notes is None else notes
    run = cost.run
    cur = cost.currency
    notes.file(cost.power.source)
    name = f"{run.label} (run {run.id})" if run.label.strip() else f"run {run.id}"
    if answer:
        print_answer(cost_answer(cost, run_sensitivity(cost), name), console, notes)
    described = f": {notes.cell(cost.profile.description)}" if cost.profile.description else ""
    paragraph(
        console,
        f"model {run.model or NA}, engine {run.engine or NA}; profile {cost.profile.name} "
        f"({cost.profile.mode}, {cur}){described}",
        style="dim",
        indent=2,
    )
    hourly = cost.evaluation.hourly
    shares = hourly.shares()
    labels = {
        "capex": "hardware amortisation",
        "rental": "rental",
        "energy": "energy (W x PUE x price)",
        "labour": "labour (setup + maintenance)",
        "other": "other opex (hosting, software)",
    }
    rows: list[tuple[Cell, ...]] = []
    for key, value in hourly.components().items():
        if value or key == "labour" or (key == "energy" and hourly.mode == "ownership"):
            rows.append((labels[key], _money(value, ""), _pct(shares[key])))
    rows.append((Text("total", style="bold"), Text(_money(hourly.total, ""), style="bold"), "100%"))
    print_table(console, f"Hourly cost ({cur} per wall-clock hour)", ("component", f"{cur}/h", "share"), rows)
    render_operating_point(cost, notes)
    print_table(console, "Cost per unit of work", ("metric", "value"), _cost_rows(cost))
    d = cost.to_dict()
    split = d.get("split")
    if isinstance(split, dict) and split.get("rule"):
        paragraph(console, notes.shorten(str(split["rule"])), lead="split rule: ", indent=2)
    energy = cost.energy
    energy_text = str(energy.get("method") or energy.get("reason") or NA)
    paragraph(console, notes.shorten(energy_text), lead="energy: ", indent=2)
    inputs = []
    for key, row in d["inputs"].items():
        value = row["value"]
        inputs.append((
            key,
            _num(value)
            if isinstance(value, int | float) and not isinstance(value, bool)
            else NA if value is None else str(value),
            str(row["unit"]),
            notes.cell(str(row["source"])),
        ))
    print_table(console, "Inputs", ("input", "value", "unit", "source"), inputs, align_numbers=False)
    for a in cost.assumptions:
        paragraph(console, notes.shorten(a), lead="assumption: ", indent=2)
    for w in cost.warnings:
        paragraph(console, notes.shorten(w), lead=Text("warning: ", style="yellow"), indent=2)
    if own_notes:
        notes.print(console)


def cost_cmd(
    run_id: Annotated[
        str,
        typer.Argument(help="Run id (or an unambiguous prefix), or a group of repeats (g-…, --repeat N)."),
    ],
    profile: ProfileOpt = None,
    stage: Annotated[
        str | None,
        typer.Option("--stage", help="A sweep's stage to price (e.g. c=16). Default: see --slo-attainment."),
    ] = None,
    slo_attainment: Annotated[
        float | None,
        typer.Option(
            "--slo-attainment",
            help="A sweep is priced at its highest-throughput stage where this share of requests met the "
            "run's SLOs (default 0.99); without SLOs, at its highest throughput.",
        ),
    ] = None,
    gpus: Annotated[
        int | None,
        typer.Option(
            "--gpus",
            min=1,
            max=100_000,
            help="How many GPUs served the run, for a run with no telemetry of its devices (a server "
            "benched from another machine); overrides the profile's gpu_count.",
        ),
    ] = None,
    gpu: Annotated[
        str | None,
        typer.Option(
            "--gpu",
            help="The GPU that served a run with no telemetry of its devices (catalog key or name): an "
            "ownership profile prices its catalog TDP (an estimate). Overrides the profile's gpu.",
        ),
    ] = None,
    save: Annotated[bool, typer.Option("--save/--no-save", help="Keep this evaluation in the store.")] = True,
    json_out: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """Cost of a run: hourly cost breakdown, cost per unit of work (1M tokens, 1,000 images, ...), J/unit."""
    from gpuledger.catalog import load_catalog

    catalog = load_catalog()
    store = _open(db)
    try:
        if any_group([run_id]):  # a group of repeats (bench --repeat N): its mean with a 95 % interval
            cost_group(store, run_id, lambda r: _cost(store, r, profile, catalog, stage, slo_attainment, gpus,
                                                      gpu), save=save, json_out=json_out)
            return
        run = store.get_run(run_id)
        cost = _cost(store, run, profile, catalog, stage, slo_attainment, gpus, gpu)
        result = cost.to_dict()
        if save:
            try:
                store.save_cost_evaluation(run.id, cost.profile.name, cost.profile.to_dict(), result)
            except StoreError as exc:
                warn(f"cost evaluation not saved: {exc.message}")
    finally:
        store.close()
    if json_out:
        print_json(result)
    else:
        render_cost(cost)


# ------------------------------------------------------------------------------------- compare
def parse_profile_args(values: Sequence[str], run_args: Sequence[str]) -> tuple[dict[str, str], str | None]:
    """``--profile RUN=P`` (per run, RUN as typed on the command line) and ``--profile P`` (every
    other run)."""
    per_run: dict[str, str] = {}
    default: str | None = None
    for value in values:
        left, sep, right = value.partition("=")
        if sep and left in run_args:
            if not right:
                raise UsageError(f"--profile {value!r}: no profile after '='")
            per_run[left] = right
        elif sep and left and not right:
            raise UsageError(f"--profile {value!r}: no profile after '='")
        elif sep and "/" not in left and not left.endswith((".yaml", ".yml")):
            raise UsageError(
                f"--profile {value!r}: {left!r} is not one of the runs given ({', '.join(run_args)})"
            )
        else:
            if default is not None:
                raise UsageError("--profile without RUN= given twice; use RUN=PROFILE for per-run profiles")
            default = value
    return per_run, default


def render_comparison(comp: Comparison) -> None:
    """The ratio first (with its decomposition), then each run's price, the hourly-cost difference,
    break-even values, sensitivity and the warnings."""
    from gpuledger.cost.model import money_prefix
    from gpuledger.report.headline import price_line, ratio_answer
    from gpuledger.report.layout import Notes, paragraph, print_table
    from gpuledger.report.terminal import print_answer

    notes = Notes()
    cur = comp.currency
    p = money_prefix(cur)
    answer = ratio_answer(comp)
    if answer is not None:
        print_answer(answer, console, notes)
        console.print()
    head = comp.costs[0].inputs.unit(comp.costs[0].headline)
    rows = []
    for c, row in zip(comp.costs, comp.to_dict()["runs"], strict=True):
        rows.append((
            row["run_id"],
            ", ".join(row["devices"]) or NA,
            row["profile"],
            _money(row[f"{p}_per_hour"], ""),
            price_line(c),
            _num(row.get(head.per_money_key(p)), ",.0f"),
            notes.cell(str(row["power_source"]), 30),
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
                f"{c.run.id} priced at stage {c.operating_point['stage']} of its sweep: "
                f"{c.operating_point['rule']}",
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
            f"= throughput {dec['throughput_ratio']:.3g}x  x  utilisation {dec['utilisation_ratio']:.3g}x"
            f"  x  hourly cost (B/A) {dec['hourly_cost_ratio']:.3g}x",
            lead="  ",
            indent=4,
        )
        carried = dec.get("share_of_log_ratio")
        if carried:
            paragraph(
                console,
                ", ".join(f"{k.replace('_', ' ')} {v:.0%}" for k, v in carried.items()),
                lead="  carried by: ",
                indent=4,
            )
        diff = dec["hourly"]["difference_as_share_of_a"]
        paragraph(
            console,
            ", ".join(f"{k} {v:+.0%}" for k, v in diff.items() if v) or "none",
            lead="  hourly cost difference (B - A, share of A's): ",
            indent=4,
        )
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


def compare_cmd(
    runs: Annotated[
        list[str],
        typer.Argument(
            help="Two or more run ids; the first is the reference. Or two groups of repeats (g-…, from bench "
            "--repeat N): the ratio of their means with its 95 % interval."
        ),
    ],
    profile: Annotated[
        list[str] | None,
        typer.Option(
            "--profile",
            "-p",
            help="RUN=PROFILE for one run, or PROFILE for every run without its own "
            "(preset name or YAML file). Default: each run's catalog preset.",
        ),
    ] = None,
    basis: Annotated[
        str | None,
        typer.Option(
            "--basis",
            help="The unit compared: default the first run's headline unit (output tokens for inference); "
            "output or total (input + output) tokens; or any unit both runs measured.",
        ),
    ] = None,
    json_out: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """Compare cost efficiency: the ratio, its decomposition, break-even values, sensitivity, warnings."""
    from gpuledger.catalog import load_catalog
    from gpuledger.cost import compare

    if len(runs) < 2:
        raise UsageError("compare needs at least two runs")
    per_run, default = parse_profile_args(profile or [], runs)
    catalog = load_catalog()
    store = _open(db)
    try:
        if any_group(runs):  # groups of repeats: the ratio of their means with its interval
            compare_group_args(
                store, runs, lambda arg, r: _cost(store, r, per_run.get(arg, default), catalog), basis,
                json_out=json_out,
            )
            return
        costs = []
        for arg in runs:
            run = store.get_run(arg)
            costs.append(_cost(store, run, per_run.get(arg, default), catalog))
    finally:
        store.close()
    comp = compare(costs, basis=basis)
    from gpuledger.cli.published_cmds import render_repricing, repricing_of, with_repricing

    repriced = repricing_of(comp, catalog)
    if json_out:
        print_json(with_repricing(comp.to_dict(), repriced))
    else:
        render_comparison(comp)
        render_repricing(repriced)


# ------------------------------------------------------------------------------------- estimate
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
    eff = est.efficiency
    if eff.get("mfu") is not None or eff.get("mbu") is not None:
        paragraph(
            console,
            f"measured efficiency carried over: MFU {_ratio_text(eff.get('mfu'))}, "
            f"MBU {_ratio_text(eff.get('mbu'))}",
            indent=2,
        )
    render_cost(est.cost, notes)
    for a in est.assumptions:
        paragraph(console, notes.shorten(a), lead="assumption: ", indent=2)
    notes.print(console)


def estimate_cmd(
    run_id: Annotated[str, typer.Argument(help="A run measured on a GPU the catalog knows.")],
    gpu: Annotated[
        str, typer.Option("--gpu", help="Target GPU: catalog key or name (see `gpuledger gpus`).")
    ],
    profile: ProfileOpt = None,
    prefill_share: Annotated[
        float | None,
        typer.Option(
            "--prefill-share",
            min=0.0,
            max=1.0,
            help="Share of the time spent in prefill (default: mean TTFT / mean E2E of the run).",
        ),
    ] = None,
    json_out: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """What-if: scale a measured run to another GPU (roofline) and price it. Always labelled an estimate."""
    from gpuledger.catalog import load_catalog
    from gpuledger.cost import estimate_run, load_profile

    catalog = load_catalog()
    target = catalog.resolve(gpu)
    store = _open(db)
    try:
        run = store.get_run(run_id)
        prof = load_profile(profile, catalog) if profile else None
        records = store.list_doctor_runs() if prof is not None and prof.from_doctor_history else None
    finally:
        store.close()
    est = estimate_run(
        run, target, prof, catalog=catalog, prefill_share=prefill_share, doctor_records=records
    )
    if json_out:
        print_json(est.to_dict())
    else:
        render_estimate(est)


# ------------------------------------------------------------------------------------- gpus, profiles
def _fig(spec: GpuSpec, name: str, fmt: str = ",.4g") -> str:
    f = spec.figure(name)
    if f.value is None:
        return NA
    return format(f.value, fmt) + ("?" if f.is_estimate else "")


def gpus_cmd(
    vendor: Annotated[str | None, typer.Option("--vendor", help="Only this vendor (nvidia, amd).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """The GPU catalog: memory, bandwidth, dense TFLOPS, TDP, ids, prices (each with source and date)."""
    from gpuledger.catalog import load_catalog

    catalog = load_catalog()
    known = sorted({s.vendor for s in catalog})
    if vendor is not None and vendor.lower() not in known:
        raise NotFoundError(
            f"--vendor {vendor}: the GPU catalog has no GPU of that vendor; vendors known: {', '.join(known)}"
        )
    specs = [s for s in catalog if vendor is None or s.vendor == vendor.lower()]
    if json_out:
        print_json(
            {
                "files": catalog.files,
                "sources": {k: v.model_dump() for k, v in catalog.sources.items()},
                "gpus": [s.to_dict() for s in specs],
            }
        )
        return
    from gpuledger.report.layout import paragraph, print_table

    print_table(
        console,
        "GPU catalog: memory GB, bandwidth TB/s, dense TFLOPS, TDP W, price USD, rental USD/GPU-h "
        "(? = estimate; --json: names, ids, every source and date)",
        ("key", "GB", "TB/s", "FP16", "FP8", "W", "USD", "USD/h"),
        [
            (
                s.key,
                _fig(s, "memory_gb"),
                _fig(s, "bandwidth_tb_s"),
                _fig(s, "fp16_tflops", ".4g"),
                _fig(s, "fp8_tflops", ".4g"),
                _fig(s, "tdp_w", ".4g"),
                _fig(s, "launch_price_usd", ".0f"),
                _fig(s, "rental_usd_per_gpu_hour", ".3g"),
            )
            for s in specs
        ],
        compact=True,
    )
    paragraph(console, ", ".join(catalog.files), lead="catalog files: ", indent=2)


def profiles_cmd(json_out: JsonOpt = False) -> None:
    """Built-in cost presets, each price with its source and date."""
    from gpuledger.cost import builtin_presets

    presets = builtin_presets()
    if json_out:
        print_json({"profiles": [p.to_dict() for p in presets.values()]})
        return
    from gpuledger.report.layout import print_table

    rows = []
    for p in presets.values():
        if p.mode == "rental":
            price = (
                f"{p.rental_per_gpu_hour:g} {p.currency}/GPU-h"
                if p.rental_per_gpu_hour is not None
                else f"{p.rental_per_hour:g} {p.currency}/h"
            )
            elec = pue = "incl."
        else:
            price = f"{p.gpu_price or p.host_price:,.0f} {p.currency}"
            elec = f"{p.electricity_per_kwh:g} {p.currency}/kWh"
            pue = f"{p.pue:g}"
        mode = "own" if p.mode == "ownership" else "rent"
        rows.append((p.name, mode, price, elec, pue, f"{p.amortisation_months:g}"))
    print_table(
        console,
        "Cost presets (--profile NAME; --json: descriptions, every source)",
        ("name", "mode", "price", "power price", "PUE", "months"),
        rows,
        compact=True,
    )


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    app.command("cost")(cost_cmd)
    app.command("compare")(compare_cmd)
    app.command("estimate")(estimate_cmd)
    app.command("gpus")(gpus_cmd)
    app.command("profiles")(profiles_cmd)
