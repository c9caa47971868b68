"""The server-state section of a text-generation report: what the server's own /metrics said over the
measured window (requests running and waiting, KV cache, preemptions), its "why" lines, and waiting requests
against concurrency."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuledger.kinds.text.report import serverstate as state_part
from gpuledger.kinds.text.report.load import CONCURRENCY_STAGE, concurrency_of
from gpuledger.records import BenchSpec
from gpuledger.records.spec import ConcurrencyStage
from gpuledger.report import fmt
from gpuledger.report.kinds import ReportOptions
from gpuledger.report.model import Figure, Section, Series, SeriesDash
from gpuledger.report.rundata import RunData
from gpuledger.report.sections.base import tabulate, xy_series

_STATE_WHAT = "server state (the server's own /metrics: requests running and waiting, KV cache, preemptions)"


def _stage_concurrency(stage_name: str, spec: BenchSpec) -> float | None:
    """The concurrency of a sweep stage named in ``server.state.stages``: from its name (``c=16``) or
    from the stage of the same name in the run's spec (``RunInfo.config.load``)."""
    m = CONCURRENCY_STAGE.match(stage_name)
    if m:
        return float(m.group(1))
    stage = spec.load_stage(stage_name)
    return float(stage.concurrency) if isinstance(stage, ConcurrencyStage) else None


def no_server_state(runs: Sequence[RunData]) -> str:
    """The one line saying why no run of the report has a server state."""
    whys = [state_part.why_no_state(r.info) for r in runs]
    if len(set(whys)) == 1:
        return f"{_STATE_WHAT}: {whys[0]}" + (" (every run)" if len(runs) > 1 else "")
    return f"{_STATE_WHAT}: " + "; ".join(f"{r.ref.name}: {w}" for r, w in zip(runs, whys, strict=True))


def server_state_section(runs: Sequence[RunData], options: ReportOptions) -> Section | None:
    """The server's own view of each run: one row per run (and per sweep stage), what it says about the
    numbers ("why" lines), and for sweeps waiting and running requests against concurrency. ``None``
    when no run records a state at all (``no_server_state`` then says why)."""
    states = {r.info.id: state_part.state_of(r.info) for r in runs}
    if all(st is None for st in states.values()):
        return None
    several = len(runs) > 1
    rows: list[dict[str, str]] = []
    missing: list[str] = []
    notes: list[str] = []
    plotted: list[tuple[int, RunData, list[tuple[float, Mapping[str, Any]]]]] = []
    any_sweep = False
    for i, r in enumerate(runs):
        state = states[r.info.id]
        subject = f"{r.ref.name} server state"
        if state is None:
            missing.append(f"{subject}: {state_part.why_no_state(r.info)}")
            continue
        if not state_part.sampled(state):
            missing.append(f"{subject}: {fmt.text(state.get('reason') or 'no scrapes stored')}")
            continue
        if not state.get("scrapes"):
            last = state.get("last_error")
            missing.append(
                f"{subject}: no scrape of /metrics answered during the measured window"
                + (f" (last error: {fmt.text(last)})" if last else "")
            )
            continue
        prefix = f"{r.ref.name}: " if several else ""
        blocks = state_part.blocks(state)
        for b in blocks:
            rows.append({"run": r.ref.name, "stage": b.stage, **state_part.row_cells(r.info, state, b)})
        caveat = state_part.failed_scrapes_line(state)
        if caveat:
            notes.append(prefix + caveat)
        why_prefix = f"{r.ref.name} — why: " if several else "why: "
        notes.extend(why_prefix + fmt.text(n) for n in state.get("notes") or [])
        config = r.info.config
        stage_blocks = [b for b in blocks if not b.whole]
        any_sweep = any_sweep or bool(stage_blocks)
        if stage_blocks:
            points = [(_stage_concurrency(b.stage, config), b.block) for b in stage_blocks]
        else:
            points = [(concurrency_of("", None, config), state)]
        known = [(c, block) for c, block in points if c is not None]
        if known:
            plotted.append((i, r, sorted(known, key=lambda p: p[0])))
        elif stage_blocks:
            missing.append(
                f"{r.ref.name}: waiting vs concurrency — the run's stages have no fixed concurrency "
                "(a request-rate load)"
            )
    figure = _waiting_figure(plotted, several) if any_sweep else None
    return Section(
        key="server_state",
        title="Server state",
        intro="What the server itself reported while it was measured: how many requests it was running, how "
        "many it kept waiting in its queue, how full its KV cache was and how often it preempted sequences "
        "— the reasons behind the latency and throughput above.",
        tables=tabulate(
            "server_state",
            "Server state over the measured window",
            rows,
            "The server's own Prometheus /metrics (source column), scraped every interval over the measured "
            "window by gpuledger bench (RunInfo.server.state). Running and waiting = requests, summed over "
            "the series' label sets; KV cache used = % of the KV cache in use (the fullest engine's); mean = "
            "mean over the scrapes, max = the highest scrape; preemptions = increase of the server's "
            "preemption counter over the window (or stage).",
        ),
        figures=(figure,) if figure is not None else (),
        not_measured=tuple(missing),
        notes=tuple(notes),
        terminal_notes=True,
    )


def _waiting_figure(
    plotted: list[tuple[int, RunData, list[tuple[float, Mapping[str, Any]]]]], several: bool
) -> Figure | None:
    series: list[Series] = []
    lines: tuple[tuple[str, str, str, SeriesDash], ...] = (
        ("waiting", "max", "waiting (max)", "solid"),
        ("waiting", "mean", "waiting (mean)", "dash"),
        ("running", "max", "running (max)", "dot"),
    )
    for i, r, points in plotted:
        for k, (key, which, label, dash) in enumerate(lines):
            xy = [(c, v) for c, block in points if (v := state_part.stat(block, key, which)) is not None]
            if not xy:
                continue
            series.append(
                xy_series(
                    f"{r.ref.name} — {label}" if several else label,
                    xy,
                    mode="lines+markers",
                    color=i if several else k,
                    group=r.info.id,
                    dash=dash,
                )
            )
    if not series:
        return None
    return Figure(
        key="waiting_vs_concurrency",
        title="Waiting requests vs concurrency",
        kind="line",
        x_title="concurrent requests",
        y_title="requests (waiting in the server's queue; running)",
        series=tuple(series),
        provenance="Per sweep stage, from the server's own /metrics scraped over the stage: the most and the "
        "mean requests it kept waiting, and the most it ran at once. Waiting rising above 0 while running "
        "stops growing is the saturation point: more concurrency only queues.",
        x_log=True,
    )
