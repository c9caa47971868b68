"""``gpuledger monitor``: serve utilisation, memory, power, energy, temperature and live cost of every
GPU (or the CPU) as Prometheus metrics, with a low-utilisation alert (docs/monitor.md)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.status import Status
from rich.table import Table
from rich.text import Text

from gpuledger.cli.common import JsonOpt, console, err_console, print_json
from gpuledger.errors import UsageError

if TYPE_CHECKING:
    from gpuledger.monitor.state import MonitorState
    from gpuledger.monitor.status import MonitorStatus

# gpuledger.monitor.config.DEFAULT_LISTEN, literal so that `gpuledger --help` does not import the exporter.
DEFAULT_LISTEN = "127.0.0.1:9835"


def _log(line: str) -> None:
    stamp = time.strftime("%H:%M:%S")
    text = escape(line)
    if line.startswith("ALERT"):
        text = f"[bold red]{text}[/bold red]"
    elif " failed: " in line or " lost: " in line or " unavailable: " in line:
        text = f"[yellow]{text}[/yellow]"
    err_console.print(f"[dim]{stamp}[/dim] {text}")


def _status_text(state: MonitorState, url: str) -> str:
    with state.lock:
        now = time.monotonic()
        acc = state.accounted()
        utils = [u for d in acc if (u := d.fresh(d.util_metric, now)) is not None]
        util = f"util {sum(utils) / len(utils) * 100:.0f} %" if utils else "util n/a"
        cost = f" · cost {state.cost.total:.4f} {state.cost.currency}" if state.cost else ""
        alerts = sum(1 for d in acc if d.alert.active)
        alert = f" · [red]{alerts} alert(s)[/red]" if alerts else ""
    return f"serving {url} · {len(acc)} device(s) · {util}{cost}{alert} · Ctrl-C to stop"


def _render(doc: MonitorStatus) -> None:
    """The summary at the end of a monitor session. What a device, an exporter or an engine said (names,
    errors, reasons, URLs) is shown as text, never read as markup."""
    table = Table(title=Text(f"gpuledger monitor — {doc.uptime_s:.0f} s on {doc.hostname}"),
                  title_justify="left")
    for col in ("device", "name", "up", "util now", "energy", "busy", "idle cost", "alert"):
        table.add_column(col)
    cost = doc.cost
    for d in doc.devices:
        util = d.util_now
        if d.energy_j is not None:
            energy = Text(f"{d.energy_j:.1f} J ({d.energy_method})")
        else:
            energy = Text(f"n/a — {d.energy_reason}" if d.energy_reason else "n/a — no power reading")
        idle = f"{d.idle_cost:.4f} {cost.currency}" if cost and d.idle_cost is not None else "—"
        up = Text("yes") if d.up else Text("no ", style="yellow") + Text(d.error or "")
        table.add_row(Text(d.device), Text(d.name), up,
                      "n/a" if util is None else f"{util * 100:.0f} %", energy, f"{d.busy_s:.1f} s",
                      Text(idle), Text("ACTIVE", style="red") if d.low_utilization_alert else "")
    console.print(table)
    if cost:
        parts = ", ".join(f"{k} {v:.4f}" for k, v in cost.components.items() if v)
        console.print(Text(f"cost accrued: {cost.total:.4f} {cost.currency} ({parts or 'nothing yet'}) "
                           f"— {cost.note}; power: {cost.power_source}"))
        if cost.energy_reason:
            console.print(Text(f"  {cost.energy_reason}"))
    else:
        console.print(Text(doc.cost_note))
    eng = doc.engine
    if eng:
        w = eng.window
        if not eng.up:
            console.print(Text(f"engine {eng.url}: down — {eng.reason}"))
        elif w and eng.last:
            cur = cost.currency if cost else ""
            per_m = w.cost_per_million_tokens
            reqs = "n/a" if w.requests is None else f"{w.requests:.0f}"
            out = "n/a" if w.output_tokens is None else f"{w.output_tokens:.0f}"
            price = "n/a" if per_m is None else f"{per_m:.4f} {cur}"
            console.print(Text(f"engine {eng.last.engine} over {w.window_s:.0f} s: {out} output tokens, "
                               f"{reqs} requests; cost per 1M tokens {price}"))
            for key, why in w.reasons.items():
                console.print(Text(f"  {key}: n/a — {why}"))


def _live_display(state: MonitorState, url: str, duration_s: float | None
                  ) -> tuple[AbstractContextManager[Any], Callable[[MonitorState], None]]:
    """A progress bar on stderr for a run with --duration, else a status line (terminals only)."""
    if duration_s is not None:
        progress = Progress(TextColumn("monitoring"), BarColumn(), TimeRemainingColumn(),
                            console=err_console, transient=True)
        task = progress.add_task("monitor", total=duration_s)
        began = time.monotonic()

        def advance(_state: MonitorState) -> None:
            progress.update(task, completed=min(duration_s, time.monotonic() - began))

        return progress, advance
    if err_console.is_terminal:
        status = Status(_status_text(state, url), console=err_console)

        def refresh(current: MonitorState) -> None:
            status.update(_status_text(current, url))

        return status, refresh

    def nothing(_state: MonitorState) -> None:
        return None

    return nullcontext(), nothing


def monitor(
    listen: Annotated[str, typer.Option(
        "--listen", help="HOST:PORT to serve /metrics on (port 0: any free port). Loopback by default.")
    ] = DEFAULT_LISTEN,
    allow_remote: Annotated[bool, typer.Option(
        "--allow-remote", help="Allow a non-loopback --listen address (the metrics are unauthenticated).")
    ] = False,
    interval: Annotated[str, typer.Option(
        "--interval", help="Time between readings, e.g. 1s, 500ms.")] = "1s",
    profile: Annotated[str | None, typer.Option(
        "--profile", help="Cost profile (preset name or YAML file) to accrue cost with. Default: the "
        "preset for the hardware found.")] = None,
    engine_metrics: Annotated[str | None, typer.Option(
        "--engine-metrics", help="A serving engine's Prometheus endpoint (vLLM, SGLang, llama.cpp "
        "--metrics), e.g. http://127.0.0.1:8000/metrics.")] = None,
    engine_window: Annotated[str, typer.Option(
        "--engine-window", help="Sliding window for cost per million tokens and GPU-seconds per request.")
    ] = "60s",
    alert_util: Annotated[float, typer.Option(
        "--alert-util", help="Utilisation ratio (0..1) below which a device counts as idle.")] = 0.2,
    alert_window: Annotated[str, typer.Option(
        "--alert-window", help="How long utilisation must stay below --alert-util to raise the alert.")
    ] = "1h",
    duration: Annotated[str | None, typer.Option(
        "--duration", help="Stop after this long (default: run until Ctrl-C / SIGTERM).")] = None,
    telemetry_from: Annotated[list[str] | None, typer.Option(
        "--telemetry-from", help="Also read another node's exporter (dcgm-exporter, AMD device-metrics-"
        "exporter, gpuledger monitor), e.g. http://gpu-node:9400/metrics?gpu=0,1. Repeatable.")] = None,
    telemetry: Annotated[bool, typer.Option(
        "--telemetry/--no-telemetry", help="Sample this machine's own GPUs and CPU (--no-telemetry: only "
        "--telemetry-from).")] = True,
    json_out: JsonOpt = False,
    root: Annotated[Path, typer.Option(
        "--root", hidden=True, help="Filesystem root for sysfs/procfs (tests).")] = Path("/"),
) -> None:
    """Serve GPU/CPU utilisation, memory, power, energy, temperature and live cost as Prometheus metrics."""
    from gpuledger.monitor import Monitor, MonitorConfig, parse_duration, parse_listen
    from gpuledger.monitor.status import MonitorSummary

    host, port = parse_listen(listen, allow_remote=allow_remote)
    config = MonitorConfig(
        host=host, port=port, interval_s=parse_duration(interval, "--interval"), alert_util=alert_util,
        alert_window_s=parse_duration(alert_window, "--alert-window"), engine_url=engine_metrics,
        engine_window_s=parse_duration(engine_window, "--engine-window"), hostname=socket.gethostname(),
    )
    duration_s = parse_duration(duration, "--duration") if duration is not None else None
    if not telemetry and not telemetry_from:
        raise UsageError("--no-telemetry leaves nothing to monitor: add --telemetry-from URL")
    with Monitor(config, root=root, profile=profile, log=_log, telemetry_from=telemetry_from or (),
                 local_telemetry=telemetry) as mon:
        for line in mon.startup_lines():
            _log(line)
        mon.poll_once()
        server = mon.start_server()
        _log(f"serving {server.url} (Ctrl-C or SIGTERM stops it)")
        show, tick = _live_display(mon.state, server.url, duration_s)
        with show:
            mon.run(duration_s=duration_s, handle_signals=True, on_tick=tick)
        summary = MonitorSummary.of(server.url, mon.state.status(time.monotonic()))
    _log("stopped")
    if json_out:
        print_json(summary.model_dump(mode="json"))
        return
    _render(summary)


def register(app: typer.Typer) -> None:
    """Add ``gpuledger monitor``."""
    app.command("monitor")(monitor)
