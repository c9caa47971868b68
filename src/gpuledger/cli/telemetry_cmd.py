"""``gpuledger telemetry import RUN FILE``: attach a power/utilisation log taken on the server's node to a
stored run (``gpuledger.telemetry.attach``; formats in ``gpuledger.telemetry.logs``, docs/telemetry.md)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from gpuledger.cli.common import DbOpt, JsonOpt, console, print_json
from gpuledger.cli.numeric import CLOCK_OFFSET_S
from gpuledger.errors import UsageError

if TYPE_CHECKING:
    from gpuledger.telemetry.attach import ImportResult

telemetry_app = typer.Typer(
    name="telemetry", help="Telemetry taken elsewhere: attach a log of the server's node to a stored run.",
    no_args_is_help=True,
)


class LogFormatOpt(StrEnum):
    nvidia_smi = "nvidia-smi"
    amd_smi = "amd-smi"
    dcgm = "dcgm"


def _num(value: float | None, fmt: str, unit: str) -> str:
    return "n/a" if value is None else f"{value:{fmt}} {unit}"


def _render(result: ImportResult) -> None:
    r = result
    console.print(f"run {r.run_id}: {r.format} log {r.file}, window from {r.window_start} for "
                  f"{r.window_s:.2f} s (clock offset {r.clock_offset_s:g} s)", markup=False)
    table = Table(title="devices from the log", title_justify="left")
    for col in ("device", "assigned", "mean power", "energy", "samples", "valid"):
        table.add_column(col, justify="right" if col in ("mean power", "energy", "samples") else "left")
    for d in result.devices:
        energy = _num(d.energy_j, ",.1f", "J")
        if d.energy_method:
            energy += f" ({d.energy_method})"
        valid = "yes" if d.valid else "no: " + ", ".join(d.reasons)
        table.add_row(d.device, "yes" if d.assigned else "no", _num(d.mean_power_w, ",.1f", "W"), energy,
                      str(d.samples), valid)
    console.print(table)
    for d in result.devices:
        if d.validity_reason:
            console.print(f"  {d.device}: {d.validity_reason}", markup=False)
    if result.malformed:
        console.print(f"  {result.malformed} of {result.rows} rows could not be read and were left out; "
                      f"the first: {result.first_malformed}", markup=False)


@telemetry_app.command("import")
def import_cmd(
    run: Annotated[str, typer.Argument(help="Run id or unambiguous prefix.")],
    file: Annotated[Path, typer.Argument(help="The log (nvidia-smi CSV, amd-smi CSV, or timestamped dcgmi "
                                              "dmon output).")],
    fmt: Annotated[
        LogFormatOpt | None,
        typer.Option("--format", "-f", case_sensitive=False, help="The log's format (default: told from its "
                                                                  "first lines)."),
    ] = None,
    gpus: Annotated[int | None, typer.Option("--gpus", help="The run was served by N GPUs (1 to 1024): the "
                                                            "log's indices 0..N-1; one absent is "
                                                            "device_missing.")] = None,
    clock_offset: Annotated[float, typer.Option("--clock-offset", help="Seconds added to every log time (the "
                                                                        "node's clock runs that far behind).")
                            ] = 0.0,
    gap_limit: Annotated[float, typer.Option("--gap-limit", help="Longest gap between samples, s, for the "
                                                                  "energy to be valid.")] = 3.0,
    db: DbOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Attach a log taken on the server's node to RUN, matched to its window by wall-clock time."""
    import math

    from gpuledger.store import open_store
    from gpuledger.telemetry.attach import import_log
    from gpuledger.telemetry.base import MAX_DEVICES

    CLOCK_OFFSET_S.check("--clock-offset", clock_offset)  # finite and within a year (cli/numeric.py)
    if not (gap_limit > 0 and math.isfinite(gap_limit)):
        raise UsageError(f"--gap-limit must be a positive number of seconds, got {gap_limit}")
    if gpus is not None and not 1 <= gpus <= MAX_DEVICES:
        raise UsageError(f"--gpus must be 1 to {MAX_DEVICES:,} (the GPUs of one node's log), got {gpus}")
    store = open_store(db)
    try:
        result = import_log(store, run, file, fmt=fmt.value if fmt is not None else None,
                            gpus=gpus, clock_offset_s=clock_offset, gap_limit_s=gap_limit)
    finally:
        store.close()
    if json_out:
        print_json(result.to_dict())
    else:
        _render(result)


def register(app: typer.Typer) -> None:
    """Add the ``telemetry`` group (``telemetry import``)."""
    app.add_typer(telemetry_app, name="telemetry")
