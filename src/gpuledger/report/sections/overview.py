"""The overview section: one row per run with its counts and rates over the measured window, in the words of
the run's kind (its ``report`` facet's ``overview`` columns: output tok/s for inference, images/s for image
generation, training tok/s for training). Runs of several kinds share one table: a column one kind does not
have is "—" in its rows."""

from __future__ import annotations

from gpuledger.report import fmt
from gpuledger.report.kinds import report_of
from gpuledger.report.model import Section
from gpuledger.report.rundata import RunData
from gpuledger.report.sections.base import aligned, tabulate


def overview_section(runs: list[RunData]) -> Section:
    rows = []
    missing = []
    notes: list[str] = []
    for r in runs:
        kind = report_of(r.info)
        if kind.overview_note not in notes:
            notes.append(kind.overview_note)
        origin = r.info.summary.origin() if r.info.summary is not None else None
        rows.append(
            {
                "run": r.ref.name,
                "id": r.info.id,
                "model": fmt.text(r.info.model),
                "engine": fmt.text(r.info.engine),
                "status": r.info.status,
                "started": fmt.when(r.info.started_at),
                **kind.overview(r),
            }
        )
        if r.info.summary is None:
            missing.append(f"{r.ref.name}: no summary — the run has no stored {kind.items}")
        if origin is not None:
            missing.append(
                f"{r.ref.name}: {origin.label} — its rates as published; no requests, window or telemetry "
                "of its own"
            )
        if r.info.status != "complete":
            missing.append(
                f"{r.ref.name}: status is {r.info.status!s} — numbers cover the {kind.items} that finished"
            )
    return Section(
        key="overview",
        title="Overview",
        intro=f"{len(runs)} run(s). Every number below is recomputable from the store.",
        tables=tabulate("overview", "Runs", aligned(rows), " ".join(notes)),
        not_measured=tuple(missing),
    )

