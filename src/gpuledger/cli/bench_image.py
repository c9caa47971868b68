"""``gpuledger bench --task image``: an image run's own figures on the terminal, after the answer block every
run opens with (``cli/bench_render.py``; the JSON is the stored run, like every run's): the rate and seconds
per image, the time of each stage per request, what failed. docs/image.md has the definitions."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape
from rich.table import Table

from gpuledger.cli.common import console
from gpuledger.errors import UsageError
from gpuledger.kinds.image.summary import ImageSummary

if TYPE_CHECKING:
    from gpuledger.records import RunInfo
    from gpuledger.report.layout import Notes


def _n(value: float | None, fmt: str = ".3f", unit: str = "") -> str:
    return "n/a" if value is None else f"{value:{fmt}}{unit}"


def render_image_run(info: RunInfo, notes: Notes) -> None:
    """After the answer: images per minute, seconds per image, steps/s, then per stage, then what went
    wrong, the run id last."""
    s = info.summary
    if not isinstance(s, ImageSummary):
        raise UsageError(f"run {info.id} is not an image run")
    spi = s.seconds_per_image
    console.print(
        f"  {_n(s.images_per_min, '.2f')} images/min, "
        f"{_n(spi.p50)} s/image p50 ({_n(spi.p90)} p90, {_n(spi.p99)} p99)"
        + (f", {_n(s.denoise_steps_per_s, '.2f')} denoising steps/s" if s.steps_total else ""),
        highlight=False,
    )
    console.print(
        f"  {info.status}  engine={escape(info.engine)}  model={escape(info.model)}  "
        f"{escape(s.workload_text())}" + (f"  label={escape(info.label)}" if info.label else ""),
        style="dim",
        highlight=False,
    )
    t = Table(title="Per request (s)", title_justify="left")
    for col in ("stage", "mean", "p50", "p90", "p99", "n"):
        t.add_column(col, justify="left" if col == "stage" else "right")
    st = s.stage_times
    for name, block in (
        ("request (total)", s.request_s),
        ("per image", spi),
        ("text encoding", st.text_encode_s),
        ("denoising", st.denoise_s),
        ("VAE decode", st.decode_s),
        ("queue wait", st.queue_wait_s),
        ("execution", st.execution_s),
    ):
        if block.n:
            t.add_row(name, _n(block.mean), _n(block.p50), _n(block.p90), _n(block.p99), f"{block.n}")
    console.print(t)
    extra = [
        f"requests ok / failed: {s.num_ok} / {s.num_failed}",
        f"images: {s.images_total:,} in {s.window_s:.2f} s",
    ]
    if s.step_it_per_s.n:
        extra.append(f"it/s per request: {_n(s.step_it_per_s.p50, '.2f')} p50")
    if s.peak_memory_bytes is not None:
        extra.append(f"peak device memory: {s.peak_memory_bytes / 1024**3:.2f} GiB")
    if s.thumbnails:
        extra.append(f"{len(s.thumbnails)} thumbnail(s) kept for the report's contact sheet")
    for line in extra:
        console.print(f"  {escape(line)}", highlight=False)
    for kind, n in (s.errors or {}).items():
        console.print(f"  [red]failed:[/red] {n} × {escape(kind)}", highlight=False)
    for note in [*s.fidelity_notes(), *info.server.get("warnings", []), *info.client.get("warnings", [])][:8]:
        console.print(f"  [yellow]note:[/yellow] {escape(notes.shorten(str(note)))}", highlight=False)
    if s.aborted:
        console.print(f"  [red]stopped:[/red] {escape(s.aborted)}", highlight=False)
    if s.interrupted:
        console.print(
            f"  [yellow]interrupted by {escape(s.interrupted.signal)}:[/yellow] "
            f"{s.interrupted.finished_requests} finished requests kept",
            highlight=False,
        )
    notes.print(console)
    console.print(f"run id: [bold]{escape(info.id)}[/bold]")
