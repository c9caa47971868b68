"""``RunWriter``: the one way a measured run reaches the store, for every engine.

It creates the run (with the environment fingerprint), writes every finished request as soon as it
finishes (on a writer thread, so a commit never stalls the measuring event loop; requests that finish
while a commit is running go into the next one), samples telemetry over the measured window, records
the client's own CPU use, and finally stores the summary (``gpuledger.bench.metrics.summarize`` over
the requests read back from the store) and the run's status. HTTP engines and the in-process torch
engine use it alike, so cost, compare and report treat their runs the same way.

    writer = RunWriter(store, RunInfo(id="", engine="torch", model=...), telemetry=True)
    run_id = writer.start()                 # t0 = now; writer.t0 is on time.perf_counter()'s clock
    writer.add(record)                      # times relative to writer.t0; thread-safe
    info = writer.finish("complete")        # or "incomplete" after Ctrl-C / SIGTERM
"""

from __future__ import annotations

import importlib
import os
import platform
import queue
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import psutil

from gpuledger import __version__
from gpuledger.bench.metrics import summarize
from gpuledger.engines.base import GenResult
from gpuledger.errors import GpuledgerError, StoreError
from gpuledger.records import RequestRecord, RunInfo, RunStatus, TelemetrySample

HEARTBEAT_S = 30.0
# How long the writer thread waits after a request finishes before committing it (and whatever
# else finished meanwhile): long enough for the client to send its next request undisturbed.
WRITE_SETTLE_S = 0.005
# Above this share of one core the client itself may have limited the run.
CLIENT_CPU_WARN_RATIO = 0.85


class StoreLike(Protocol):
    """The part of ``gpuledger.store.Store`` the writer uses (see docs/contracts.md)."""

    def create_run(self, info: RunInfo) -> str: ...

    def add_requests(self, run_id: str, records: list[RequestRecord]) -> None: ...

    def add_telemetry(self, run_id: str, samples: list[TelemetrySample]) -> None: ...

    def update_run(self, run_id: str, **fields: Any) -> None: ...

    def heartbeat(self, run_id: str) -> None: ...

    def get_requests(self, id_or_prefix: str) -> list[RequestRecord]: ...

    def get_run(self, id_or_prefix: str) -> RunInfo: ...


def environment_fingerprint() -> dict[str, Any]:
    """``gpuledger.lock.fingerprint()``, or ``{"error": why}`` when it cannot be taken."""
    try:
        lock = importlib.import_module("gpuledger.lock")
    except ImportError as exc:
        return {"error": f"environment fingerprint unavailable: {exc}"}
    try:
        fp = lock.fingerprint()
    except (GpuledgerError, OSError) as exc:
        return {"error": f"environment fingerprint failed: {exc}"}
    return dict(fp)


_STOP = object()


class _StoreThread(threading.Thread):
    """Writes queued requests in batches, one transaction each; heartbeats while idle."""

    def __init__(self, store: StoreLike, run_id: str) -> None:
        super().__init__(name="gpuledger-store-writer", daemon=True)
        self.store = store
        self.run_id = run_id
        self.q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.error: GpuledgerError | None = None
        self.written = 0
        self.settle_s = WRITE_SETTLE_S

    def run(self) -> None:
        while True:
            try:
                item = self.q.get(timeout=HEARTBEAT_S)
            except queue.Empty:
                if self.error is None:
                    try:
                        self.store.heartbeat(self.run_id)
                    except GpuledgerError as exc:
                        self.error = exc
                continue
            if item is not _STOP and self.settle_s > 0:
                # A request just finished, so the client is sending the next one right now: let that
                # send go out before this thread takes the interpreter for a commit.
                time.sleep(self.settle_s)
            batch = [item]
            while True:
                try:
                    batch.append(self.q.get_nowait())
                except queue.Empty:
                    break
            stop = any(b is _STOP for b in batch)
            recs = [b for b in batch if b is not _STOP]
            if recs and self.error is None:
                try:
                    self.store.add_requests(self.run_id, recs)
                    self.written += len(recs)
                except GpuledgerError as exc:
                    self.error = exc
            if stop:
                return


@dataclass(slots=True)
class _Cpu:
    wall: float
    user: float
    system: float


def _cpu_now(proc: psutil.Process) -> _Cpu:
    t = proc.cpu_times()
    return _Cpu(time.perf_counter(), t.user, t.system)


