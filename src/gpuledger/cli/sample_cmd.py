"""``gpuledger sample``: sample every telemetry source for a while and print one summary per device
(e.g. "what does my idle GPU draw", which the cost model uses as idle power)."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from gpuledger.cli.common import JsonOpt, console, err_console, print_json
from gpuledger.errors import UsageError
from gpuledger.records import DeviceWindow
from gpuledger.telemetry import BackgroundSampler, SourceStatus, close_sources, open_sources

GIB = 1024.0**3


def _num(value: float | None, fmt: str, unit: str = "") -> str:
    if value is None:
        return "n/a"
    return f"{value:{fmt}}{unit}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.0f} %"


def _render(summaries: list[DeviceWindow], statuses: list[SourceStatus], duration: float) -> None:
    table = Table(title=f"Telemetry over {duration:g} s", title_justify="left")
    for col, justify in (("device", "left"), ("name", "left"), ("util mean / peak", "right"),
                         ("memory peak / total", "right"), ("power mean / peak", "right"),
                         ("energy", "right"), ("window", "left"), ("sources", "left")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for s in summaries:
        mem = (f"{_num(s.peak_memory_bytes and s.peak_memory_bytes / GIB, '.2f')} / "
               f"{_num(s.memory_total_bytes and s.memory_total_bytes / GIB, '.2f')} GiB")
        power = f"{_num(s.mean_power_w, '.1f')} / {_num(s.peak_power_w, '.1f')} W"
        if s.energy_j is None:
            energy = "n/a"
        else:
            energy = f"{s.energy_j:.1f} J ({s.energy_method})"
        window = "ok" if s.valid else f"[yellow]{s.validity_reason}[/yellow]"
        table.add_row(s.device, s.name, f"{_pct(s.mean_util_ratio)} / {_pct(s.peak_util_ratio)}", mem,
                      power, energy, window, ", ".join(s.sources))
    console.print(table)
    for s in summaries:
        if s.energy_reason:
            console.print(f"  {s.device} energy: {s.energy_reason}")
        for metric, why in sorted(s.unavailable.items()):
            console.print(f"  {s.device} {metric}: n/a — {why}")
    src = Table(title="Sources", title_justify="left")
    src.add_column("source")
    src.add_column("status")
    src.add_column("devices / reason")
    for st in statuses:
        src.add_row(st.name, "[green]available[/green]" if st.available else "[dim]unavailable[/dim]",
                    ", ".join(st.devices) if st.available and not st.reason else str(st.reason or ""))
    console.print(src)
    console.print("units: util ratio shown as %, memory GiB (2^30 B), power W, energy J; "
                  "energy 'counter' = hardware counter checked against integrated power (±5 %), "
                  "'integrated' = trapezoid integral of sampled power.")


MAX_SAMPLE_S = 86_400.0
MIN_INTERVAL_S = 0.01


def sample(
    duration: Annotated[float, typer.Option("--duration", help="Seconds to sample.")] = 5.0,
    interval: Annotated[float, typer.Option(
        "--interval", help="Seconds between readings (CLI fallbacks: at most one per second).")] = 0.1,
    json_out: JsonOpt = False,
    root: Annotated[Path, typer.Option(
        "--root", hidden=True, help="Filesystem root for sysfs/procfs (tests).")] = Path("/"),
) -> None:
    """Sample utilisation, memory, power and energy of every GPU and the CPU, then summarise."""
    if not (duration > 0 and math.isfinite(duration)):
        raise UsageError(f"--duration must be a positive number of seconds, got {duration!r}")
    if duration > MAX_SAMPLE_S:
        raise UsageError(
            f"--duration must be at most {MAX_SAMPLE_S:g} s (one day; the samples are kept in memory), "
            f"got {duration:g}", hint="for longer watching use `gpuledger monitor`"
        )
    if not (interval > 0 and math.isfinite(interval)):
        raise UsageError(f"--interval must be a positive number of seconds, got {interval!r}")
    if not MIN_INTERVAL_S <= interval <= duration:
        raise UsageError(
            f"--interval must be between {MIN_INTERVAL_S:g} s and --duration ({duration:g} s), "
            f"got {interval:g}"
        )
    sources = open_sources(root)
    try:
        sampler = BackgroundSampler(sources, interval_s=interval, t0=time.monotonic())
        with Progress(TextColumn("sampling"), BarColumn(), TimeRemainingColumn(), console=err_console,
                      transient=True) as progress:
            task = progress.add_task("sample", total=duration)
            sampler.start()
            start = time.monotonic()
            try:
                while (elapsed := time.monotonic() - start) < duration:
                    progress.update(task, completed=elapsed)
                    time.sleep(min(0.1, duration - elapsed))
            finally:
                sampler.stop()
            progress.update(task, completed=duration)
        summaries = sampler.summaries()
        statuses = sampler.statuses()
    finally:
        close_sources(sources)
    if json_out:
        print_json({"duration_s": duration, "interval_s": interval,
                    "devices": [s.to_dict() for s in summaries], "sources": [s.to_dict() for s in statuses]})
        return
    _render(summaries, statuses, duration)


def register(app: typer.Typer) -> None:
    """Add ``gpuledger sample``."""
    app.command("sample")(sample)
