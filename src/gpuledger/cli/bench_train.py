"""``gpuledger bench --task train``: a training run's own figures on the terminal, after the answer block
every run opens with (``cli/bench_render.py``; the JSON is the stored run, like every run's), and what the
other ranks of a data-parallel run do (``follow``: the steps rank 0 names, nothing stored, nothing printed on
stdout). docs/train.md has the definitions."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from rich.text import Text

from gpuledger.cli.common import console, err_console
from gpuledger.errors import UsageError
from gpuledger.kinds.train.spec import TrainSpec
from gpuledger.kinds.train.summary import TrainingSummary

if TYPE_CHECKING:
    from gpuledger.records import RunInfo
    from gpuledger.records.itemstats import Latency
    from gpuledger.report.layout import Notes

CURVE_ROWS = 12  # loss curve lines shown on the terminal (the report plots every stored point)


def _n(value: float | None, fmt: str = ".4g", unit: str = "") -> str:
    return "n/a" if value is None else f"{value:{fmt}}{unit}"


def _gib(value: float | None) -> str:
    return "n/a" if value is None else f"{value / 1024**3:.2f} GiB"


def _phase_row(name: str, block: Latency) -> tuple[str, ...]:
    return (
        name,
        _n(block.mean, ".4f"),
        _n(block.p50, ".4f"),
        _n(block.p90, ".4f"),
        _n(block.p99, ".4f"),
        f"{block.n}",
    )


def energy_per_token(info: RunInfo, tokens: int) -> tuple[float | None, str]:
    """(J per training token over the devices that served the run, how): the devices and the energy
    ``cost`` prices (``cost.runview.energy_view``), so both say the same."""
    from gpuledger.cost.pricing.runview import energy_view

    view = energy_view(info)
    joules = view.joules
    if joules is None or not tokens:
        return None, "; ".join(view.details) or "no training tokens"
    valid = "" if view.valid else f"; not valid: {'; '.join(view.details)}"
    return joules / tokens, (
        f"{joules:.1f} J over {len(view.devices)} device(s) ÷ {tokens:,} training tokens{valid}"
    )


def render_train_run(info: RunInfo, notes: Notes) -> None:
    """After the answer (training tok/s, step time, loss, MFU): the phases of a step, the loss curve, memory,
    energy and what went wrong; the run id last."""
    from gpuledger.bench.rundocs import ClientView, ServerView
    from gpuledger.report.layout import paragraph, print_table

    s = info.summary
    if not isinstance(s, TrainingSummary):
        raise UsageError(f"run {info.id} is not a training run")
    server = ServerView.of(info.server)
    spec = info.config
    paragraph(
        console,
        f"  {info.status}  engine={info.engine}  {s.workload_text()}"
        + (f"  label={info.label}" if info.label else ""),
        style="dim",
        indent=4,
    )
    print_table(
        console,
        "Step time by phase (s, device synchronised)",
        ("phase", "mean", "p50", "p90", "p99", "n"),
        [
            _phase_row("step", s.step_time_s),
            _phase_row("forward", s.forward_s),
            _phase_row("backward", s.backward_s),
            _phase_row("optimizer", s.optimizer_s),
        ],
    )
    curve = s.loss_curve
    shown = curve if len(curve) <= CURVE_ROWS else [*curve[: CURVE_ROWS // 2], *curve[-CURVE_ROWS // 2 :]]
    print_table(
        console,
        f"Loss per step ({len(curve)} stored"
        + (f", every {s.loss_curve_stride}th" if s.loss_curve_stride > 1 else "")
        + ")",
        ("step", "loss", "step s"),
        [(str(p.step), _n(p.loss, ".5g"), _n(p.step_s, ".4f")) for p in shown],
    )
    mfu = s.mfu_quantity()
    rows: list[tuple[str, str]] = [
        (
            "training tokens",
            f"{s.tokens_total:,} in {s.window_s:.2f} s ({_n(s.tokens_per_step, ',.0f')} per step)",
        ),
        ("samples/s", _n(s.samples_per_s, ",.3f", " samples/s")),
        (
            "model FLOPs",
            f"{_n(s.model_flops_per_token, '.4g')} per token; {_n(s.model_flops_per_s, '.4g')} FLOP/s",
        ),
        (
            "MFU",
            f"{s.mfu:.2%} of {_n(s.peak_flops_per_s, '.4g')} FLOP/s × {s.world_size} device(s)"
            if s.mfu is not None
            else f"n/a — {mfu.reason}",
        ),
    ]
    if isinstance(spec, TrainSpec):
        ranks = spec.ranks or []
        rows.append(
            (
                "devices",
                f"world size {spec.ranks_count()}"
                + (
                    ": " + ", ".join(f"rank {r.rank} {r.device} {r.name}" for r in ranks[:8]) if ranks else ""
                ),
            )
        )
        est = spec.memory_estimate
        peak = server.details.peak_memory
        if peak is None:
            measured = "n/a — the engine recorded no allocator peak"
        elif peak.value is not None:
            measured = f"{_gib(peak.value)} ({peak.source})"
        else:
            measured = f"n/a — {peak.reason}"
        tele = [
            f"{d.device} {_gib(d.peak_memory_bytes)}"
            + (" machine RAM in use" if d.vendor == "cpu" else " device memory in use")
            for d in info.telemetry_summary
            if d.peak_memory_bytes is not None
        ]
        rows.append(
            (
                "peak memory",
                f"allocator {measured}"
                + (f"; sampler {', '.join(tele)}" if tele else "")
                + (
                    f"; estimate {_gib(est.model_bytes)} (+ {_gib(est.overhead_bytes)} overhead)"
                    if est is not None
                    else ""
                ),
            )
        )
    jpt, how = energy_per_token(info, s.tokens_total)
    rows.append(("energy", f"{jpt:.4g} J per training token ({how})" if jpt is not None else f"n/a — {how}"))
    print_table(console, "Training", ("metric", "value"), rows, header=False)
    for kind, n in (s.errors or {}).items():
        paragraph(console, f"{n} × {kind}", lead=Text("failed: ", style="red"), indent=2)
    client = ClientView.of(info.client)
    for note in [*s.fidelity_notes(), *server.warnings, *client.warnings][:8]:
        paragraph(console, notes.shorten(note), lead=Text("note: ", style="yellow"), indent=2)
    if s.aborted:
        paragraph(console, s.aborted, lead=Text("stopped: ", style="red"), indent=2)
    if s.interrupted:
        paragraph(
            console,
            f"{s.interrupted.finished_requests} finished steps kept",
            lead=Text(f"interrupted by {s.interrupted.signal}: ", style="yellow"),
            indent=2,
        )
    notes.print(console)
    console.print(Text("run id: ") + Text(info.id, style="bold"))


def follows(spec: object) -> bool:
    """Run the steps of a rank other than 0 of a data-parallel training run (torchrun); False for rank 0 and
    for every other kind of run (they go on as usual)."""
    if not isinstance(spec, TrainSpec):
        return False
    from gpuledger.engines.torch.distributed import process_rank

    rank = process_rank()
    if rank == 0:
        return False
    follow(spec, rank)
    return True


def follow(spec: TrainSpec, rank: int) -> None:
    """A rank other than 0 of a data-parallel run: the same engine, the steps rank 0 names, until it stops."""
    from gpuledger.engines.torch.trainer import TrainEngine

    async def main() -> int:
        engine = TrainEngine(spec)
        try:
            await engine.open(None)
            return await engine.follow()
        finally:
            await engine.close()

    steps = asyncio.run(main())
    err_console.print(f"[dim]rank {rank}: {steps} steps with rank 0 (rank 0 stores the run)[/dim]")
