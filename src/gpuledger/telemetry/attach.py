"""``gpuledger telemetry import RUN FILE``: a log taken on the server's node (``gpuledger.telemetry.logs``)
attached to a stored run, matched to the run's measured window by wall-clock time.

The window is ``RunInfo.started_at`` .. ``started_at + duration_s`` (the run's clock; ``--clock-offset S``
is added to every log time, for a node whose clock runs S seconds behind). Each GPU of the log becomes a
device of the run (``nvidia:0@<file stem>``), summarised by the one energy computation
(``gpuledger.telemetry.energy``) at the log's own sampling period; its samples around the window are stored
with the run. ``--gpus N``: the run was served by N GPUs, the log's indices 0..N-1 (the rest of a shared
node's GPUs are recorded as not the run's); one of them absent from the log is ``device_missing``.

Per node: each log's devices are its own (the file's stem names the node). Importing a second node's log
keeps the first node's devices as they were — assigned, priced — and the run's earlier devices that came
from no log (the client machine's) are recorded as not assigned. Transactional: the run's summary is read,
merged and written in one transaction that holds the run (``Store.attach_telemetry``), so two imports into
one run at once both land.

Bounded: the file is read as a stream of lines (``gpuledger.boundedio.iter_lines``: at most
``MAX_FILE_BYTES`` whatever the file is — ``/dev/zero``, a FIFO — and ``logs.MAX_LINE`` of a line), only
the readings within ``NEAR_S`` of the window are kept (as arrays, ``logs.MAX_READINGS`` at most),
``--gpus`` is at most ``MAX_DEVICES``.
"""

from __future__ import annotations

import re
import statistics
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, TypeAlias

from gpuledger.boundedio import iter_lines
from gpuledger.errors import InvalidInputError, NotFoundError
from gpuledger.records import DeviceWindow, RunInfo, dump_telemetry_summary
from gpuledger.telemetry.base import MAX_DEVICES, DeviceInfo
from gpuledger.telemetry.energy import DEFAULT_GAP_LIMIT_S, edge_tolerance
from gpuledger.telemetry.logs import FORMATS, MAX_LINE, LogFormat, ParsedLog, parse_log
from gpuledger.telemetry.sampler import summarize_series

MAX_FILE_BYTES = 1024 * 1024 * 1024
NEAR_S = 60.0  # log samples further than this from the window cannot be about the run

Series = tuple[str, str, str, Sequence[float], Sequence[float]]


class RunStore(Protocol):
    def get_run(self, id_or_prefix: str) -> RunInfo: ...

    def attach_telemetry(self, run_id: str, devices: Sequence[str], series: Iterator[Series],
                         summarize: Callable[[RunInfo, dict[str, set[str]]], list[DeviceWindow]], *,
                         lock_wait_s: float | None = None) -> int: ...


@dataclass(slots=True)
class ImportResult:
    run_id: str
    format: str
    file: str
    rows: int
    malformed: int
    first_malformed: str | None
    window_start: str
    window_s: float
    clock_offset_s: float
    samples_stored: int
    devices: list[DeviceWindow] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"run": self.run_id, "format": self.format, "file": self.file, "rows": self.rows,
                "malformed_rows": self.malformed, "first_malformed": self.first_malformed,
                "window_start": self.window_start, "window_s": self.window_s,
                "clock_offset_s": self.clock_offset_s, "samples_stored": self.samples_stored,
                "devices": dump_telemetry_summary(self.devices)}


def read_log_lines(path: Path) -> Iterator[str]:
    """The lines of the log at ``path`` (any kind of file), decoded, bounded (module docstring)."""
    try:
        for raw in iter_lines(path, MAX_FILE_BYTES, max_line=MAX_LINE, what=str(path),
                              hint="cut the log to the run's window"):
            yield raw.decode("utf-8", errors="replace").removesuffix("\r")
    except FileNotFoundError:
        raise NotFoundError(f"no such file: {path}") from None
    except IsADirectoryError:
        raise InvalidInputError(f"{path} is a directory, not a log file") from None
    except OSError as exc:
        raise InvalidInputError(f"cannot read {path}: {exc.strerror or exc}") from None


def _stem(path: Path) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", path.stem)[:40] or "log"


def _period(times: Sequence[float]) -> float:
    steps = [b - a for a, b in zip(times, times[1:], strict=False) if b > a]
    return statistics.median(steps) if steps else 1.0


def _window(run: RunInfo) -> tuple[float, float]:
    if run.started_at is None or run.duration_s is None or run.duration_s <= 0:
        raise InvalidInputError(f"run {run.id} has no measured window (started_at and duration_s): a log "
                                "cannot be matched to it", hint="import logs for finished runs")
    start = run.started_at if run.started_at.tzinfo else run.started_at.replace(tzinfo=UTC)
    return start.timestamp(), start.timestamp() + run.duration_s


def check_gpus(gpus: int | None) -> None:
    """``--gpus`` within 1 .. ``MAX_DEVICES``; InvalidInputError otherwise."""
    if gpus is not None and not 1 <= gpus <= MAX_DEVICES:
        raise InvalidInputError(f"--gpus must be 1 to {MAX_DEVICES:,} (the GPUs of one node's log), "
                                f"got {gpus}")


def import_log(store: RunStore, run_ref: str, path: Path, *, fmt: LogFormat | None = None,
               gpus: int | None = None, clock_offset_s: float = 0.0,
               gap_limit_s: float = DEFAULT_GAP_LIMIT_S) -> ImportResult:
    """Attach the log at ``path`` to run ``run_ref`` (module docstring); returns what was attached."""
    check_gpus(gpus)
    run = store.get_run(run_ref)
    w0, w1 = _window(run)
    lo, hi = w0 - NEAR_S - clock_offset_s, w1 + NEAR_S - clock_offset_s
    log = parse_log(read_log_lines(path), fmt, keep=lambda t: lo <= t <= hi)
    return _attach(store, run, path, log, w0, w1, gpus=gpus, clock_offset_s=clock_offset_s,
                   gap_limit_s=gap_limit_s)


