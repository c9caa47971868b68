"""``gpuledger telemetry import RUN FILE``: a log taken on the server's node (``gpuledger.telemetry.logs``)
attached to a stored run, matched to the run's measured window by wall-clock time.

The window is ``RunInfo.started_at`` .. ``started_at + duration_s`` (the run's clock; ``--clock-offset S``
is added to every log time, for a node whose clock runs S seconds behind). Each GPU of the log becomes a
device of the run (``nvidia:0@<file stem>``), summarised by the one energy computation
(``gpuledger.telemetry.energy``) at the log's own sampling period; its samples around the window are stored
with the run. ``--gpus N``: the run was served by N GPUs, the log's indices 0..N-1 (the rest of a shared
node's GPUs are recorded as not the run's); one of them absent from the log is ``device_missing``. The
run's earlier devices (the client machine's) are kept and recorded as not assigned.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from gpuledger.errors import InvalidInputError, NotFoundError
from gpuledger.records import RunInfo
from gpuledger.telemetry.base import MAX_DEVICES, DeviceInfo
from gpuledger.telemetry.energy import DEFAULT_GAP_LIMIT_S, edge_tolerance
from gpuledger.telemetry.logs import FORMATS, MAX_LINE, LogFormat, ParsedLog, parse_log
from gpuledger.telemetry.sampler import summarize_series

MAX_FILE_BYTES = 1024 * 1024 * 1024
NEAR_S = 60.0  # log samples further than this from the window cannot be about the run


from gpuledger.boundedio import iter_lines
class RunStore(Protocol):
    def get_run(self, id_or_prefix: str) -> RunInfo: ...

    def update_run(self, run_id: str, *, lock_wait_s: float | None = None, **fields: Any) -> None: ...

    def add_telemetry(self, run_id: str, samples: Sequence[TelemetrySample], *,
                      lock_wait_s: float | None = None) -> None: ...

    def get_telemetry(self, id_or_prefix: str) -> list[TelemetrySample]: ...


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
    devices: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"run": self.run_id, "format": self.format, "file": self.file, "rows": self.rows,
                "malformed_rows": self.malformed, "first_malformed": self.first_malformed,
                "window_start": self.window_start, "window_s": self.window_s,
                "clock_offset_s": self.clock_offset_s, "samples_stored": self.samples_stored,
                "devices": self.devices}


def read_log_file(path: Path) -> str:
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise InvalidInputError(f"{path}: {size / 2**30:.1f} GiB is more than a telemetry log may be "
                                    f"({MAX_FILE_BYTES // 2**30} GiB)",
                                    hint="cut the log to the run's window")
        return path.read_bytes().decode("utf-8", errors="replace")
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


def import_log(store: RunStore, run_ref: str, path: Path, *, fmt: LogFormat | None = None,
               gpus: int | None = None, clock_offset_s: float = 0.0,
               gap_limit_s: float = DEFAULT_GAP_LIMIT_S) -> ImportResult:
    """Attach the log at ``path`` to run ``run_ref`` (module docstring); returns what was attached."""
    if gpus is not None and gpus < 1:
        raise InvalidInputError(f"--gpus must be 1 or more, got {gpus}")
    run = store.get_run(run_ref)
    w0, w1 = _window(run)
    log = parse_log(read_log_file(path), fmt)
    return _attach(store, run, path, log, w0, w1, gpus=gpus, clock_offset_s=clock_offset_s,
                   gap_limit_s=gap_limit_s)


def _attach(store: RunStore, run: RunInfo, path: Path, log: ParsedLog, w0: float, w1: float, *,
            gpus: int | None, clock_offset_s: float, gap_limit_s: float) -> ImportResult:
    duration = w1 - w0
    near = [(t + clock_offset_s - w0, g, m, v) for t, g, m, v in log.readings
            if w0 - NEAR_S <= t + clock_offset_s <= w1 + NEAR_S]
    if not log.readings:
        first_bad = f"; the first: {log.first_malformed}" if log.first_malformed else ""
        raise InvalidInputError(f"{path}: no readings in the log ({log.malformed} malformed rows{first_bad})")
    if not any(0.0 <= t <= duration for t, *_ in near):  # near it, even bracketing it, is not enough
        first = min(t for t, *_ in log.readings) + clock_offset_s
        last = max(t for t, *_ in log.readings) + clock_offset_s
        raise InvalidInputError(
            f"{path}: the log covers {_iso(first)} .. {_iso(last)}, the run's window {_iso(w0)} .. {_iso(w1)}"
            " (UTC): they do not meet",
            hint="is the log from this run? A node whose clock differs: --clock-offset SECONDS; nvidia-smi "
            "writes local time: run with TZ set to the node's zone",
        )
    stem = _stem(path)
    source = f"{log.format} log {path.name}"[:128]
    present = sorted({g for _, g, _, _ in near})
    wanted = list(range(gpus)) if gpus is not None else present
    by = (f"telemetry import {path.name} --gpus {gpus} (GPUs 0..{gpus - 1} of the log)" if gpus is not None
          else f"telemetry import {path.name} (every GPU in the log)")
    summaries: list[dict[str, Any]] = []
    samples: list[TelemetrySample] = []
    for gpu in sorted(set(present) | set(wanted)):
        dev = DeviceInfo(key=f"{log.vendor}:{gpu}@{stem}", vendor=log.vendor, index=gpu,
                         name=log.names.get(gpu, ""), uuid=log.uuids.get(gpu))
        own = _around([(t, m, v) for t, g, m, v in near if g == gpu], 0.0, duration)
        dev_samples = [TelemetrySample(t, dev.key, m, v, source) for t, m, v in own]
        period = _period(sorted({t for t, _, _ in own}))
        summary = summarize_device(dev, dev_samples, window_start=0.0, window_end=duration, interval_s=period,
                                   gap_limit_s=gap_limit_s, edge_tolerance_s=edge_tolerance(period))
        summary.assigned = gpu in wanted
        summary.assigned_by = by if gpu in wanted else f"not among the run's --gpus {gpus}"
        summaries.append(summary.to_dict())
        samples.extend(dev_samples)
    new_keys = {d["device"] for d in summaries}
    kept = []
    for old in run.telemetry_summary:
        if old.get("device") in new_keys:
            continue
        entry = dict(old)
        if entry.get("vendor") in ("nvidia", "amd") and not any(
                str(s).endswith(f" log {path.name}") for s in entry.get("sources") or []):
            entry["assigned"] = False
            entry["assigned_by"] = (f"a device of the machine that ran the bench, not of the server "
                                    f"(its telemetry: telemetry import {path.name})")
        kept.append(entry)
    stored = _new_samples(store, run.id, samples, new_keys, source)
    store.add_telemetry(run.id, stored)
    store.update_run(run.id, telemetry_summary=[*kept, *summaries])
    return ImportResult(run.id, log.format, path.name, log.rows, log.malformed, log.first_malformed,
                        _iso(w0), duration, clock_offset_s, len(stored), summaries)


def _new_samples(store: RunStore, run_id: str, samples: list[TelemetrySample], keys: set[str], source: str
                 ) -> list[TelemetrySample]:
    """The samples the store does not hold yet (a log imported twice adds nothing the second time); the
    devices' samples from another log under the same name are refused."""
    existing = [s for s in store.get_telemetry(run_id) if s.device in keys]
    held = {(s.device, s.metric, s.t) for s in existing}
    clash = {s.device: s.source for s in existing if s.source != source}
    if clash:
        device, other = next(iter(clash.items()))
        raise InvalidInputError(f"run {run_id} already holds samples of {device} from {other}: a log of the "
                                "same name with other readings", hint="rename the log file to import it as "
                                "other devices")
    return [s for s in samples if (s.device, s.metric, s.t) not in held]


def _around(rows: list[tuple[float, str, float]], start: float, end: float) -> list[tuple[float, str, float]]:
    """The rows in ``[start, end]`` and, per metric, the last before and the first after (they bracket)."""
    out: list[tuple[float, str, float]] = []
    for metric in sorted({m for _, m, _ in rows}):
        series = sorted((t, v) for t, m, v in rows if m == metric)
        before = [p for p in series if p[0] < start]
        after = [p for p in series if p[0] > end]
        inside = [p for p in series if start <= p[0] <= end]
        chosen = ([before[-1]] if before else []) + inside + ([after[0]] if after else [])
        out.extend((t, metric, v) for t, v in chosen)
    return sorted(out)


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
