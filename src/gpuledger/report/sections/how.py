"""The "how measured" section: the metric definitions, and per run where its numbers came from (summary,
energy method, client CPU, the unit of work, the workload it repeated, and its kind's own columns: token
counts and SLOs for inference, what one image was, what was trained). The definitions and the kind's
columns come from each run's kind (its ``report`` facet)."""

from __future__ import annotations

from collections.abc import Sequence

from gpuledger import __version__
from gpuledger.bench.rundocs import ClientView
from gpuledger.records.units import unit_info
from gpuledger.report import fmt
from gpuledger.report.kinds import KindReport, by_kind, report_of
from gpuledger.report.model import Section
from gpuledger.report.rundata import RunData
from gpuledger.report.sections.base import aligned, tabulate


def _flags(names: Sequence[str]) -> str:
    """``["num_requests", "concurrency"]`` -> ``"--num-requests, --concurrency"`` (bench's flag names)."""
    return ", ".join("--" + n.replace("_", "-") for n in names)


def _workload_origins(runs: list[RunData]) -> tuple[dict[str, str], list[str]]:
    """Where each run's workload came from (a cell per run id), and lines naming the runs of this report
    that ran the same workload through ``bench --like``. Both empty when no run was made with --like."""
    likes = {r.info.id: r.info.config.like for r in runs}  # bench --like RUN: whose workload it ran
    if all(like is None for like in likes.values()):
        return {}, []
    names = {r.info.id: r.ref.name for r in runs}
    flags = {rid: _flags(like.overridden) for rid, like in likes.items() if like is not None}

    def run_text(run_id: str) -> str:
        name = names.get(run_id)
        return f"{name} (run {run_id})" if name is not None and name != run_id else f"run {run_id}"

    def root(run_id: str) -> str:
        """The run whose workload this one ran, following --like through the runs of this report."""
        seen = {run_id}
        like = likes.get(run_id)
        while like is not None:
            run_id = like.run_id
            if run_id in seen:
                break
            seen.add(run_id)
            like = likes.get(run_id)
        return run_id

    cells: dict[str, str] = {}
    for r in runs:
        like = likes[r.info.id]
        if like is not None:
            changed = flags[r.info.id]
            cells[r.info.id] = f"workload of {run_text(like.run_id)}, " + (
                f"overridden: {changed}" if changed else "nothing overridden"
            )
        else:
            repeats = [c.ref.name for c in runs if c is not r and root(c.info.id) == r.info.id]
            cells[r.info.id] = "its own" + (f"; repeated by {', '.join(repeats)}" if repeats else "")
    lines: list[str] = []
    for source in dict.fromkeys(root(r.info.id) for r in runs):
        members = [r for r in runs if root(r.info.id) == source]
        copies = [r for r in members if r.info.id != source]
        if len(members) < 2:
            continue
        overrides = [f"{c.ref.name} overrode {flags[c.info.id]}" for c in copies if flags.get(c.info.id)]
        if source in names:
            line = (
                f"same workload: {' and '.join(c.ref.name for c in copies)} "
                f"{'repeats' if len(copies) == 1 else 'repeat'} the workload of {run_text(source)} "
                "with bench --like"
            )
        else:
            line = (
                f"same workload: {' and '.join(c.ref.name for c in copies)} all repeat the workload of "
                f"{run_text(source)} with bench --like"
            )
        lines.append(line + ("; except: " + "; ".join(overrides) if overrides else "; nothing overridden"))
    return cells, lines


def _definitions(kinds: list[KindReport]) -> tuple[tuple[str, str], ...]:
    """The definitions of every kind in the report, each term once (the first kind's wording)."""
    out: dict[str, str] = {}
    for kind in kinds:
        for term, text in kind.definitions:
            out.setdefault(term, text)
    return tuple(out.items())


def how_measured_section(runs: list[RunData]) -> Section:
    rows = []
    origins, same_workload = _workload_origins(runs)
    for r in runs:
        methods = sorted(
            {
                f"{d.device}: {d.energy_method}"
                for d in r.info.telemetry_summary
                if d.energy_method
            }
        ) or [fmt.MISSING]
        cpu = ClientView.of(r.info.client).cpu_share_percent()
        rows.append(
            {
                "run": r.ref.name,
                **({"workload": origins[r.info.id]} if origins else {}),
                "summary": r.summary_source,
                **report_of(r.info).how(r),
                "energy method": ", ".join(methods),
                "client CPU (%)": fmt.num(cpu),
                "unit of work": unit_info(r.info.unit).singular if r.info.unit else fmt.MISSING,
            }
        )
    kinds = [kind for kind, _ in by_kind(runs)]
    notes = " ".join(k.how_note for k in kinds if k.how_note)
    what = "; ".join(dict.fromkeys(k.definitions_note for k in kinds))
    return Section(
        key="how_measured",
        title="How measured",
        intro=f"Definitions used for every number in this report ({what}), and how each run was counted. "
        f"Report built by gpuledger {__version__}.",
        tables=tabulate(
            "provenance",
            "Provenance per run",
            aligned(rows),
            notes
            + (
                " Workload: a run made with gpuledger bench --like RUN ran RUN's workload (dataset, lengths, "
                "load, counts, seed and SLOs copied; RunInfo.config.like), except the flags listed as "
                "overridden."
                if origins
                else ""
            ),
        ),
        definitions=_definitions(kinds),
        notes=tuple(same_workload),
        terminal_notes=bool(same_workload),
    )
