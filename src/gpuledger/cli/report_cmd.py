"""``gpuledger report RUN [RUN ...] [--html FILE] [--md FILE] [--profile RUN=P ...] [--db] [--json]``,
``gpuledger report --trend LABEL [--model M] [--metric NAME]`` (a figure over time: report/trend.py), and
``gpuledger report --matrix ID [--html FILE] [--md FILE] [--json]`` (a benchmark matrix: report/matrix.py
builds it, report/matrix_page.py lays it out)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpuledger.cli.common import DbOpt, JsonOpt, console, err_console, print_json
from gpuledger.cli.files import check_target, write_output
from gpuledger.cli.groups import any_group, expand
from gpuledger.errors import UsageError

if TYPE_CHECKING:
    from gpuledger.report.matrix_model import MatrixReport


def parse_profiles(values: list[str] | None) -> dict[str, str]:
    """``RUN=PROFILE`` pairs, or a bare ``PROFILE`` for every run (key ``"*"``)."""
    out: dict[str, str] = {}
    for value in values or []:
        run, sep, profile = value.partition("=")
        key, name = (run.strip(), profile.strip()) if sep else ("*", run.strip())
        if not name or not key:
            raise UsageError(f"--profile {value!r}: expected RUN=PROFILE or PROFILE")
        if key in out:
            raise UsageError(f"--profile given twice for {'every run' if key == '*' else key}")
        out[key] = name
    return out


def report(
    runs: Annotated[
        list[str] | None,
        typer.Argument(
            help="Run ids or unambiguous prefixes; two or more make a comparison. A group of repeats (g-…, "
            "bench --repeat N) stands for its runs and leads with their mean and 95 % interval."
        ),
    ] = None,
    html: Annotated[
        Path | None,
        typer.Option("--html", help="Write the self-contained HTML report (plots, works offline) to FILE."),
    ] = None,
    md: Annotated[
        str | None,
        typer.Option("--md", help="Write the Markdown twin (same tables, no plots) to FILE; '-' = stdout."),
    ] = None,
    profile: Annotated[
        list[str] | None,
        typer.Option(
            "--profile",
            help="Cost profile per run: RUN=PROFILE (name or YAML path), repeatable; a bare PROFILE applies "
            "to every run. Default: the profile derived from each run's hardware.",
        ),
    ] = None,
    images: Annotated[
        bool,
        typer.Option("--images/--no-images", help="Image runs: a contact sheet of the thumbnails they kept."),
    ] = True,
    matrix: Annotated[
        str | None,
        typer.Option("--matrix", help="A benchmark matrix (m-…, gpuledger matrix): every cell, each target's "
                     "Pareto fronts (plotted with --html), the cheapest target per load level "
                     "(docs/matrix.md)."),
    ] = None,
    trend: Annotated[
        str | None,
        typer.Option("--trend", metavar="LABEL", help="A figure over time across the stored runs with this "
                     "label, each stack change (driver, CUDA/ROCm, torch, engine, server version) marked "
                     "(docs/report.md)."),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option("--model", help="A trend of the runs of this model (alone, or with --trend LABEL)."),
    ] = None,
    metric: Annotated[
        str,
        typer.Option("--metric", help="The trend's figure: throughput, cost, energy, error_rate or a key "
                     "figure (ttft_p99, tpot_p50, step_time_p50, ...)."),
    ] = "throughput",
    db: DbOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Report on one run, or compare several: terminal tables, Markdown, self-contained HTML."""
    from gpuledger.report import build_report, render_html, render_markdown, render_terminal
    from gpuledger.store import open_store

    if trend is not None or model is not None:  # a figure over time (report/trend.py)
        if runs or matrix is not None:
            raise UsageError("--trend / --model select the runs themselves: give no run ids or --matrix with "
                             "them")
        _trend(db, trend, model, metric, parse_profiles(profile), html, md, json_out)
        return
    if metric != "throughput":
        raise UsageError("--metric is the figure of a trend: give --trend LABEL or --model M with it")
    if matrix is not None:  # a benchmark matrix (report/matrix.py)
        if runs or profile:
            raise UsageError("--matrix reports a whole matrix, each cell priced at its target's profile: "
                             "give no run ids or --profile with it")
        _matrix(db, matrix, html, md, json_out)
        return
    if not runs:
        raise UsageError("gpuledger report needs run ids (or --matrix MATRIX_ID)")
    if md == "-" and json_out:
        raise UsageError("--md - and --json both want stdout; write the Markdown to a file")
    profiles = parse_profiles(profile)
    for target in (html, Path(md) if md is not None and md != "-" else None):
        if target is not None:
            check_target(target)  # refused before the report is built, not after
    store = open_store(db)
    try:
        if any_group(runs):  # a group of repeats (bench --repeat N) stands for its runs
            runs = expand(store, runs)
        with err_console.status("building report…") as status:
            data = build_report(store, runs, profiles, progress=lambda msg: status.update(f"{msg}…"),
                                images=images)
    finally:
        store.close()
    from gpuledger.cli.written import Written, with_files

    if html is not None:
        with err_console.status("rendering HTML…"):
            size = write_output(html, render_html(data))
        err_console.print(
            f"wrote {html} ({size / 1e6:.1f} MB, self-contained)", markup=False, highlight=False
        )
    md_file = md if md is not None and md != "-" else None
    if md_file is not None:
        write_output(Path(md_file), render_markdown(data))
        err_console.print(f"wrote {md_file}", markup=False, highlight=False)
    if json_out:
        print_json(with_files(data, Written(html=str(html) if html is not None else None, md=md_file)))
    elif md == "-":
        sys.stdout.write(render_markdown(data))
    else:
        render_terminal(data, console)