class RunWriter:
    """See the module docstring. ``slo`` and ``stages`` go to the summary (see ``summarize``)."""

    def __init__(
        self,
        store: StoreLike,
        info: RunInfo,
        *,
        telemetry: bool = True,
        telemetry_interval_s: float = 0.1,
        telemetry_root: Path = Path("/"),
        slo: dict[str, float] | None = None,
        stages: list[dict[str, Any]] | None = None,
    ) -> None:
        self.store = store
        self.info = info
        self.telemetry = telemetry
        self.telemetry_interval_s = telemetry_interval_s
        self.telemetry_root = telemetry_root
        self.slo = slo or {}
        self.stages = stages
        self.run_id = ""
        self.t0 = 0.0
        self.t0_monotonic = 0.0
        self._thread: _StoreThread | None = None
        self._sampler: Any = None
        self._sources: list[Any] = []
        self._telemetry_note: dict[str, Any] = {}
        self._proc = psutil.Process()
        self._cpu0: _Cpu | None = None
        self._finished = False

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> str:
        """Create the run (status ``running``), start telemetry; the measured window starts now."""
        info = self.info
        if not info.environment:
            info.environment = environment_fingerprint()
        info.status = "running"
        info.unit = info.unit or "token"
        now = datetime.now(UTC)
        info.created_at = info.created_at or now
        sources = self._open_telemetry()
        info.config = {**info.config, "telemetry": self._telemetry_note}
        try:
            self.run_id = self.store.create_run(info)
        except BaseException:
            self._stop_telemetry()
            raise
        info.id = self.run_id
        self._thread = _StoreThread(self.store, self.run_id)
        self._thread.start()
        # The measured window starts here: the run's clock, telemetry and the client CPU baseline.
        self.t0 = time.perf_counter()
        self.t0_monotonic = time.monotonic()
        self.store.update_run(self.run_id, started_at=datetime.now(UTC))
        if sources:
            from gpuledger.telemetry import BackgroundSampler

            self._sampler = BackgroundSampler(
                sources, interval_s=self.telemetry_interval_s, t0=self.t0_monotonic
            ).start()
        self._cpu0 = _cpu_now(self._proc)
        return self.run_id

    def _open_telemetry(self) -> list[Any]:
        note: dict[str, Any] = {"enabled": self.telemetry, "interval_s": self.telemetry_interval_s}
        self._telemetry_note = note
        if not self.telemetry:
            return []
        try:
            from gpuledger.telemetry import open_sources
        except ImportError as exc:
            note["error"] = f"telemetry unavailable: {exc}"
            return []
        self._sources = open_sources(self.telemetry_root)
        return self._sources

    def _stop_telemetry(self) -> tuple[list[TelemetrySample], list[dict[str, Any]]]:
        sampler, self._sampler = self._sampler, None
        if not self._sources:
            return [], []
        from gpuledger.telemetry import close_sources

        try:
            if sampler is None:
                return [], []
            samples = sampler.stop()
            summaries = [s.to_dict() for s in sampler.summaries()]
            self._telemetry_note["sources"] = sampler.statuses()
            return samples, summaries
        finally:
            close_sources(self._sources)
            self._sources = []

    @property
    def failed(self) -> GpuledgerError | None:
        """The store error that stopped request writes, if any (the caller should stop the run)."""
        return self._thread.error if self._thread is not None else None

    @property
    def written(self) -> int:
        return self._thread.written if self._thread is not None else 0

    def add(self, record: RequestRecord) -> None:
        """Queue a finished request (times relative to ``t0``) for writing; returns at once."""
        if self._thread is None:
            raise StoreError("RunWriter.add() before start()")
        self._thread.q.put(record)

    def add_result(self, result: GenResult) -> None:
        self.add(result.to_record(self.t0))

    def client_usage(self) -> dict[str, Any]:
        """The client's own CPU use over the window so far (one core = ratio 1.0)."""
        cpu0 = self._cpu0 or _cpu_now(self._proc)
        cpu1 = _cpu_now(self._proc)
        wall = max(cpu1.wall - cpu0.wall, 1e-9)
        user, system = cpu1.user - cpu0.user, cpu1.system - cpu0.system
        try:
            cores = len(os.sched_getaffinity(0))
        except AttributeError:
            cores = psutil.cpu_count() or 1
        ratio = (user + system) / wall
        out: dict[str, Any] = {
            "cpu_user_s": user,
            "cpu_system_s": system,
            "wall_s": wall,
            "cpu_util_ratio": ratio,
            "cores_usable": cores,
            "pid": os.getpid(),
            "source": "psutil process cpu_times over the measured window",
            "python": platform.python_version(),
            "gpuledger": __version__,
        }
        try:
            import aiohttp

            out["aiohttp"] = aiohttp.__version__
        except ImportError:
            pass
        if ratio >= CLIENT_CPU_WARN_RATIO:
            out["warnings"] = [
                f"the client used {ratio:.0%} of one CPU core during the window: it may have limited the run"
            ]
        return out

    def finish(
        self,
        status: RunStatus = "complete",
        *,
        extra_summary: dict[str, Any] | None = None,
        server: dict[str, Any] | None = None,
    ) -> RunInfo:
        """Flush the queued requests, store telemetry, summary, client CPU and ``status``; returns the
        run as stored. A store failure during the run is raised here (after the rest is saved)."""
        if self._finished:
            raise StoreError("RunWriter.finish() called twice")
        self._finished = True
        client = self.client_usage()
        t_end = time.perf_counter()
        samples, summaries = self._stop_telemetry()
        thread = self._thread
        if thread is not None:
            thread.q.put(_STOP)
            thread.join()
        write_error = self.failed
        if samples:
            self.store.add_telemetry(self.run_id, samples)
        records = self.store.get_requests(self.run_id)
        summary = summarize(records, slo=self.slo, stages=self.stages)
        if extra_summary:
            summary = summary.amended(**extra_summary)
        fields: dict[str, Any] = {
            "status": "incomplete" if write_error is not None and status == "complete" else status,
            "summary": summary,
            "telemetry_summary": summaries,
            "client": client,
            "config": {**self.info.config, "telemetry": self._telemetry_note},
            "duration_s": t_end - self.t0,
            "finished_at": datetime.now(UTC),
            "num_requests": len(records),
        }
        if server is not None:
            fields["server"] = server
        self.store.update_run(self.run_id, **fields)
        if write_error is not None:
            raise StoreError(f"requests could not be saved during the run: {write_error.message}")
        return self.store.get_run(self.run_id)
