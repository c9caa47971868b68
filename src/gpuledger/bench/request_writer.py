"""The store writer thread of ``RunWriter`` (``gpuledger.bench.writer``): finished requests reach the
store in batches, one transaction each, without stalling the measuring event loop.

What it guarantees (docs/contracts.md, "What is stored when the store is locked or a value is out of
range"): a store locked by another process is retried while the run lasts, with the finished requests
kept in memory up to ``BACKLOG_LIMIT_BYTES``; a request the store cannot keep as it is (a count outside
0 … 2³¹−1, a non-finite time) is stored as failed with the reason, without taking the rest of its batch
with it; a run deleted from under the writer (``gpuledger delete --force``) is stored again under its id
(``restore``) and the writes go on, what went with the deletion counted (``lost``); anything else is the
run's failure (``StoreThread.error``), never a dead thread.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from gpuledger.errors import GpuledgerError, InvalidInputError, NotFoundError, StoreError
from gpuledger.records import RequestRecord, RunInfo, TelemetrySample
from gpuledger.store.engine import StoreLockedError
from gpuledger.store.exchange import request_problems, storable

HEARTBEAT_S = 30.0
# How long the writer thread waits after a request finishes before committing it (and whatever
# else finished meanwhile): long enough for the client to send its next request undisturbed.
WRITE_SETTLE_S = 0.005
_STOP = object()


class StoreLike(Protocol):
    """The part of ``gpuledger.store.Store`` the writer uses (see docs/contracts.md)."""

    def create_run(self, info: RunInfo) -> str: ...

    def add_requests(
        self, run_id: str, records: list[RequestRecord], *, lock_wait_s: float | None = None
    ) -> None: ...

    def add_telemetry(
        self, run_id: str, samples: list[TelemetrySample], *, lock_wait_s: float | None = None
    ) -> None: ...

    def update_run(self, run_id: str, *, lock_wait_s: float | None = None, **fields: Any) -> None: ...

    def heartbeat(self, run_id: str, *, lock_wait_s: float | None = None) -> None: ...

    def get_requests(self, id_or_prefix: str) -> list[RequestRecord]: ...

    def get_run(self, id_or_prefix: str) -> RunInfo: ...


# One write attempt waits this long for another process's lock on the store before the writer thread
# looks at its queue again; attempts repeat (with a pause growing to RETRY_MAX_S) while the run lasts.
LOCK_ATTEMPT_S = 1.0
RETRY_MIN_S = 0.05
RETRY_MAX_S = 1.0
# Finished requests kept in memory while the store is locked, estimated as below; beyond it the run stops
# (writer.failed) and the final flush still saves what it can.
BACKLOG_LIMIT_BYTES = 256 * 2**20
_BYTES_PER_REQUEST = 512
_BYTES_PER_CHUNK = 32  # a float in a list, and an int when the chunk's token count is kept
# At most this many requests per transaction when a backlog is written.
MAX_BATCH = 2000
# The prefix of the error of a request stored without the values the store cannot keep.
UNSTORABLE = "values the store cannot keep"
# How many times a run deleted from under its writer is stored again before that is the run's failure.
MAX_RESTORES = 3

Warn = Callable[[str], None]


def _record_bytes(r: RequestRecord) -> int:
    chunks = len(r.chunk_times) + (len(r.chunk_tokens) if r.chunk_tokens else 0)
    return _BYTES_PER_REQUEST + _BYTES_PER_CHUNK * chunks + (len(r.error) if r.error else 0)


class StoreThread(threading.Thread):
    """Writes queued requests in batches, one transaction each; heartbeats while idle.

    It never dies silently: a store that is locked by another process is retried while the run lasts
    (``lock_waits``, ``waited_s``), a request the store cannot keep as it is is stored as failed with
    the reason (``stored_as_failed``), and anything else is ``error``, the run's failure."""

    def __init__(self, store: StoreLike, run_id: str, warn: Warn, backlog_limit_bytes: int,
                 restore: Callable[[], None] | None = None) -> None:
        super().__init__(name="gpuledger-store-writer", daemon=True)
        self.store = store
        self.run_id = run_id
        self.warn = warn
        self.backlog_limit_bytes = backlog_limit_bytes
        # Stores the run again under its id when it was deleted from under the writer (RunWriter's).
        self.restore = restore
        self.restores = 0
        self.lost = 0  # finished requests that were saved, then deleted with the run
        self.q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.pending: list[RequestRecord] = []
        self.pending_bytes = 0
        # The run's failure. ``fatal``: nothing more can be written; else (the backlog bound) the final
        # flush still tries.
        self.error: GpuledgerError | None = None
        self.fatal = False
        self.added = 0
        self._added_lock = threading.Lock()
        self.written = 0
        self.stored_as_failed: list[str] = []
        self.last_lock: StoreLockedError | None = None
        self.lock_waits = 0
        self.waited_s = 0.0
        self.settle_s = WRITE_SETTLE_S
        self.deadline: float | None = None  # set by stop(): when the final flush gives up
        self._locked_since: float | None = None
        self._retry_at = 0.0
        self._pause = RETRY_MIN_S
        self._stopping = False
        self._warned_lock = False

    def add(self, record: RequestRecord) -> None:
        """Queue a finished request; returns at once (thread-safe)."""
        with self._added_lock:
            self.added += 1
        self.q.put(record)

    def stop(self, flush_s: float) -> None:
        """Write what is queued, for at most ``flush_s`` more, then end."""
        self.deadline = time.monotonic() + flush_s
        self.q.put(_STOP)

    @property
    def unsaved(self) -> int:
        """Finished requests that were given to the writer and are not in the store (nor were, before a
        deletion of the run took them: ``lost``)."""
        return self.added - self.written - self.lost

    def run(self) -> None:
        try:
            self._loop()
        except Exception as exc:  # noqa: BLE001 - fault boundary: the run's failure, raised by finish()
            what = f"{type(exc).__name__}: {exc}"
            failure = StoreError(f"the store writer stopped on an unexpected error: {what}")
            failure.__cause__ = exc
            self._fail(failure, fatal=True)

    def _loop(self) -> None:
        while True:
            got = self._collect(self._wait_s())
            if self._stopping and self._finished():
                return
            if not self.pending:
                if not got and not self._stopping:
                    self._heartbeat()
                continue
            if self.fatal or time.monotonic() < self._retry_at:
                continue
            if got and self._locked_since is None and not self._stopping and self.settle_s > 0:
                # A request just finished, so the client is sending the next one right now: let that
                # send go out before this thread takes the interpreter for a commit.
                time.sleep(self.settle_s)
                self._collect(0.0)
            self._write()

    def _finished(self) -> bool:
        if not self.pending or self.fatal:
            return True
        return self.deadline is not None and time.monotonic() >= self.deadline

    def _wait_s(self) -> float:
        """How long to wait for the next finished request before doing something else."""
        now = time.monotonic()
        if self.pending and not self.fatal:
            until = self._retry_at if self.deadline is None else min(self._retry_at, self.deadline)
            return max(0.0, until - now)
        return 0.0 if self._stopping else HEARTBEAT_S

    def _collect(self, wait_s: float) -> bool:
        """Move what is queued to ``pending`` (waiting up to ``wait_s`` for the first); False if nothing."""
        items: list[Any] = []
        try:
            items.append(self.q.get(timeout=wait_s) if wait_s > 0 else self.q.get_nowait())
            while True:
                items.append(self.q.get_nowait())
        except queue.Empty:
            pass
        for item in items:
            if item is _STOP:
                self._stopping = True
            else:
                self.pending.append(item)
                self.pending_bytes += _record_bytes(item)
        if self._locked_since is not None:
            self._check_backlog()
        return bool(items)

    def _heartbeat(self) -> None:
        if self.error is not None:
            return
        try:
            self.store.heartbeat(self.run_id, lock_wait_s=LOCK_ATTEMPT_S)
        except StoreLockedError:
            pass  # only a sign of life: the next write refreshes it
        except NotFoundError:
            self.restored()
        except GpuledgerError as exc:
            self._fail(exc, fatal=True)

    def _attempt_wait_s(self) -> float:
        if self.deadline is None:
            return LOCK_ATTEMPT_S
        return min(LOCK_ATTEMPT_S, max(self.deadline - time.monotonic(), RETRY_MIN_S))

    def _write(self) -> None:
        batch = self.pending[:MAX_BATCH]
        try:
            self.store.add_requests(self.run_id, batch, lock_wait_s=self._attempt_wait_s())
        except StoreLockedError as exc:
            self._locked(exc)
            return
        except NotFoundError:
            self.restored()  # deleted from under the writer: the next pass writes the batch again
            return
        except InvalidInputError:
            self._store_as_failed(batch)  # the next pass writes the batch with the bad ones replaced
            return
        except GpuledgerError as exc:
            self._fail(exc, fatal=True)
            return
        del self.pending[: len(batch)]
        self.pending_bytes -= sum(_record_bytes(r) for r in batch)
        self.written += len(batch)
        if self._locked_since is not None:
            self.waited_s += time.monotonic() - self._locked_since
            self._locked_since = None
            self._pause = RETRY_MIN_S

    def restored(self) -> bool:
        """The run is gone from the store (``gpuledger delete --force`` while it was written): store it
        again under its id (``restore``) and count the requests that went with it (``lost``); False, and
        the run's failure, when it cannot be (no ``restore``, it failed, it was deleted again and again)."""
        if self.restore is None or self.restores >= MAX_RESTORES:
            self._fail(StoreError(f"run {self.run_id} was deleted while it was being written"), fatal=True)
            return False
        try:
            self.restore()
        except GpuledgerError as exc:
            self._fail(StoreError(f"run {self.run_id} was deleted while it was being written and could not "
                                  f"be stored again: {exc.message}"), fatal=True)
            return False
        self.restores += 1
        self.lost += self.written
        self.written = 0
        self._say(f"run {self.run_id} was deleted while it was being written (gpuledger delete --force): "
                  f"stored again under its id; the {self.lost:,} finished requests saved before went with it")
        return True

    def _locked(self, exc: StoreLockedError) -> None:
        now = time.monotonic()
        self.last_lock = exc
        if self._locked_since is None:
            self._locked_since = now
            self.lock_waits += 1
        if not self._warned_lock:
            self._warned_lock = True
            self._say(
                f"waiting for the store: {exc.message}; {len(self.pending)} finished requests are kept in "
                f"memory (up to {self.backlog_limit_bytes / 2**20:g} MiB) and saved as soon as it is free"
            )
        self._check_backlog()
        self._retry_at = now + self._pause
        self._pause = min(self._pause * 2, RETRY_MAX_S)

    def _check_backlog(self) -> None:
        if self.error is not None or self.pending_bytes <= self.backlog_limit_bytes:
            return
        why = self.last_lock.message if self.last_lock is not None else "the store is locked"
        waited = time.monotonic() - (self._locked_since or time.monotonic())
        self._fail(
            StoreError(
                f"{why}; after {waited:.0f} s, {len(self.pending)} finished requests (about "
                f"{self.pending_bytes / 2**20:.0f} MiB) waited in memory, more than the "
                f"{self.backlog_limit_bytes / 2**20:g} MiB kept: the run was stopped",
                hint="find what holds the store's lock (another gpuledger, a backup, an open sqlite3 shell)",
            ),
            fatal=False,
        )

    def _store_as_failed(self, batch: list[RequestRecord]) -> None:
        """Replace each record of ``batch`` the store cannot keep by one it can, failed with the reason."""
        replaced = 0
        for k, r in enumerate(batch):
            if not request_problems(r):
                continue
            try:
                fixed, problems = storable(r)
            except InvalidInputError as exc:
                self._fail(StoreError(f"a finished request could not be stored: {exc.message}"), fatal=True)
                return
            why = "; ".join(f"{name} {reason}" for name, reason in problems)
            note = f"{UNSTORABLE}: {why}"
            fixed.error = note if fixed.error is None else f"{fixed.error}; {note}"
            self.pending[k] = fixed
            self.pending_bytes += _record_bytes(fixed) - _record_bytes(r)
            replaced += 1
            self.stored_as_failed.append(f"request {r.index}: {why}")
            if len(self.stored_as_failed) == 1:
                self._say(f"request {r.index} is stored as failed: {note}")
        if not replaced:  # refused for a reason no record explains: do not try again forever
            self._fail(StoreError(f"the store refused requests of run {self.run_id}"), fatal=True)

    def _fail(self, exc: GpuledgerError, *, fatal: bool) -> None:
        if self.error is None:
            self.error = exc
        self.fatal = self.fatal or fatal

    def _say(self, message: str) -> None:
        try:
            self.warn(message)
        except OSError:
            pass  # the warning could not be printed (stderr closed): it is also kept with the run