# metric -> (times on the run's clock, values)
Chosen: TypeAlias = "dict[str, tuple[array[float], array[float]]]"


def _around(times: Sequence[float], values: Sequence[float], shift: float, end: float
            ) -> tuple[array[float], array[float]]:
    """The readings in ``[0, end]`` (times + ``shift``) and the last before and first after (they
    bracket), in time order."""
    order = sorted(range(len(times)), key=times.__getitem__)
    out_t: array[float] = array("d")
    out_v: array[float] = array("d")
    before = after = -1
    for i in order:
        t = times[i] + shift
        if t < 0.0:
            before = i
        elif t <= end:
            if before >= 0:
                out_t.append(times[before] + shift)
                out_v.append(values[before])
                before = -1
            out_t.append(t)
            out_v.append(values[i])
        else:
            if before >= 0:  # nothing inside: the two that bracket the window
                out_t.append(times[before] + shift)
                out_v.append(values[before])
                before = -1
            after = i
            break
    if before >= 0:
        out_t.append(times[before] + shift)
        out_v.append(values[before])
    if after >= 0:
        out_t.append(times[after] + shift)
        out_v.append(values[after])
    return out_t, out_v


def _from_log(entry: DeviceWindow) -> bool:
    """Did a device of the run's summary come from an imported log (its sources say ``<format> log``)?"""
    return any(s.startswith(tuple(f"{f} log " for f in FORMATS)) for s in entry.sources)


def _attach(store: RunStore, run: RunInfo, path: Path, log: ParsedLog, w0: float, w1: float, *,
            gpus: int | None, clock_offset_s: float, gap_limit_s: float) -> ImportResult:
    duration = w1 - w0
    shift = clock_offset_s - w0
    if not log.readings:
        first_bad = f"; the first: {log.first_malformed}" if log.first_malformed else ""
        raise InvalidInputError(f"{path}: no readings in the log ({log.malformed} malformed rows{first_bad})")
    if not any(0.0 <= t + shift <= duration for times, _ in log.series.values() for t in times):
        first = (log.first_t or 0.0) + clock_offset_s
        last = (log.last_t or 0.0) + clock_offset_s
        raise InvalidInputError(
            f"{path}: the log covers {_iso(first)} .. {_iso(last)}, the run's window {_iso(w0)} .. {_iso(w1)}"
            " (UTC): they do not meet",
            hint="is the log from this run? A node whose clock differs: --clock-offset SECONDS; nvidia-smi "
            "writes local time: run with TZ set to the node's zone",
        )
    stem = _stem(path)
    source = f"{log.format} log {path.name}"[:128]
    present = log.gpus
    wanted = list(range(gpus)) if gpus is not None else present
    by = (f"telemetry import {path.name} --gpus {gpus} (GPUs 0..{gpus - 1} of the log)" if gpus is not None
          else f"telemetry import {path.name} (every GPU in the log)")
    summaries: list[DeviceWindow] = []
    chosen: dict[str, Chosen] = {}
    for gpu in sorted(set(present) | set(wanted)):
        dev = DeviceInfo(key=f"{log.vendor}:{gpu}@{stem}", vendor=log.vendor, index=gpu,
                         name=log.names.get(gpu, ""), uuid=log.uuids.get(gpu))
        mine: Chosen = {}
        for metric in sorted({m for g, m in log.series if g == gpu}):
            times, values = log.series.pop((gpu, metric))  # the raw readings are not needed past here
            mine[metric] = _around(times, values, shift, duration)
        chosen[dev.key] = mine
        period = _period(sorted({t for ts, _ in mine.values() for t in ts}))
        summary = summarize_series(dev, {m: zip(ts, vs, strict=True) for m, (ts, vs) in mine.items()},
                                   [source] if mine else [], window_start=0.0, window_end=duration,
                                   interval_s=period, gap_limit_s=gap_limit_s,
                                   edge_tolerance_s=edge_tolerance(period))
        why = by if gpu in wanted else f"not among the run's --gpus {gpus}"
        summaries.append(summary.with_assignment(gpu in wanted, why))
    new_keys = list(chosen)

    def merged(current: RunInfo, held: dict[str, set[str]]) -> list[DeviceWindow]:
        """The run's summary as it is now, with this log's devices in: called inside the store's
        transaction, so another import's devices (another node) are never lost."""
        clash = {d: sorted(srcs - {source}) for d, srcs in held.items() if srcs - {source}}
        if clash:
            device, others = next(iter(clash.items()))
            raise InvalidInputError(f"run {run.id} already holds samples of {device} from {others[0]}: a log "
                                    "of the same name with other readings",
                                    hint="rename the log file to import it as other devices")
        kept = []
        for entry in current.telemetry_summary:
            if entry.device in chosen:
                continue
            if entry.is_gpu and not _from_log(entry):
                why = (f"a device of the machine that ran the bench, not of the server (its telemetry: "
                       f"telemetry import {path.name})")
                entry = entry.with_assignment(False, why)
            kept.append(entry)
        return [*kept, *summaries]

    def series() -> Iterator[Series]:
        for key, per in chosen.items():
            for metric, (ts, vs) in per.items():
                yield key, metric, source, ts, vs

    stored = store.attach_telemetry(run.id, new_keys, series(), merged)
    return ImportResult(run.id, log.format, path.name, log.rows, log.malformed, log.first_malformed,
                        _iso(w0), duration, clock_offset_s, stored, summaries)


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
