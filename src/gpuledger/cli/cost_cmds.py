"""``gpuledger cost``, ``compare``, ``estimate``, ``gpus``, ``profiles`` (docs/cost.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from gpuledger.cli.common import DbOpt, JsonOpt, console, print_json, warn
from gpuledger.errors import StoreError, UsageError

if TYPE_CHECKING:
    from gpuledger.catalog import Catalog, GpuSpec
    from gpuledger.cost import Comparison, CostProfile, Estimate, RunCost
    from gpuledger.records import DoctorRunRecord, RunInfo
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


def render_operating_point(cost: RunCost) -> None:
    """Which stage of a sweep was priced, why, and what each stage would cost."""
    op = cost.operating_point
    if not op:
        return
    cur = cost.currency
    p = cur.lower()
    console.print(f"[bold]priced at stage {op['stage']}[/bold] of the sweep: {op['rule']}")
    t = Table(title=f"Every stage under the same hourly cost ({cur})", title_justify="left")
    for col in ("stage", "output tok/s", "SLOs met", f"{cur}/1M output tok"):
        t.add_column(col, justify="left" if col == "stage" else "right")
    for row in op["stages"]:
        mark = " ◀" if row["stage"] == op["stage"] else ""
        t.add_row(
            row["stage"] + mark,
            _num(row.get("output_tokens_per_s")),
            _pct(row.get("slo_met_ratio")),
            _money(row.get(f"{p}_per_1m_output_tokens"), ""),
        )
    console.print(t)


# ------------------------------------------------------------------------------------- cost
def render_cost(cost: RunCost) -> None:
    d = cost.to_dict()
    cur = cost.currency
    p = cur.lower()
    run = cost.run
    console.print(
        f"[bold]Run {run.id}[/bold]  {run.label or ''}  model {run.model or NA}, engine {run.engine or NA}"
    )
    console.print(
        f"profile [bold]{cost.profile.name}[/bold] ({cost.profile.mode}, {cur})  {cost.profile.description}"
    )
    hourly = cost.evaluation.hourly
    t = Table(title=f"Hourly cost ({cur} per wall-clock hour)", title_justify="left")
    t.add_column("component")
    t.add_column(f"{cur}/h", justify="right")
    t.add_column("share", justify="right")
    shares = hourly.shares()
    labels = {
        "capex": "hardware amortisation",
        "rental": "rental",
        "energy": "energy (W x PUE x price)",
        "labour": "labour (setup + maintenance)",
        "other": "other opex (hosting, software)",
    }
    for key, value in hourly.components().items():
        if value or key == "labour" or (key == "energy" and hourly.mode == "ownership"):
            t.add_row(labels[key], _money(value, ""), _pct(shares[key]))
    t.add_row("[bold]total[/bold]", f"[bold]{_money(hourly.total, '')}[/bold]", "100%")
    console.print(t)
    power = d["power"]
    console.print(
        f"power: {power['serving_w']:.1f} W serving, {power['average_w']:.1f} W average at "
        f"utilisation {_pct(cost.inputs.utilisation)} — {power['power_source']}"
    )
    render_operating_point(cost)
    thr = d["throughput"]
    console.print(
        f"throughput ({thr['source']}): {_num(thr['output_tokens_per_s'])} output tok/s, "
        f"{_num(thr['input_tokens_per_s'])} input tok/s, {_num(thr['requests_per_s'])} req/s"
    )
    r = Table(title="Cost per unit of work", title_justify="left")
    r.add_column("metric")
    r.add_column("value", justify="right")
    r.add_row(
        f"{cur} per 1M output tokens (all cost on output tokens)", _money(d[f"{p}_per_1m_output_tokens"], cur)
    )
    r.add_row(f"{cur} per 1M tokens (input + output)", _money(d[f"{p}_per_1m_tokens"], cur))
    split = d["split"]
    if split.get("rule"):
        r.add_row(
            f"  priced separately: {cur} per 1M input tokens", _money(split[f"{p}_per_1m_input_tokens"], cur)
        )
        r.add_row(
            f"  priced separately: {cur} per 1M output tokens",
            _money(split[f"{p}_per_1m_output_tokens"], cur),
        )
    r.add_row(f"output tokens per {cur}", _num(d[f"output_tokens_per_{p}"], ",.0f"))
    r.add_row(f"{cur} per request", _money(d[f"{p}_per_request"], cur))
    if d[f"{p}_per_good_request"] is not None:
        r.add_row(f"{cur} per request meeting the SLOs", _money(d[f"{p}_per_good_request"], cur))
        r.add_row(f"{cur} per 1M output tokens at SLO", _money(d[f"{p}_per_1m_output_tokens_at_slo"], cur))
    energy = d["energy"]
    r.add_row("J per token (input + output)", _num(energy.get("joules_per_token")))
    r.add_row("J per output token", _num(energy.get("joules_per_output_token")))
    console.print(r)
    if split.get("rule"):
        console.print(f"split rule: {split['rule']}")
    console.print(f"energy: {energy.get('method') or energy.get('reason')}")
    i = Table(title="Inputs", title_justify="left")
    for col in ("input", "value", "unit", "source"):
        i.add_column(col, overflow="fold")
    for name, row in d["inputs"].items():
        value = row["value"]
        i.add_row(
            name,
            _num(value) if isinstance(value, int | float) and not isinstance(value, bool) else str(value),
            row["unit"],
            row["source"],
        )
    console.print(i)
    for a in cost.assumptions:
        console.print(f"[dim]assumption:[/dim] {a}")
    for w in cost.warnings:
        console.print(f"[yellow]warning:[/yellow] {w}")


def cost_cmd(
    run_id: Annotated[str, typer.Argument(help="Run id (or an unambiguous prefix).")],
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
    cur = comp.currency
    p = cur.lower()
    t = Table(title=f"Runs ({cur})", title_justify="left")
    for col in (
        "run",
        "devices",
        "profile",
        f"{cur}/h",
        f"{cur}/1M output tok",
        f"output tok/{cur}",
        "power",
    ):
        t.add_column(col, overflow="fold")
    for row in comp.to_dict()["runs"]:
        t.add_row(
            row["run_id"],
            ", ".join(row["devices"]) or NA,
            row["profile"],
            _money(row[f"{p}_per_hour"], ""),
            _money(row[f"{p}_per_1m_output_tokens"], ""),
            _num(row[f"output_tokens_per_{p}"], ",.0f"),
            row["power_source"],
        )
    console.print(t)
    for c in comp.costs:
        if c.operating_point:
            console.print(f"{c.run.id} priced at stage {c.operating_point['stage']} of its sweep: "
                          f"{c.operating_point['rule']}")
    for pair in comp.pairs:
        dec = pair.decomposition
        console.print(
            f"\n[bold]{pair.a.run.id} vs {pair.b.run.id}: ratio {pair.ratio:.3g}x[/bold] "
            f"({pair.basis} tokens per {cur}; {pair.a.run.id} / {pair.b.run.id})"
        )
        console.print(
            f"  = throughput {dec['throughput_ratio']:.3g}x  x  utilisation {dec['utilisation_ratio']:.3g}x"
            f"  x  hourly cost (B/A) {dec['hourly_cost_ratio']:.3g}x"
        )
        carried = dec.get("share_of_log_ratio")
        if carried:
            console.print("  carried by: " + ", ".join(f"{k} {v:.0%}" for k, v in carried.items()))
        diff = dec["hourly"]["difference_as_share_of_a"]
        console.print(
            "  hourly cost difference (B - A, share of A's): "
            + ", ".join(f"{k} {v:+.0%}" for k, v in diff.items() if v)
        )
        b = Table(
            title="Break-even (B's value at which A and B cost the same per token)", title_justify="left"
        )
        for col in ("input of B", "now", "break-even", "unit", "check"):
            b.add_column(col, overflow="fold")
        for be in pair.break_even:
            b.add_row(
                be.input,
                _num(be.current),
                _num(be.value) if be.value is not None else (be.reason or NA),
                be.unit,
                "" if be.verified_ratio is None else f"ratio {be.verified_ratio:.6f}",
            )
        console.print(b)
        s = Table(title="Sensitivity: each input -20 % / +20 % -> ratio", title_justify="left")
        for col in ("input", "run", "value", "-20 %", "+20 %", "note"):
            s.add_column(col, overflow="fold")
        for row in pair.sensitivity[:12]:
            s.add_row(
                row.input,
                f"{row.run} {row.run_id}",
                _num(row.value),
                f"{row.ratio_at_minus_20pct:.3g}x",
                f"{row.ratio_at_plus_20pct:.3g}x",
                row.note or "",
            )
        console.print(s)
        for w in pair.warnings:
            console.print(f"[yellow]warning:[/yellow] {w}")


def compare_cmd(
    runs: Annotated[list[str], typer.Argument(help="Two or more run ids; the first is the reference.")],
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
def render_estimate(est: Estimate) -> None:
    console.print(
        f"[bold yellow]ESTIMATE[/bold yellow] (roofline model, not a measurement): run {est.run.id} "
        f"measured on {est.source.name} -> {est.target.name}"
    )
    sc = est.scale
    console.print(
        f"throughput x{sc.speedup:.3g} (bandwidth x{sc.bandwidth_ratio:.3g}, compute "
        f"x{sc.compute_ratio:.3g}, prefill share {sc.prefill_share:.0%})"
    )
    eff = est.efficiency
    if eff.get("mfu") is not None or eff.get("mbu") is not None:
        console.print(
            f"measured efficiency carried over: MFU {_pct(eff.get('mfu'))}, MBU {_pct(eff.get('mbu'))}"
        )
    render_cost(est.cost)
    for a in est.assumptions:
        console.print(f"[dim]assumption:[/dim] {a}")


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
    t = Table(
        title="GPU catalog: memory GB, bandwidth TB/s, dense TFLOPS, TDP W, price USD, rental USD/GPU-h "
        "(? = estimate; --json: names, ids, every source and date)",
        title_justify="left",
    )
    t.add_column("key", no_wrap=True)
    for col in ("GB", "TB/s", "FP16", "FP8", "W", "USD", "USD/h"):
        t.add_column(col, justify="right", no_wrap=True)
    for s in specs:
        t.add_row(
            s.key,
            _fig(s, "memory_gb"),
            _fig(s, "bandwidth_tb_s"),
            _fig(s, "fp16_tflops", ".4g"),
            _fig(s, "fp8_tflops", ".4g"),
            _fig(s, "tdp_w", ".4g"),
            _fig(s, "launch_price_usd", ".0f"),
            _fig(s, "rental_usd_per_gpu_hour", ".3g"),
        )
    console.print(t)
    console.print(f"catalog files: {', '.join(catalog.files)}")


def profiles_cmd(json_out: JsonOpt = False) -> None:
    """Built-in cost presets, each price with its source and date."""
    from gpuledger.cost import builtin_presets

    presets = builtin_presets()
    if json_out:
        print_json({"profiles": [p.to_dict() for p in presets.values()]})
        return
    t = Table(title="Cost presets (--profile NAME; --json: descriptions, every source)", title_justify="left")
    t.add_column("name", no_wrap=True)
    for col in ("mode", "price", "power price", "PUE", "months"):
        t.add_column(col, no_wrap=True)
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
            elec = f"{p.electricity_per_kwh:g}/kWh"
            pue = f"{p.pue:g}"
        t.add_row(
            p.name,
            "own" if p.mode == "ownership" else "rent",
            price,
            elec,
            pue,
            f"{p.amortisation_months:g}",
        )
    console.print(t)


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    app.command("cost")(cost_cmd)
    app.command("compare")(compare_cmd)
    app.command("estimate")(estimate_cmd)
    app.command("gpus")(gpus_cmd)
    app.command("profiles")(profiles_cmd)