def _trend(db: str | None, label: str | None, model: str | None, metric: str, profiles: dict[str, str],
           html: Path | None, md: str | None, json_out: bool) -> None:
    """``report --trend LABEL`` / ``--model M``: the runs selected, oldest first, with each stack change."""
    from gpuledger.catalog import load_catalog
    from gpuledger.cost import cost_of_run, default_profile_for, load_profile
    from gpuledger.report import render_html, render_markdown, render_terminal
    from gpuledger.report.trend import build_trend, trend_report
    from gpuledger.store import open_store

    if set(profiles) - {"*"}:
        raise UsageError("a trend prices every run under one --profile PROFILE (no RUN=PROFILE)")
    if md == "-" and json_out:
        raise UsageError("--md - and --json both want stdout; write the Markdown to a file")
    for target in (html, Path(md) if md is not None and md != "-" else None):
        if target is not None:
            check_target(target)
    catalog = load_catalog()
    prof = load_profile(profiles["*"], catalog) if "*" in profiles else None
    store = open_store(db)
    try:
        runs = [r for r in store.list_runs(label=label) if model is None or r.model == model]
        data = build_trend(
            runs, metric=metric, label=label, model=model, profile=prof.name if prof else None,
            price=lambda r: cost_of_run(r, prof or default_profile_for(r, catalog), catalog=catalog),
        )
    finally:
        store.close()
    report = trend_report(data)
    if html is not None:
        size = write_output(html, render_html(report))
        err_console.print(f"wrote {html} ({size / 1e6:.1f} MB, self-contained)", markup=False,
                          highlight=False)
    if md is not None and md != "-":
        write_output(Path(md), render_markdown(report))
        err_console.print(f"wrote {md}", markup=False, highlight=False)
    if json_out:
        print_json(data.model_dump(mode="json"))
    elif md == "-":
        sys.stdout.write(render_markdown(report))
    else:
        render_terminal(report, console)


def read_matrix(db: str | None, matrix_id: str) -> MatrixReport:
    """The matrix ``matrix_id`` (an id or unambiguous prefix) read, priced and ranked."""
    from gpuledger.report.matrix import build_matrix_report
    from gpuledger.store import open_store

    with open_store(db) as store, err_console.status("reading the matrix…"):
        return build_matrix_report(store, matrix_id)


def show_matrix(db: str | None, matrix_id: str, *, json_out: bool) -> None:
    """``gpuledger matrix show ID``: the matrix report and every cell × repeat (status, attempts, run)."""
    from gpuledger.report import render_terminal
    from gpuledger.report.matrix_page import matrix_page

    report = read_matrix(db, matrix_id)
    if json_out:
        print_json(report.model_dump(mode="json"))
    else:
        render_terminal(matrix_page(report, detail=True), console)


def _matrix(db: str | None, matrix_id: str, html: Path | None, md: str | None, json_out: bool) -> None:
    """``report --matrix ID``: the cheapest target per load level, every cell, each target's Pareto fronts
    (plotted in --html); --json prints the matrix's document and the files written."""
    from gpuledger.report import render_html, render_markdown, render_terminal
    from gpuledger.report.matrix_page import matrix_page

    if md == "-" and json_out:
        raise UsageError("--md - and --json both want stdout; write the Markdown to a file")
    for target in (html, Path(md) if md is not None and md != "-" else None):
        if target is not None:
            check_target(target)  # refused before the matrix is read, not after
    report = read_matrix(db, matrix_id)
    page = matrix_page(report)
    from gpuledger.cli.written import Written, with_files

    if html is not None:
        size = write_output(html, render_html(page))
        err_console.print(f"wrote {html} ({size / 1e6:.1f} MB, self-contained)", markup=False,
                          highlight=False)
    md_file = md if md is not None and md != "-" else None
    if md_file is not None:
        write_output(Path(md_file), render_markdown(page))
        err_console.print(f"wrote {md_file}", markup=False, highlight=False)
    if json_out:
        print_json(with_files(report, Written(html=str(html) if html is not None else None, md=md_file)))
    elif md == "-":
        sys.stdout.write(render_markdown(page))
    else:
        render_terminal(page, console)


def register(app: typer.Typer) -> None:
    """Add ``gpuledger report``."""
    app.command("report")(report)
