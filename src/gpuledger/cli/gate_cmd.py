"""``gpuledger gate BASELINE CANDIDATE`` and ``gpuledger gate BASELINE --run``: an upgrade judged like a test
(docs/gate.md). Exit 0 pass (or not distinguishable), 1 a regression or runs not like for like, 2 usage, 3 a
run, group or profile not found, 4 invalid input, 5 store, 6 the server of ``--run``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpuledger.cli.common import (
    DbOpt,
    JsonOpt,
    console,
    environment_fingerprint,
    err_console,
    print_json,
    warn,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from gpuledger.catalog import Catalog
    from gpuledger.cost import CostProfile, RunCost
    from gpuledger.gate import Side
    from gpuledger.records import RunInfo
    from gpuledger.store import Store

# What only --run takes.
_RUN_FLAGS = ("repeats", "base_url", "model", "engine", "label")


def _price(store: Store, profile: CostProfile | None, catalog: Catalog) -> Callable[[RunInfo], RunCost]:
    """Each run priced under ``profile`` (``cost``'s rules), or under its own default profile when none is
    given — then only its measured energy is read (the gate judges no price without ``--profile``)."""
    from gpuledger.cost import cost_of_run, default_profile_for

    doctor = store.list_doctor_runs() if profile is not None and profile.from_doctor_history else None

    def price(run: RunInfo) -> RunCost:
        prof = profile if profile is not None else default_profile_for(run, catalog)
        return cost_of_run(run, prof, catalog=catalog, doctor_records=doctor)

    return price


def _finished(info: RunInfo) -> None:
    """A run of ``--run`` that did not end as planned is the command's error, as ``bench`` says it."""
    from gpuledger.errors import EngineError, Interrupted

    summary = info.summary
    if summary is not None and summary.aborted:
        raise EngineError(f"run {info.id} stopped and was kept as incomplete: {summary.aborted}")
    if summary is not None and summary.interrupted:
        raise Interrupted(
            f"{summary.interrupted.signal}: run {info.id} saved as {info.status}; nothing gated"
        )
    if info.status == "failed":
        first = summary.error_examples[0].error if summary is not None and summary.error_examples else None
        raise EngineError(
            f"run {info.id}: every request failed; the first: {first}",
            hint="check --base-url, --model and the server's log",
        )


def _new_side(ref: str, runs: Sequence[RunInfo], store: Store, price: Callable[[RunInfo], RunCost]) -> Side:
    """The runs just made as a side: their group when several (``--repeat N``), else the run."""
    from gpuledger.cost.comparison.groups import RunSet, repeat_of
    from gpuledger.gate import Side

    rep = repeat_of(runs[0])
    grouped = rep is not None and len(runs) > 1
    name = rep[0] if rep is not None and grouped else runs[0].id
    return Side(ref, RunSet(name, list(runs), name if grouped else None), store.get_requests, price)


def _rerun(
    store: Store,
    baseline: Side,
    *,
    n: int | None,
    base_url: str | None,
    model: str | None,
    engine: str | None,
    label: str | None,
    progress: bool,
) -> list[RunInfo]:
    """The baseline's workload run again here, ``n`` times (default: as many runs as the baseline has)."""
    import asyncio
    from dataclasses import replace

    from gpuledger.bench.runner import Hooks, run_bench_async
    from gpuledger.cli.groups import run_repeats
    from gpuledger.gate import rerun_spec

    first = baseline.runs.runs[0]
    spec = rerun_spec(
        first, base_url=base_url, model=model, engine=engine, label=first.label if label is None else label
    )
    count = n if n is not None else len(baseline.runs.runs)

    def created(run_id: str) -> None:
        if progress:
            err_console.print(
                f"gate --run: measuring run {run_id} (the workload of {baseline.runs.name})…",
                markup=False,
                highlight=False,
            )

    hooks = Hooks(
        on_run_created=created, on_warning=warn, environment=environment_fingerprint, console=err_console
    )

    def one(extra: dict[str, object] | None = None) -> RunInfo:
        info = asyncio.run(
            run_bench_async(
                spec, store, progress=progress, hooks=replace(hooks, workload=extra) if extra else hooks
            )
        )
        _finished(info)
        return info

    if count == 1:
        return [one()]
    _, runs = run_repeats(count, lambda extra: one(dict(extra)))
    return runs


def gate_cmd(
    baseline: Annotated[
        str,
        typer.Argument(
            metavar="BASELINE",
            help="The run before the change: a run id (or prefix) or a group of "
            "repeats (g-…, bench --repeat N).",
        ),
    ],
    candidate: Annotated[
        str | None,
        typer.Argument(metavar="CANDIDATE", help="The run after it, as BASELINE. Leave it out with --run."),
    ] = None,
    max_regression: Annotated[
        list[str] | None,
        typer.Option(
            "--max-regression",
            metavar="METRIC=PCT",
            help="How much worse METRIC may get, in percent of the baseline (error_rate: percentage "
            "points), 0 < PCT ≤ 1000; repeatable. Metrics: throughput, cost, energy, error_rate, "
            "ttft_p50 … e2e_p99 (p50, p90, p95, p99), step_time_pNN, image_s_pNN. Defaults: "
            "docs/gate.md.",
        ),
    ] = None,
    profile: Annotated[
        str | None,
        typer.Option(
            "--profile",
            "-p",
            help="Cost profile (preset name or YAML file) both sides are priced "
            "under: judges the cost per unit. Without it, no price is judged.",
        ),
    ] = None,
    allow_different: Annotated[
        bool,
        typer.Option(
            "--allow-different",
            help="Judge runs that are not like for like (other workload or "
            "settings) instead of failing: the differences are still listed.",
        ),
    ] = False,
    junit: Annotated[
        Path | None,
        typer.Option(
            "--junit",
            metavar="FILE",
            help="Write JUnit XML: one testcase per metric, a failure for each regression.",
        ),
    ] = None,
    md: Annotated[
        Path | None,
        typer.Option(
            "--md", metavar="FILE", help="Write the verdict as Markdown (e.g. $GITHUB_STEP_SUMMARY)."
        ),
    ] = None,
    run: Annotated[
        bool,
        typer.Option(
            "--run",
            help="Run the baseline's exact workload again on this machine (as bench --like), "
            "then gate the new run(s) against it.",
        ),
    ] = False,
    repeats: Annotated[
        int | None,
        typer.Option(
            "--repeat",
            min=1,
            max=1000,
            help="With --run: how many runs (one group); default as many as the baseline has.",
        ),
    ] = None,
    base_url: Annotated[
        str | None,
        typer.Option("--base-url", help="With --run: the server to measure (default: the baseline's URL)."),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option("--model", help="With --run: the model to ask for (default: the baseline's)."),
    ] = None,
    engine: Annotated[
        str | None,
        typer.Option("--engine", help="With --run: the engine (default: the baseline's)."),
    ] = None,
    label: Annotated[
        str | None, typer.Option("--label", help="With --run: the new runs' label (default: the baseline's).")
    ] = None,
    progress: Annotated[
        bool | None,
        typer.Option(
            "--progress/--no-progress",
            help="With --run: progress on stderr (default: when stderr is a terminal).",
        ),
    ] = None,
    json_out: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """Judge a candidate run or group against a baseline like a test: PASS, FAIL or NOT DISTINGUISHABLE per
    metric, what changed in the stack, exit 1 on a regression."""
    from gpuledger.catalog import load_catalog
    from gpuledger.cli.files import check_target, write_output
    from gpuledger.cost import load_profile
    from gpuledger.errors import UsageError
    from gpuledger.gate import judge, parse_thresholds, side, sides
    from gpuledger.gate.render import render_junit, render_markdown, render_terminal
    from gpuledger.store import open_store

    thresholds = parse_thresholds(max_regression or [])
    if "cost" in thresholds and profile is None:
        raise UsageError("--max-regression cost=… needs --profile NAME: the cost per unit is judged under "
                         "one profile for both sides")
    if run and candidate is not None:
        raise UsageError("--run makes the candidate: give BASELINE only")
    if not run and candidate is None:
        raise UsageError("gpuledger gate needs BASELINE CANDIDATE, or BASELINE --run")
    given = {
        "repeats": repeats is not None,
        "base_url": base_url is not None,
        "model": model is not None,
        "engine": engine is not None,
        "label": label is not None,
    }
    if not run and any(given.values()):
        flag = next(k for k in _RUN_FLAGS if given[k])
        raise UsageError(f"--{'repeat' if flag == 'repeats' else flag.replace('_', '-')} is for --run only")
    for target in (junit, md):
        if target is not None:
            check_target(target)  # refused before anything is measured
    catalog = load_catalog()
    prof = load_profile(profile, catalog) if profile else None
    store = open_store(db)
    try:
        price = _price(store, prof, catalog)
        if run:
            base = side(store, baseline, price)
            show = progress if progress is not None else err_console.is_terminal
            runs = _rerun(
                store,
                base,
                n=repeats,
                base_url=base_url,
                model=model,
                engine=engine,
                label=label,
                progress=show,
            )
            cand = _new_side("--run", runs, store, price)
        else:
            assert candidate is not None
            base, cand = sides(store, baseline, candidate, price)
        verdict = judge(
            base,
            cand,
            thresholds,
            profile=prof.name if prof is not None else None,
            allow_different=allow_different,
        )
    finally:
        store.close()
    if junit is not None:
        write_output(junit, render_junit(verdict))
        err_console.print(f"wrote {junit}", markup=False, highlight=False)
    if md is not None:
        write_output(md, render_markdown(verdict))
        err_console.print(f"wrote {md}", markup=False, highlight=False)
    if json_out:
        print_json(verdict.model_dump(mode="json"))
    else:
        render_terminal(verdict, console)
    if verdict.exit_code:
        raise typer.Exit(verdict.exit_code)


def gate_after_bench(store: Store, baseline: str, runs: Sequence[RunInfo], *, json_out: bool) -> None:
    """``bench --like BASELINE --gate``: the runs just made (a group when several) judged against BASELINE
    with the default thresholds (``gpuledger gate`` takes the others); the verdict printed — with ``--json``
    as bench's only document —, exit 1 on a regression."""
    from gpuledger.catalog import load_catalog
    from gpuledger.gate import judge, side
    from gpuledger.gate.render import render_terminal

    price = _price(store, None, load_catalog())
    verdict = judge(side(store, baseline, price), _new_side("--gate", runs, store, price), {})
    if json_out:
        print_json(verdict.model_dump(mode="json"))
    else:
        console.print()
        render_terminal(verdict, console)
    if verdict.exit_code:
        raise typer.Exit(verdict.exit_code)


def register(app: typer.Typer) -> None:
    """Add ``gpuledger gate`` to ``app``."""
    app.command("gate")(gate_cmd)
