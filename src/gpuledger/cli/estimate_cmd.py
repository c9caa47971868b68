"""``gpuledger estimate``: a workload on a GPU you don't own — from a run measured on a GPU (scaled by the
roofline), from a CPU run, or from no run at all (the model's config and the GPU's spec). Always labelled an
ESTIMATE (docs/cost.md "Estimate", docs/advise.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from gpuledger.cli.common import DbOpt, JsonOpt, console, print_json
from gpuledger.cli.cost_cmds import ProfileOpt
from gpuledger.cli.cost_render import render_estimate
from gpuledger.errors import UsageError

if TYPE_CHECKING:
    from gpuledger.catalog import GpuSpec
    from gpuledger.cost import CostProfile
    from gpuledger.cost.estimate.estimate_model import EfficiencyPool, ModelEstimate
    from gpuledger.records import DoctorRunRecord, RunInfo


def model_answer(est: ModelEstimate) -> tuple[str, str, list[tuple[str, str]], list[str]]:
    """(title, headline, facts, why) of a no-run estimate: the price first, every figure with its origin."""
    from gpuledger.report import fmt

    p = est.point
    cur = est.cost.profile.currency
    title = f"ESTIMATE: {est.arch.name} on {p.devices} x {est.target.name} ({est.basis})"
    headline = f"{fmt.num(est.cost.per_1m_output, 3)} {cur} per 1M output tokens (estimate)"
    w = p.workload
    # A decode step at the per-step overhead floor: the rates are at most these, TPOT at least.
    bound = ", an upper bound: decode at the per-step floor" if p.at_floor else ""
    upper = ", an upper bound" if p.at_floor else ""
    floor = ", the per-step floor: a lower bound" if p.at_floor else ""
    facts = [
        ("workload", f"{w.input_len} in / {w.output_len} out tokens, {w.concurrency} in flight "
                     f"({est.workload_source})"),
        ("output tok/s", f"{fmt.num(p.output_tokens_per_s)} tok/s, all devices (estimate{bound})"),
        ("tok/s per user", f"{fmt.num(p.tokens_per_s_per_user)} (estimate{upper}; TPOT {fmt.num(p.tpot_ms)} "
                           f"ms{floor})"),
        ("TTFT", f"{fmt.num(p.ttft_ms)} ms (estimate, no queueing)"),
        ("E2E", f"{fmt.num(p.e2e_ms)} ms (estimate: TTFT + TPOT x {w.output_len - 1} tokens)"),
        ("memory", ("fits" if p.memory.fits else "DOES NOT FIT") + f" — {p.memory.reason}"),
        ("efficiency", f"{p.efficiency.text()} — MBU: {p.efficiency.label}"),
        ("setup labour", f"{fmt.num(est.setup.hours)} h ({est.setup.origin}) — {est.setup.source}"),
        ("profile", f"{est.cost.profile.name or '(unnamed)'} ({est.cost.profile.mode}, {cur})"),
    ]
    why = [f"decode step {fmt.num(p.step_s * 1000)} ms, bound by {p.step_bound}"
           + (f" (the bandwidth bound is {fmt.num(p.memory_bound_s * 1000)} ms)" if p.at_floor else ""),
           f"model config: {est.arch.source}"]
    return title, headline, facts, why


def render_model_estimate(est: ModelEstimate) -> None:
    from gpuledger.report.layout import Notes, paragraph
    from gpuledger.report.model import Answer
    from gpuledger.report.terminal import print_answer

    notes = Notes()
    title, headline, facts, why = model_answer(est)
    print_answer(Answer(title=title, headline=headline, subline=est.cost.profile.description[:120],
                        facts=tuple(facts), why=tuple(why)), console, notes)
    for a in est.assumptions:
        paragraph(console, notes.shorten(a), lead="assumption: ", indent=2)
    for warning in est.warnings:
        paragraph(console, notes.shorten(warning), lead=Text("warning: ", style="yellow"), indent=2)
    notes.print(console)


def estimate_cmd(
    run_id: Annotated[
        str | None,
        typer.Argument(help="A stored run: measured on a GPU (scaled to --gpu), or a CPU run (its model and "
                       "workload carried to --gpu). Omit it to estimate from --model alone."),
    ] = None,
    gpu: Annotated[
        str, typer.Option("--gpu", help="Target GPU: catalog key or name (see `gpuledger gpus`).")
    ] = "",
    profile: ProfileOpt = None,
    prefill_share: Annotated[
        float | None,
        typer.Option(
            "--prefill-share",
            min=0.0,
            max=1.0,
            help="(a GPU run) Share of the time spent in prefill (default: mean TTFT / mean E2E of the run).",
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option("--model", help="(no run / a CPU run) dummy:NAME, a known model or a model folder."),
    ] = None,
    model_config: Annotated[
        Path | None,
        typer.Option("--model-config", help="(no run / a CPU run) The model's config.json (or its folder)."),
    ] = None,
    input_len: Annotated[
        int | None, typer.Option("--input-len", min=1, help="Prompt tokens per request.")
    ] = None,
    output_len: Annotated[
        int | None, typer.Option("--output-len", min=1, help="Output tokens per request.")
    ] = None,
    concurrency: Annotated[
        int | None, typer.Option("--concurrency", min=1, max=100_000, help="Requests in flight (default 1).")
    ] = None,
    dtype: Annotated[
        str | None, typer.Option("--dtype", help="(no run / a CPU run) bf16 (default), fp16, fp32, fp8, int4")
    ] = None,
    gpus: Annotated[
        int, typer.Option("--gpus", min=1, max=64, help="(no run / a CPU run) Devices serving one replica.")
    ] = 1,
    setup_hours: Annotated[
        str | None,
        typer.Option("--setup-hours", help="Setup labour per vendor, e.g. nvidia=4,amd=80 (default: the "
                     "doctor ledger, else the seed essay's example)."),
    ] = None,
    json_out: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """What-if on another GPU, always labelled an estimate: scale a GPU run by the roofline, or put the
    model's roofline (from a CPU run or from no run) on the GPU at an efficiency with its origin."""
    from gpuledger.catalog import load_catalog
    from gpuledger.cost import estimate_run, load_profile
    from gpuledger.cost.pricing.runview import gpu_devices
    from gpuledger.store import open_store

    if not gpu:
        raise UsageError("estimate needs --gpu NAME (see `gpuledger gpus`)")
    catalog = load_catalog()
    target = catalog.resolve(gpu)
    prof = load_profile(profile, catalog) if profile else None
    store = open_store(db)
    try:
        run = store.get_run(run_id) if run_id else None
        used = gpu_devices(run)[0] if run is not None else []
        origin = run.summary.origin() if run is not None and run.summary is not None else None
        if run is not None and (used or (origin is not None and origin.gpu)):
            no_run_flags = {"--model": model, "--model-config": model_config, "--input-len": input_len,
                            "--output-len": output_len, "--concurrency": concurrency, "--dtype": dtype}
            given = [k for k, v in no_run_flags.items() if v is not None]
            if given:
                raise UsageError(f"{', '.join(given)}: for an estimate from no run or a CPU run; run "
                                 f"{run.id} ran on a GPU and is scaled as measured")
            records = store.list_doctor_runs() if prof is not None and prof.from_doctor_history else None
            est = estimate_run(run, target, prof, catalog=catalog, prefill_share=prefill_share,
                               doctor_records=records)
            if json_out:
                print_json(est.document().model_dump(mode="json"))
            else:
                render_estimate(est)
            return
        from gpuledger.cost.estimate.estimate_model import efficiency_pool, shipped_points

        pool_runs = [r for r in store.list_runs(limit=2_000) if run is None or r.id != run.id]
        pool = efficiency_pool([*pool_runs, *shipped_points(catalog)], catalog)
        records = store.list_doctor_runs()
    finally:
        store.close()
    model_est = _model_estimate(run, target, prof, pool, records, model, model_config, input_len, output_len,
                                concurrency, dtype, gpus, setup_hours)
    if json_out:
        print_json(model_est.document().model_dump(mode="json"))
    else:
        render_model_estimate(model_est)


