"""``RunWriter``: the one way a measured run reaches the store, for every engine.

It creates the run (with the environment fingerprint its caller took: ``gpuledger.lock.fingerprint()``
from the CLI), writes every finished request as soon as it
finishes (on a writer thread, so a commit never stalls the measuring event loop; requests that finish
while a commit is running go into the next one), samples telemetry over the measured window, records
the client's own CPU use, and finally stores the summary (``gpuledger.bench.metrics.summarize`` over
the requests read back from the store) and the run's status. HTTP engines and the in-process torch
engine use it alike, so cost, compare and report treat their runs the same way.

    writer = RunWriter(store, RunInfo(id="", engine="torch", model=...), telemetry=True, environment=fp)
    run_id = writer.start()                 # t0 = now; writer.t0 is on time.perf_counter()'s clock
    writer.add(record)                      # times relative to writer.t0; thread-safe
    info = writer.finish("complete")        # or "incomplete" after Ctrl-C / SIGTERM
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import psutil

from gpuledger import __version__
from gpuledger.bench.metrics import summarize
from gpuledger.bench.request_writer import (
    BACKLOG_LIMIT_BYTES,
    LOCK_ATTEMPT_S,
    UNSTORABLE,
    StoreLike,
    StoreThread,
    Warn,
)
from gpuledger.bench.validity import schedule_summary, verdict
from gpuledger.engines.base import GenResult
from gpuledger.errors import GpuledgerError, NotFoundError, StoreError
from gpuledger.facts.cpu import usable_cpus
from gpuledger.records import DeviceWindow, RequestRecord, RunInfo, RunStatus, RunSummary, TelemetrySample
from gpuledger.records.environment import load_environment
from gpuledger.records.run import CLIENT_CORE_WARNING
from gpuledger.records.spec import TelemetryRecord, TelemetrySource
from gpuledger.store.engine import StoreLockedError
from gpuledger.store.exchange import telemetry_problem
from gpuledger.telemetry import BackgroundSampler, Sampler, SourceStatus, close_sources, open_sources

__all__ = ["RunWriter", "StoreLike"]

# Above this share of one core the client itself may have limited the run.
CLIENT_CPU_WARN_RATIO = 0.85


# The final flush (finish): how long the writer keeps trying to save what is queued. A finished run may
# wait as long as one write always could (the busy timeout); an interrupted one (Ctrl-C, SIGTERM) must
# exit promptly.
FINAL_FLUSH_S = 30.0
INTERRUPTED_FLUSH_S = 5.0
# The last writes of finish (telemetry, the run's status) wait at least this long for the lock.
FINAL_WRITE_MIN_S = 1.0


@dataclass(slots=True)
class _Cpu:
    wall: float
    user: float
    system: float
    machine_busy: float = 0.0  # busy seconds of the CPUs this process may run on (all processes)
    machine_cpus: int = 0
    # This thread's (the event loop's) seconds on a CPU and waiting in the run queue for one (Linux).
    loop_run: float | None = None
    loop_wait: float | None = None


def _schedstat() -> tuple[float, float] | tuple[None, None]:
    """(seconds on a CPU, seconds runnable but waiting for one) of the calling thread, from
    ``/proc/thread-self/schedstat`` (Linux with scheduler statistics); (None, None) elsewhere."""
    try:
        with open("/proc/thread-self/schedstat", encoding="ascii") as f:
            run_ns, wait_ns, *_ = f.read().split()
        return int(run_ns) / 1e9, int(wait_ns) / 1e9
    except (OSError, ValueError):
        return None, None


def _cpu_now(proc: psutil.Process) -> _Cpu:
    t = proc.cpu_times()
    per = psutil.cpu_times(percpu=True)
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(len(per)))
    mine = [per[i] for i in sorted(allowed) if i < len(per)]
    # Busy = every state but idle and iowait; steal (taken by the hypervisor) is time the client lost too.
    busy = sum(c.user + c.nice + c.system + getattr(c, "irq", 0.0) + getattr(c, "softirq", 0.0)
               + getattr(c, "steal", 0.0) for c in mine)
    return _Cpu(time.perf_counter(), t.user, t.system, busy, len(mine), *_schedstat())


def _loop_demand(cpu0: _Cpu, cpu1: _Cpu, wall: float) -> dict[str, Any]:
    """How much of the window the client's event loop ran or waited for a CPU: near 1, it always had work
    and the client, not the server, set the pace (the verdict's ``client_bound``)."""
    if None in (cpu0.loop_run, cpu1.loop_run, cpu0.loop_wait, cpu1.loop_wait):
        return {}
    run = (cpu1.loop_run or 0.0) - (cpu0.loop_run or 0.0)
    wait = (cpu1.loop_wait or 0.0) - (cpu0.loop_wait or 0.0)
    return {
        "event_loop_busy_ratio": min(1.0, max(0.0, (run + wait) / wall)),
        "event_loop_wait_ratio": min(1.0, max(0.0, wait / wall)),
        "event_loop_source": "/proc/thread-self/schedstat of the event loop's thread: running + queued",
    }


def _busy_ratio(cpu0: _Cpu, cpu1: _Cpu, wall: float) -> float | None:
    if not cpu1.machine_cpus:
        return None
    return min(1.0, max(0.0, (cpu1.machine_busy - cpu0.machine_busy) / (wall * cpu1.machine_cpus)))


class RunWriter:
    """See the module docstring. ``slo`` and ``stages`` go to the summary (see ``summarize``).

    ``on_warning`` is called (from the writer thread) with one line when something the user should know
    happens while the run goes on: the store is locked by another process and finished requests wait in
    memory, or a request was stored as failed because the store cannot keep one of its values. Each is
    said once per run, and also kept in ``RunInfo.client["warnings"]``. ``backlog_limit_bytes`` bounds
    the requests that wait while the store is locked (docs/contracts.md).

    ``environment`` is the machine's fingerprint the caller took (``gpuledger.lock.fingerprint()``, or
    ``{"error": why}``), stored as ``RunInfo.environment`` unless the run already has one.
    ``in_process`` says the engine computes in this process (the note stored with the client's CPU use:
    that CPU time is the model's, not client overhead limiting the run)."""

    def __init__(
        self,
        store: StoreLike,
        info: RunInfo,
        *,
        telemetry: bool = True,
        telemetry_interval_s: float = 0.1,
        telemetry_root: Path = Path("/"),
        telemetry_from: Sequence[str] = (),
        slo: dict[str, float] | None = None,
        stages: list[dict[str, Any]] | None = None,
        on_warning: Warn | None = None,
        backlog_limit_bytes: int = BACKLOG_LIMIT_BYTES,
        environment: Mapping[str, Any] | None = None,
        in_process: str | None = None,
    ) -> None:
        self.store = store
        self.environment = dict(environment) if environment is not None else None
        self.in_process = in_process
        self.on_warning = on_warning
        self.backlog_limit_bytes = backlog_limit_bytes
        self.info = info
        self.telemetry = telemetry
        self.telemetry_interval_s = telemetry_interval_s
        self.telemetry_root = telemetry_root
        self.telemetry_from = tuple(telemetry_from)  # the server's node (gpuledger.telemetry.remote)
        self.slo = slo or {}
        self.stages = stages
        self.run_id = ""
        self.t0 = 0.0
        self.t0_monotonic = 0.0
        self._thread: StoreThread | None = None
        self._sampler: BackgroundSampler | None = None
        self._live: BackgroundSampler | None = None  # the window's sampler, also while finish() stops it
        self._stopped: BackgroundSampler | None = None  # the sampler of the finished window
        self._sources: list[Sampler] = []
        self._note = TelemetryRecord(enabled=telemetry, interval_s=telemetry_interval_s)
        self._proc = psutil.Process()
        self._cpu0: _Cpu | None = None
        self._send_lags: list[float] = []
        self._finished = False

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> str:
        """Create the run (status ``running``), start telemetry; the measured window starts now."""
        info = self.info
        if info.environment.empty and self.environment is not None:
            info.environment = load_environment(self.environment)
        info.status = "running"
        info.unit = info.unit or "token"
        now = datetime.now(UTC)
        info.created_at = info.created_at or now
        sources = self._open_telemetry()
        info.config = info.config.model_copy(update={"telemetry": self._note})
        try:
            self.run_id = self.store.create_run(info)
        except BaseException:
            self._stop_telemetry()
            raise
        info.id = self.run_id
        self._thread = StoreThread(self.store, self.run_id, self._warn, self.backlog_limit_bytes,
                                   restore=self._restore)
        self._thread.start()
        # The measured window starts here: the run's clock, telemetry and the client CPU baseline.
        self.t0 = time.perf_counter()
        self.t0_monotonic = time.monotonic()
        try:
            info.started_at = datetime.now(UTC)
            self.store.update_run(self.run_id, started_at=info.started_at)
        except BaseException:
            self._thread.stop(0.0)
            self._stop_telemetry()
            raise
        if sources:
            self._sampler = self._live = BackgroundSampler(
                sources, interval_s=self.telemetry_interval_s, t0=self.t0_monotonic
            ).start()
        self._cpu0 = _cpu_now(self._proc)
        return self.run_id

    def _restore(self) -> None:
        """Store the run again under its id, as it was created (status ``running``, this process its
        writer): it was deleted while being written (``gpuledger delete --force``). Its requests written
        before went with it; what is measured from now on is kept."""
        self.store.create_run(replace(self.info, id=self.run_id, status="running"))

    def _still_stored(self) -> None:
        """Before ``finish`` writes the run: a run deleted since the writer thread's last write is stored
        again (``StoreThread.restored``)."""
        try:
            self.store.get_run(self.run_id)
        except NotFoundError:
            if self._thread is not None:
                self._thread.restored()

    def _deleted(self) -> StoreError | None:
        """What a deletion of the run while it was written cost (None when there was none)."""
        thread = self._thread
        if thread is None or not thread.restores:
            return None
        return StoreError(
            f"run {self.run_id} was deleted while it was being written (gpuledger delete --force) and stored "
            f"again under its id: the {thread.lost:,} finished requests saved before went with it",
            hint="a run being written is not deleted without --force (docs/store.md)",
        )

    def _open_telemetry(self) -> list[Sampler]:
        if not self.telemetry and not self.telemetry_from:
            return []
        self._sources = open_sources(self.telemetry_root, remote=self.telemetry_from, local=self.telemetry)
        return self._sources

    def interrupt_telemetry(self, why: str) -> None:
        """Cut the end of the telemetry short (a signal: ``BackgroundSampler.interrupt``): ``finish`` then
        waits for no slow exporter, takes no final reading of the remote sources and fetches nothing after
        the window. Safe from a signal handler and before or during ``finish``."""
        if self._live is not None:
            self._live.interrupt(why)

    def _noted(self, **fields: Any) -> None:
        """Add what the writer found about telemetry to the run's spec (``config.telemetry``)."""
        self._note = self._note.model_copy(update=fields)

    def _stop_telemetry(self) -> tuple[list[TelemetrySample], list[DeviceWindow]]:
        sampler, self._sampler = self._sampler, None
        if not self._sources:
            return [], []
        try:
            if sampler is None:
                return [], []
            samples = sampler.stop()
            summaries = sampler.summaries()
            self._noted(sources=[_source(s) for s in sampler.statuses()])
            self._stopped = sampler
            return samples, summaries
        finally:
            close_sources(self._sources)
            self._sources = []

    def _window_telemetry(
        self, records: Sequence[RequestRecord], summary: RunSummary, summaries: list[DeviceWindow]
    ) -> list[DeviceWindow]:
        """Each device's power and energy over exactly the window the run's counts are per — first send to
        first send + the summary's ``window_s`` (every kind's window starts at its first send), interpolated
        at its edges — not the writer's start to finish, which also holds the time before the first send
        and after the last finish (0.15–0.6 % more energy per token). Unchanged without a window."""
        sampler = self._stopped
        if sampler is None or not summaries or not records or summary.window_s <= 0:
            return summaries
        start = min(r.t_send for r in records)
        return sampler.summaries(between=(start, start + summary.window_s))

    def _stage_telemetry(self, summary: RunSummary, summaries: list[DeviceWindow]) -> list[DeviceWindow]:
        """Each device's power and energy over each stage's own window (a sweep is priced at one stage: its
        J per unit must be that stage's, not the whole sweep's), in the device's ``stages``."""
        sampler = self._stopped
        if sampler is None or not summaries:
            return summaries
        by_key = {d.device: d for d in summaries}
        for stage in summary.stage_summaries():
            window = stage.stage_window()
            if window is None or window[1] <= window[0]:
                continue
            for part in sampler.summaries(between=window):
                dev = by_key.get(part.device)
                if dev is not None:
                    by_key[part.device] = dev.with_stage(stage.stage_name(), part.stage())
        return [by_key[d.device] for d in summaries]

    def _warn(self, message: str) -> None:
        if self.on_warning is not None:
            self.on_warning(message)

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
        self._thread.add(record)

    def add_result(self, result: GenResult, scheduled: float | None = None) -> None:
        """Queue an engine's result; ``scheduled``: when the load meant to send it (``perf_counter``; an
        open-loop load), kept as its send lag for the verdict's coordinated-omission check."""
        if scheduled is not None:
            self._send_lags.append(result.t_send - scheduled)
        self.add(result.to_record(self.t0))

    def client_usage(self) -> dict[str, Any]:
        """The client's own CPU use over the window so far (one core = ratio 1.0)."""
        cpu0 = self._cpu0 or _cpu_now(self._proc)
        cpu1 = _cpu_now(self._proc)
        wall = max(cpu1.wall - cpu0.wall, 1e-9)
        user, system = cpu1.user - cpu0.user, cpu1.system - cpu0.system
        cores = usable_cpus()
        ratio = (user + system) / wall
        out: dict[str, Any] = {
            "cpu_user_s": user,
            "cpu_system_s": system,
            "wall_s": wall,
            "cpu_util_ratio": ratio,
            "cores_usable": cores,
            # The CPU contention the client saw: how busy its CPUs were, every process counted.
            "machine_cpu_busy_ratio": _busy_ratio(cpu0, cpu1, wall),
            **_loop_demand(cpu0, cpu1, wall),
            "pid": os.getpid(),
            "source": "psutil process cpu_times over the measured window",
            "python": platform.python_version(),
            "gpuledger": __version__,
            "aiohttp": aiohttp.__version__,
        }
        if self.in_process is not None:
            # In-process, this process IS the engine: its CPU time is the model's computation.
            out["in_process_engine"] = True
            out["note"] = self.in_process
        elif ratio >= CLIENT_CPU_WARN_RATIO:
            out["warnings"] = [
                f"the client used {ratio:.0%} {CLIENT_CORE_WARNING}: it may have limited the run"
            ]
        return out

    def finish(
        self,
        status: RunStatus = "complete",
        *,
        extra_summary: dict[str, Any] | None = None,
        server: dict[str, Any] | None = None,
        workload: dict[str, Any] | None = None,
    ) -> RunInfo:
        """Flush the queued requests, store telemetry, summary, client CPU and ``status``; returns the
        run as stored. A store failure during the run is raised here (after the rest is saved).

        The final flush is bounded (``FINAL_FLUSH_S`` for a finished run, ``INTERRUPTED_FLUSH_S`` for
        any other status): a store still locked after it keeps what was written, and the run is stored
        ``incomplete`` (StoreError) — or, when not even the status can be written, left to read as
        ``incomplete`` once this process exits (StoreError). A ``complete`` run whose requests all
        failed is stored ``failed``. ``server`` and ``workload`` replace the run's records of them (what the
        run learnt about the server and its prompts as it went)."""
        if self._finished:
            raise StoreError("RunWriter.finish() called twice")
        self._finished = True
        client = self.client_usage()
        t_end = time.perf_counter()
        samples, summaries = self._stop_telemetry()
        flush_s = FINAL_FLUSH_S if status == "complete" else INTERRUPTED_FLUSH_S
        deadline = time.monotonic() + flush_s
        thread = self._thread
        if thread is not None:
            thread.stop(flush_s)
            thread.join(flush_s + LOCK_ATTEMPT_S + FINAL_WRITE_MIN_S)
        self._still_stored()
        write_error = self._write_error(flush_s) or self._deleted()

        def lock_wait() -> float:
            return max(deadline - time.monotonic(), FINAL_WRITE_MIN_S)

        unstorable = [why for why in map(telemetry_problem, samples) if why]
        if unstorable:  # a reading the store cannot keep (a name from a tool's output, say) is left out
            samples = [s for s in samples if telemetry_problem(s) is None]
            self._noted(samples_left_out=f"{len(unstorable)} samples; the first: {unstorable[0]}")
        if samples:
            try:
                self.store.add_telemetry(self.run_id, samples, lock_wait_s=lock_wait())
            except StoreLockedError as exc:
                self._noted(samples_not_saved=f"{len(samples)} samples: {exc.message}")
        records = self.store.get_requests(self.run_id)
        # A kind of run with its own summary says so in its spec (image generation); else text generation's.
        summary = self.info.config.summarize(records) or summarize(records, slo=self.slo, stages=self.stages)
        if extra_summary:
            summary = summary.amended(**extra_summary)
        summaries = self._window_telemetry(records, summary, summaries)
        summaries = self._stage_telemetry(summary, summaries)
        self._store_notes(client)
        if self._send_lags:
            client["send_schedule"] = schedule_summary(self._send_lags)
        interrupted = bool(extra_summary and "interrupted" in extra_summary)
        final = _final_status(status, records, write_error, interrupted)
        # How far the figures can be trusted, judged on what is stored now (bench.validity).
        judged = replace(self.info, summary=summary, client=client, telemetry_summary=summaries, status=final,
                         server=server if server is not None else self.info.server,
                         workload=workload if workload is not None else self.info.workload)
        summary = summary.amended(verdict=verdict(judged, records))
        fields: dict[str, Any] = {
            "status": final,
            "summary": summary,
            "telemetry_summary": summaries,
            "client": client,
            "config": self.info.config.model_copy(update={"telemetry": self._note}),
            "duration_s": t_end - self.t0,
            "finished_at": datetime.now(UTC),
            "num_requests": len(records),
        }
        if server is not None:
            fields["server"] = server
        if workload is not None:
            fields["workload"] = workload
        try:
            self.store.update_run(self.run_id, lock_wait_s=lock_wait(), **fields)
        except StoreLockedError as exc:
            raise StoreError(
                f"run {self.run_id} could not be finished: {exc.message}; {self._saved_text(len(records))} "
                "(it reads as incomplete once this process exits)",
                hint=exc.hint,
            ) from exc
        if write_error is not None:
            raise StoreError(
                f"{write_error.message}; run {self.run_id} is stored as incomplete with "
                f"{self._saved_text(len(records))}",
                hint=write_error.hint,
            )
        return self.store.get_run(self.run_id)

    def _write_error(self, flush_s: float) -> GpuledgerError | None:
        """Why finished requests are missing from the store, or None when every one was saved."""
        thread = self._thread
        if thread is None:
            return None
        if thread.is_alive():
            return StoreError(f"the store did not answer within {flush_s:g} s of the end of the run")
        if thread.error is not None:
            return thread.error
        if thread.unsaved:
            lock = thread.last_lock
            why = lock.message if lock is not None else "the store could not be written"
            return StoreError(
                f"{why} (still after {flush_s:g} s at the end of the run)",
                hint=lock.hint if lock is not None else None,
            )
        return None

    def _saved_text(self, stored: int) -> str:
        thread = self._thread
        missing = thread.unsaved + thread.lost if thread is not None else 0
        return f"{stored} of {stored + missing} finished requests saved"

    def _store_notes(self, client: dict[str, Any]) -> None:
        """What the store did to the run's requests, in ``client`` (``store``; ``warnings``)."""
        thread = self._thread
        deleted = self._deleted()
        if deleted is not None:  # the stored run says why it is incomplete
            client.setdefault("warnings", []).append(deleted.message)
        if thread is None or not (thread.lock_waits or thread.stored_as_failed):
            return
        client["store"] = {
            "lock_waits": thread.lock_waits,
            "lock_waited_s": thread.waited_s,
            "stored_as_failed": len(thread.stored_as_failed),
        }
        warnings: list[str] = client.setdefault("warnings", [])
        if thread.lock_waits:
            warnings.append(
                f"the store was locked by another process {thread.lock_waits} time(s) during the run "
                f"({thread.waited_s:.1f} s in all); finished requests waited in memory meanwhile"
            )
        if thread.stored_as_failed:
            warnings.append(
                f"{len(thread.stored_as_failed)} request(s) stored as failed ({UNSTORABLE}); the first: "
                f"{thread.stored_as_failed[0]}"
            )


def _final_status(
    status: RunStatus, records: list[RequestRecord], write_error: GpuledgerError | None,
    interrupted: bool = False,
) -> RunStatus:
    """``complete`` becomes ``incomplete`` when requests are missing, ``failed`` when every one failed; a
    run interrupted before any request finished is ``cancelled`` (nothing was measured)."""
    if interrupted and not records:
        return "cancelled"
    if status != "complete":
        return status
    if write_error is not None:
        return "incomplete"
    if records and not any(r.ok for r in records):
        return "failed"
    return status


def _source(status: SourceStatus) -> TelemetrySource:
    return TelemetrySource(name=status.name, available=status.available, reason=status.reason,
                           devices=list(status.devices))
