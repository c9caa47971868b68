"""``gpuledger advise``: rank the catalog GPUs for your model, lengths and interactivity at your TCO, with the
seed essay's selection criteria as questions (docs/advise.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpuledger.cli.common import DbOpt, JsonOpt, console, print_json
from gpuledger.errors import InvalidInputError, UsageError

if TYPE_CHECKING:
    from gpuledger.catalog import Catalog
    from gpuledger.cost import CostProfile
    from gpuledger.cost.advise.advise import Advice


def _profiles(values: list[str], catalog: Catalog) -> dict[str, CostProfile]:
    """``--profile GPU=PROFILE`` (a preset name or a YAML file) for one catalog GPU."""
    from gpuledger.cost import load_profile

    out: dict[str, CostProfile] = {}
    for value in values:
        gpu, sep, name = value.partition("=")
        if not sep or not gpu.strip() or not name.strip():
            raise UsageError(f"--profile {value!r}: give GPU=PROFILE (a catalog GPU and a preset or file)")
        out[catalog.resolve(gpu.strip()).key] = load_profile(name.strip(), catalog)
    return out


def render_advice(advice: Advice) -> None:
    from gpuledger.report.layout import Notes, paragraph, print_table
    from gpuledger.report.sections.advise import (
        advice_answer,
        not_ranked_lines,
        ranking_table,
        short_why,
        unanswered_lines,
    )
    from gpuledger.report.terminal import print_answer

    notes = Notes()
    print_answer(advice_answer(advice), console, notes)
    table = ranking_table(advice)
    if table.rows:
        print_table(console, table.title, table.columns, table.rows, keys=2)
    for row in advice.ranked:
        notes.file(*(p.option.how for p in row.options), longer_than=40)
        if row.best is not None:
            notes.file(row.best.setup.source, longer_than=40)
        paragraph(console, notes.shorten(short_why(row)), lead=f"#{row.rank} {row.spec.key}: ", indent=4)
    for line in not_ranked_lines(advice):
        paragraph(console, notes.shorten(line), lead="not ranked: ", indent=4, style="dim")
    for e in advice.effects:
        paragraph(console, f"{e.question} {e.answer} — {e.text()}", lead="criterion: ", indent=4)
    for q in unanswered_lines(advice):
        paragraph(console, q, lead="unanswered: ", indent=4, style="dim")
    for a in advice.assumptions:
        paragraph(console, a, lead="assumption: ", indent=4)
    notes.print(console)


def advise_cmd(
    model: Annotated[str, typer.Option("--model", help="dummy:NAME, a known model, or a model folder.")] = "",
    model_config: Annotated[
        Path | None, typer.Option("--model-config", help="The model's config.json (or its folder).")
    ] = None,
    input_len: Annotated[int, typer.Option("--input-len", min=1, max=10_000_000, help="Prompt tokens.")] = 0,
    output_len: Annotated[
        int, typer.Option("--output-len", min=1, max=10_000_000, help="Output tokens per request.")
    ] = 0,
    interactivity: Annotated[
        float | None,
        typer.Option("--interactivity", min=0.001, max=1e6, help="Tokens/s each user must see at least."),
    ] = None,
    slo: Annotated[
        str | None, typer.Option("--slo", help="ttft_ms=…,tpot_ms=… (tpot_ms sets the interactivity).")
    ] = None,
    concurrency: Annotated[
        int | None, typer.Option("--concurrency", min=1, max=100_000, help="Sequences in flight, fixed.")
    ] = None,
    dtype: Annotated[
        str | None, typer.Option("--dtype", help="bf16, fp16, fp8, int4 (default: the config's, else bf16).")
    ] = None,
    gpus: Annotated[
        str | None, typer.Option("--gpus", help="Comma-separated catalog GPUs (default: data-centre GPUs).")
    ] = None,
    profile_tier: Annotated[
        str,
        typer.Option("--profile-tier", help="The one pricing basis of the ranking: own (the default: each "
                     "GPU's -own preset), rent (-rent presets), hyperscaler, neocloud, rental (InferenceX "
                     "tiers). A GPU without a preset of it is not ranked."),
    ] = "own",
    profile: Annotated[
        list[str] | None, typer.Option("--profile", help="GPU=PROFILE: your preset or YAML file for one GPU.")
    ] = None,
    setup_hours: Annotated[
        str | None,
        typer.Option("--setup-hours", help="nvidia=H,amd=H (default: the doctor ledger, else the essay's "
                     "example: 4 h CUDA, 80 h ROCm)."),
    ] = None,
    framework: Annotated[
        str | None,
        typer.Option("--framework", help="Criterion (§7.2): the serving stack you need: any, vllm, sglang, "
                     "pytorch, ollama, tensorrt-llm, cuda-kernels."),
    ] = None,
    team: Annotated[
        str | None,
        typer.Option("--team", help="Criterion (§7.1/§7.2): the stack your team knows: cuda, rocm, both, "
                     "none."),
    ] = None,
    time_to_production_days: Annotated[
        float | None,
        typer.Option("--time-to-production-days", help="Criterion (§7.2): working days you have."),
    ] = None,
    memory_gb: Annotated[
        float | None, typer.Option("--memory-gb", help="Criterion (§7.1): GPU memory a deployment needs.")
    ] = None,
    budget_per_hour: Annotated[
        float | None, typer.Option("--budget-per-hour", help="Criterion (§7.1): the most one hour may cost.")
    ] = None,
    answers: Annotated[
        Path | None, typer.Option("--answers", help="A YAML file answering the criteria (keys: the flags).")
    ] = None,
    html: Annotated[
        Path | None, typer.Option("--html", help="Also write the advice as an HTML report to FILE.")
    ] = None,
    json_out: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """Rank the catalog GPUs for your workload by cost per 1M output tokens at your TCO (setup labour
    included), with the seed essay's criteria as questions — every figure measured, published or estimate."""
    from gpuledger.bench.metrics import parse_slo
    from gpuledger.catalog import load_catalog
    from gpuledger.cli.estimate_cmd import parse_vendor_hours
    from gpuledger.cli.files import check_target, write_output
    from gpuledger.cost.advise.advise import Request, advise
    from gpuledger.cost.advise.advise_criteria import answers_from, read_answers
    from gpuledger.cost.estimate.estimate_model import efficiency_pool, shipped_points
    from gpuledger.cost.pricing.modelarch import resolve_model
    from gpuledger.store import open_store

    if not model and model_config is None:
        raise UsageError("advise needs --model NAME (or --model-config PATH)")
    if not input_len or not output_len:
        raise UsageError("advise needs --input-len and --output-len")
    limits = parse_slo(slo)
    if "e2e_ms" in limits:
        raise UsageError("--slo e2e_ms: the advisor ranks by ttft_ms and tpot_ms (give those)")
    if "tpot_ms" in limits:
        if interactivity is not None:
            raise UsageError("give --interactivity or --slo tpot_ms=…, not both (tpot_ms = 1000 ÷ tok/s)")
        interactivity = 1000.0 / limits["tpot_ms"]
    if html is not None:
        check_target(html)
    flags = {"framework": framework, "team": team, "time_to_production_days": time_to_production_days,
             "memory_gb": memory_gb, "budget_per_hour": budget_per_hour}
    try:
        given = answers_from({k: v for k, v in flags.items() if v is not None}, "flags")
    except InvalidInputError as exc:
        raise UsageError(exc.message.replace("flags: ", "--").replace("_", "-", 3)) from None
    answered = read_answers(answers).merged(given) if answers is not None else given
    catalog = load_catalog()
    arch = resolve_model(model, model_config)
    request = Request(
        arch=arch, input_len=input_len, output_len=output_len, interactivity=interactivity,
        ttft_ms=limits.get("ttft_ms"), concurrency=concurrency, dtype=dtype,
        gpus=tuple(g.strip() for g in (gpus or "").split(",") if g.strip()), tier=profile_tier,
        profiles=_profiles(profile or [], catalog), setup_hours=parse_vendor_hours(setup_hours),
        answers=answered,
    )
    store = open_store(db)
    try:
        stored = store.list_runs(limit=2_000)
        records = store.list_doctor_runs()
    finally:
        store.close()
    published = [*stored, *shipped_points(catalog)]
    advice = advise(request, efficiency_pool(published, catalog), published, catalog=catalog,
                    doctor_records=records)
    if html is not None:
        from gpuledger.report import render_html
        from gpuledger.report.sections.advise import advice_report

        write_output(html, render_html(advice_report(advice)))
    if json_out:
        doc = advice.document().model_copy(update={"html": str(html) if html is not None else None})
        print_json(doc.model_dump(mode="json"))
        return
    render_advice(advice)
    if html is not None:
        console.print(f"wrote {html} (self-contained)", markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    app.command("advise")(advise_cmd)