def parse_vendor_hours(text: str | None) -> dict[str, float] | None:
    """``nvidia=4,amd=80`` -> ``{"nvidia": 4.0, "amd": 80.0}``."""
    if text is None:
        return None
    out: dict[str, float] = {}
    for part in text.split(","):
        vendor, sep, value = part.partition("=")
        vendor = vendor.strip().lower()
        if not sep or vendor not in ("nvidia", "amd"):
            raise UsageError(f"--setup-hours {text!r}: give VENDOR=HOURS pairs, vendor nvidia or amd")
        try:
            hours = float(value)
        except ValueError:
            raise UsageError(f"--setup-hours {text!r}: {value!r} is not a number of hours") from None
        if not 0 <= hours <= 100_000:
            raise UsageError(f"--setup-hours {text!r}: hours must be between 0 and 100,000")
        out[vendor] = hours
    return out


def _model_estimate(
    run: RunInfo | None,
    target: GpuSpec,
    prof: CostProfile | None,
    pool: EfficiencyPool,
    records: list[DoctorRunRecord],
    model: str | None,
    model_config: Path | None,
    input_len: int | None,
    output_len: int | None,
    concurrency: int | None,
    dtype: str | None,
    gpus: int,
    setup_hours: str | None,
) -> ModelEstimate:
    from gpuledger.cost.estimate.estimate_model import estimate_cpu_run, estimate_model
    from gpuledger.cost.estimate.roofline_estimate import Workload
    from gpuledger.cost.pricing.modelarch import resolve_model

    arch = resolve_model(model or "", model_config) if (model or model_config) else None
    hours = parse_vendor_hours(setup_hours)
    kwargs: dict[str, Any] = {"devices": gpus, "dtype": dtype, "profile": prof, "pool": pool,
                              "setup_hours": hours, "doctor_records": records}
    if run is not None:
        workload = None
        if input_len is not None or output_len is not None or concurrency is not None:
            from gpuledger.cost.estimate.estimate_model import workload_of_run

            base, _ = workload_of_run(run)
            workload = Workload(input_len or base.input_len, output_len or base.output_len,
                                concurrency or base.concurrency)
        return estimate_cpu_run(run, target, arch=arch, workload=workload, **kwargs)
    if arch is None:
        raise UsageError("estimate without a run needs --model NAME (or --model-config PATH)")
    if input_len is None or output_len is None:
        raise UsageError("estimate without a run needs --input-len and --output-len")
    workload = Workload(input_len, output_len, concurrency or 1)
    source = "given" if concurrency is not None else "given (concurrency 1: --concurrency not given)"
    return estimate_model(arch, target, workload, workload_source=source, **kwargs)


def register(app: typer.Typer) -> None:
    app.command("estimate")(estimate_cmd)
