"""``gpuledger cost``, ``compare``, ``gpus``, ``profiles`` (docs/cost.md; ``estimate``: estimate_cmd.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated

import typer

from gpuledger.cli.common import DbOpt, JsonOpt, console, print_json, warn
from gpuledger.cli.cost_render import render_comparison, render_cost
from gpuledger.cli.groups import any_group, cost_group
from gpuledger.errors import NotFoundError, StoreError, UsageError

if TYPE_CHECKING:
    from gpuledger.catalog import Catalog, GpuSpec
    from gpuledger.cost import RunCost
    from gpuledger.records import RunInfo
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


# ------------------------------------------------------------------------------------- shared plumbing
def _open(db: str | None) -> Store:
    from gpuledger.store import open_store

    return open_store(db)


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
    from gpuledger.cost.stored import price_run  # what gpuledger serve prices with too

    return price_run(store, run, profile_name, catalog, stage=stage, slo_attainment=slo_attainment, gpus=gpus,
                     gpu=gpu)


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
    # --train-tokens (cli/cost_train.py, docs/train.md): a whole training job on this stack
    train_tokens: Annotated[
        float | None,
        typer.Option("--train-tokens", help="A training run: hours and money to train this many tokens on "
                     "this stack, e.g. 2e9 (the profile's utilisation and labour)."),
    ] = None,
    json_out: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """Cost of a run: hourly cost breakdown, cost per unit of work (1M tokens, 1,000 images, ...), J/unit."""
    job = None
    if train_tokens is not None:
        from gpuledger.kinds.train.pricing import check_train_tokens

        check_train_tokens(train_tokens)
        if any_group([run_id]):
            raise UsageError("--train-tokens prices one training run, not a group of repeats")
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
        doc = cost.document()
        if train_tokens is not None:
            from gpuledger.kinds.train.pricing import job_cost

            job = job_cost(cost, train_tokens)
            doc = doc.with_extra(job)
        result = doc.model_dump(mode="json")
        if save:
            try:
                store.save_cost_evaluation(run.id, cost.profile.name, cost.profile.to_dict(), result)
            except StoreError as exc:
                warn(f"cost evaluation not saved: {exc.message}")
    finally:
        store.close()
    if json_out:
        print_json(result)
        return
    if job is not None:  # the job's answer first, then what a unit of the run's work costs
        from gpuledger.cli.cost_train import render_job

        render_job(job)
    render_cost(cost, doc=doc)


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
    """Compare cost efficiency: the ratio, its decomposition (the throughput ratio taken apart), what differs
    between the runs (like for like), break-even values, sensitivity, warnings."""
    from gpuledger.catalog import load_catalog
    from gpuledger.cost.stored import compare_stored  # gpuledger serve's /api/compare answers the same

    if len(runs) < 2:
        raise UsageError("compare needs at least two runs")
    per_run, default = parse_profile_args(profile or [], runs)
    catalog = load_catalog()
    with _open(db) as store:
        # Runs, or groups of repeats (the ratio of their means with its interval).
        # (and for a pair that is not like for like, the closest like-for-like pair of the newest runs)
        result = compare_stored(store, runs, lambda arg: per_run.get(arg, default), catalog, basis)
    if json_out:
        print_json(result.to_dict())
    elif result.groups is not None:
        from gpuledger.report.groups import print_group_comparison

        print_group_comparison(result.groups, console)
    elif result.comparison is not None:
        from gpuledger.cli.published_cmds import render_repricing

        render_comparison(result.comparison)
        render_repricing(list(result.repricing))


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
    """The GPU catalog: memory, bandwidth, dense TFLOPS, TDP, ids, prices, architecture and launch year (each
    with source and date)."""
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
    print_table(
        console,
        "Hardware generation: architecture and the year its vendor began shipping the part (what compare's "
        "like-for-like check names; ? = estimate)",
        ("key", "vendor", "architecture", "launch year"),
        [(s.key, s.vendor, s.fact("architecture").text(), s.fact("launch_year").text()) for s in specs],
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
    app.command("gpus")(gpus_cmd)
    app.command("profiles")(profiles_cmd)
