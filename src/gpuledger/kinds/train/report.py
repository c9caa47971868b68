"""The train kind's ``report`` facet (``REPORT``): what a report shows of training runs.

Its section: training tokens per second, the step time and its phases, the loss, MFU or why not, the memory
the run estimated against what the allocator saw — and two plots over the steps, the loss and the step
time, from the runs' step records (every step; the stored curve of the summary when the records are not
there). Its columns of the overview (steps, training tokens per second, steps per second) and of how
measured (what was trained, the ranks); the answer's key facts are the summary's
(``TrainingSummary.key_figures``: training tokens/s, step time, MFU).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuledger.kinds.train.spec import TrainSpec
from gpuledger.kinds.train.summary import TrainingSummary, step_of
from gpuledger.report import fmt
from gpuledger.report.kinds import KindReport, ReportOptions, counts_cells
from gpuledger.report.model import Figure, Section, Table
from gpuledger.report.rundata import RunData
from gpuledger.report.sections.base import line_mode, xy_series
from gpuledger.report.series import bucket_means

ITEMS = "steps"

DEFINITIONS = (
    ("training token", "one token of one training sequence, every rank counted: sequences × sequence length"),
    (
        "step time",
        "from the first forward of an optimizer step to the end of the optimizer, the device "
        "synchronised at both ends and between the phases (forward, backward, optimizer)",
    ),
    (
        "training tokens/s",
        "training tokens of the measured steps ÷ the measured window (first step's start to "
        "the last step's end)",
    ),
    ("loss", "the model's causal-LM cross-entropy, mean over the step's micro-batches and ranks"),
    (
        "MFU",
        "model FLOPs per token (torchtitan: 6 × non-embedding parameters + 12 × layers × hidden × sequence "
        "length) × training tokens/s ÷ (peak dense FLOP/s of one device at the run's dtype × devices)",
    ),
    (
        "memory estimate",
        "weights + gradients + optimizer states + activations of one micro-batch (docs/train.md)",
    ),
)


def _curve(
    r: RunData, s: TrainingSummary
) -> tuple[list[tuple[float, float]], list[tuple[float, float]], str]:
    """(loss points, step-time points, where they came from): every step record, else the stored curve."""
    steps = sorted(
        (t for rec in r.requests if rec.ok and (t := step_of(rec)) is not None), key=lambda t: t.step
    )
    if steps:
        loss = [(float(t.step), t.loss) for t in steps if t.loss is not None]
        times = [(float(t.step), t.step_s) for t in steps]
        return loss, times, "step records"
    loss = [(float(p.step), p.loss) for p in s.loss_curve if p.loss is not None]
    times = [(float(p.step), p.step_s) for p in s.loss_curve]
    return loss, times, "the summary's stored curve"


def _downsampled(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    x, y, _ = bucket_means([p[0] for p in points], [p[1] for p in points])
    return list(zip(x, y, strict=True))


def training_section(runs: Sequence[RunData], options: ReportOptions) -> Section | None:
    """The section, or None when no run trained."""
    own = [(i, r, r.info.summary) for i, r in enumerate(runs) if isinstance(r.info.summary, TrainingSummary)]
    if not own:
        return None
    rows: list[tuple[str, ...]] = []
    loss_series = []
    time_series = []
    missing: list[str] = []
    sources: set[str] = set()
    for i, r, s in own:
        spec = r.info.config
        est = spec.memory_estimate if isinstance(spec, TrainSpec) else None
        peak = (r.info.server.get("details") or {}).get("peak_memory") or {}
        mfu = s.mfu_quantity()
        rows.append(
            (
                r.ref.name,
                s.workload_text() or "—",
                f"{s.steps_total:,}",
                fmt.num(s.training_tokens_per_s),
                fmt.num(s.step_time_s.p50),
                fmt.num(s.step_time_s.p99),
                " / ".join(fmt.num(b.mean) for b in (s.forward_s, s.backward_s, s.optimizer_s)),
                f"{fmt.num(s.loss_first, 4)} → {fmt.num(s.loss_last, 4)}",
                fmt.num(s.mfu * 100) if s.mfu is not None else fmt.MISSING,  # significant digits, not 0.00
                fmt.gib(peak.get("value") if isinstance(peak.get("value"), int | float) else None),
                fmt.gib(est.model_bytes if est is not None else None),
            )
        )
        if mfu.value is None:
            missing.append(f"{r.ref.name}: MFU — {mfu.reason}")
        loss, times, source = _curve(r, s)
        sources.add(source)
        if loss:
            pts = _downsampled(loss)
            loss_series.append(xy_series(r.ref.name, pts, mode=line_mode(len(pts)), color=i))
        else:
            missing.append(f"{r.ref.name}: loss — no step had a finite loss")
        if times:
            pts = _downsampled(times)
            time_series.append(xy_series(r.ref.name, pts, mode=line_mode(len(pts)), color=i))
    provenance = f"per optimizer step, from the {' and '.join(sorted(sources))} (kinds.train.summary)"
    figures = []
    if loss_series:
        figures.append(
            Figure(
                key="train_loss",
                title="Loss per step",
                kind="line",
                x_title="step",
                y_title="loss (cross-entropy)",
                series=tuple(loss_series),
                provenance=provenance,
                y_range_zero=False,
            )
        )
    if time_series:
        figures.append(
            Figure(
                key="train_step_time",
                title="Step time per step",
                kind="line",
                x_title="step",
                y_title="step time (s)",
                series=tuple(time_series),
                provenance=provenance + "; the device synchronised at both ends of each step",
            )
        )
    table = Table(
        key="training",
        title="Training (measured window)",
        columns=(
            "run",
            "what",
            "steps",
            "training tok/s",
            "step s p50",
            "p99",
            "fwd / bwd / opt s",
            "loss first → last",
            "MFU %",
            "peak memory GiB (allocator)",
            "memory estimate GiB",
        ),
        rows=tuple(rows),
        provenance="the runs' summaries (kinds.train.summary.summarize_training); the allocator's peak "
        "(torch.cuda.max_memory_allocated on a GPU, the profiler's CPU allocations on a CPU)",
    )
    return Section(
        key="training",
        title="Training",
        intro="What an optimizer step took on this stack, what it trained, how much of the device it used.",
        tables=(table,),
        figures=tuple(figures),
        not_measured=tuple(missing),
        definitions=DEFINITIONS,
    )


def _summary(r: RunData) -> TrainingSummary | None:
    s = r.info.summary
    return s if isinstance(s, TrainingSummary) else None


def overview_cells(r: RunData) -> dict[str, str]:
    """Steps, the window, the training tokens and the rates."""
    s = _summary(r)
    return {
        **counts_cells(r, ITEMS),
        "training tokens": fmt.num(s.tokens_total if s is not None else None),
        "training tok/s": fmt.num(s.training_tokens_per_s if s is not None else None),
        "steps/s": fmt.num(s.steps_per_s if s is not None else None),
    }


def how_cells(r: RunData) -> dict[str, str]:
    """What was trained, and over how many ranks."""
    s = _summary(r)
    return {
        "trained": fmt.text(s.workload_text() or None) if s is not None else fmt.MISSING,
        "ranks": fmt.num(s.world_size if s is not None else None),
    }


REPORT = KindReport(
    name="train",
    sections=(training_section,),
    overview=overview_cells,
    overview_note="Counts and rates over the measured window (first measured step's start → last step's end, "
    "warm-up steps excluded); training tokens = sequences × sequence length, every rank counted.",
    how=how_cells,
    how_note="Training tokens: sequences × sequence length over every rank, counted by the engine "
    "(docs/train.md).",
    items=ITEMS,
)

__all__ = ["DEFINITIONS", "REPORT", "how_cells", "overview_cells", "training_section"]
