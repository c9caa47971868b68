"""``gpuledger report RUN [RUN ...] [--html FILE] [--md FILE] [--profile RUN=P ...] [--db] [--json]``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from gpuledger.cli.common import DbOpt, JsonOpt, console, err_console, print_json
from gpuledger.cli.files import check_target, write_output
from gpuledger.cli.groups import any_group, expand
from gpuledger.errors import UsageError


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
                     "Pareto front, the cheapest target per load level (docs/matrix.md)."),
    ] = None,
    db: DbOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Report on one run, or compare several: terminal tables, Markdown, self-contained HTML."""
    from gpuledger.report import build_report, render_html, render_markdown, render_terminal
    from gpuledger.store import open_store

    if matrix is not None:  # a benchmark matrix (cli/matrix_cmd.py)
        if runs or html is not None or md is not None or profile:
            raise UsageError("--matrix reports a whole matrix on the terminal or as --json: give no run ids, "
                             "--html, --md or --profile with it")
        from gpuledger.cli.matrix_cmd import report_matrix

        report_matrix(db, matrix, json_out=json_out)
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
    files: dict[str, str] = {}
    if html is not None:
        with err_console.status("rendering HTML…"):
            size = write_output(html, render_html(data))
        files["html"] = str(html)
        err_console.print(
            f"wrote {html} ({size / 1e6:.1f} MB, self-contained)", markup=False, highlight=False
        )
    if md is not None and md != "-":
        write_output(Path(md), render_markdown(data))
        files["md"] = md
        err_console.print(f"wrote {md}", markup=False, highlight=False)
    if json_out:
        print_json({**data.model_dump(mode="json"), "files": files})
    elif md == "-":
        sys.stdout.write(render_markdown(data))
    else:
        render_terminal(data, console)


def register(app: typer.Typer) -> None:
    """Add ``gpuledger report``."""
    app.command("report")(report)
