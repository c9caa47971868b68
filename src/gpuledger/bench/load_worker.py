"""One load process of ``bench --workers N``: its own engine and event loop, driving its share of each stage
with the ordinary drivers (``bench.drive``) and handing every finished request back on its own clock.

``LoadWorker`` is the process's side; ``bench.workers`` is the coordinator's. The same worker runs in a
local process (``child_main``: commands and results over a ``multiprocessing`` pipe) or as a Ray actor
(``bench.cluster``). A share (``Share``) says which requests are this worker's: local request ``j`` of the
stage is the run's request ``first + stride × j`` and gets the prompt the single-process run would give that
index (``prompts[index % len(prompts)]``), so the merged run holds the same requests with the same prompts.

Times a worker reports are its own ``time.perf_counter()``; the coordinator puts them on the run's clock with
the offset it measured at start. A stop without ``cancel`` ends the sends (requests in flight finish and are
reported); with ``cancel`` (Ctrl-C) the requests in flight are cancelled and never reported, as in one
process. The worker ignores SIGINT itself: the coordinator decides.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from time import perf_counter
from typing import Any

import psutil

from gpuledger.bench.drive import Drive, Feed, drive
from gpuledger.engines import Engine, EngineOptions, GenResult, make_engine
from gpuledger.errors import GpuledgerError
from gpuledger.records.spec import Stage, load_spec
from gpuledger.workload.datasets import Prompt

Emit = Callable[[GenResult, float | None], None]


@dataclass(frozen=True, slots=True)
class Share:
    """One worker's part of a stage: the stage as it runs there (its share of the concurrency or rate, the
    stage's name kept), how many requests (None: until the deadline), which run indexes they are
    (``first + stride × j``) and the seed of its arrivals."""

    stage: Stage
    count: int | None
    first: int
    stride: int
    seed: int


def boot_id() -> str | None:
    """This machine's boot id (Linux): two processes that share it read one ``CLOCK_MONOTONIC``."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip() or None
    except OSError:
        return None


def _schedstat() -> tuple[float, float] | None:
    """(seconds on a CPU, seconds waiting for one) of the calling thread (Linux), else None."""
    try:
        with open("/proc/thread-self/schedstat", encoding="ascii") as f:
            run_ns, wait_ns, *_ = f.read().split()
        return int(run_ns) / 1e9, int(wait_ns) / 1e9
    except (OSError, ValueError):
        return None


def _prompts_of(prompts: Sequence[Prompt], share: Share) -> Iterator[Prompt]:
    j = 0
    while True:
        yield prompts[(share.first + share.stride * j) % len(prompts)]
        j += 1


@dataclass
class LoadWorker:
    """The worker's state: its engine, the prompts of the run, what it measured of its own CPU."""

    engine: Engine | None = None
    prompts: list[Prompt] = field(default_factory=list)
    stop_event: asyncio.Event | None = None
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    cancelled: bool = False
    requests: int = 0
    _cpu0: tuple[float, float, float, tuple[float, float] | None] | None = None
    _cpu1: tuple[float, float, float, tuple[float, float] | None] | None = None

    async def open(
        self, spec_doc: dict[str, Any], prompts: list[Prompt], max_in_flight: int | None, api_key: str | None
    ) -> dict[str, Any]:
        """Make and open the engine the spec names (the server is probed again, before the window)."""
        spec = load_spec(spec_doc)
        self.engine = make_engine(spec, EngineOptions(api_key=api_key))
        await self.engine.open(max_in_flight)
        self.prompts = list(prompts)
        return {"pid": os.getpid(), "host": socket.gethostname(), "boot_id": boot_id()}

    def clock(self) -> float:
        return perf_counter()

    def _cpu(self) -> tuple[float, float, float, tuple[float, float] | None]:
        t = psutil.Process().cpu_times()
        return perf_counter(), t.user, t.system, _schedstat()

    async def run_stage(self, share: Share, deadline: float | None, emit: Emit) -> tuple[int, list[str]]:
        """Send this worker's share of a stage; every finished request goes to ``emit`` (with its
        scheduled send time, open-loop loads) as the run's request ``first + stride × j``. Returns how many
        requests were sent and the driver's notes."""
        engine = self.engine
        if engine is None:
            raise GpuledgerError("load worker used before open()")
        if self._cpu0 is None:
            self._cpu0 = self._cpu()
        stop = self.stop_event if self.stop_event is not None else self.begin_stage()

        def on_result(res: GenResult) -> None:
            scheduled = ctx.scheduled.pop(res.index, None)
            res.index = share.first + share.stride * res.index
            self.requests += 1
            emit(res, scheduled)

        ctx = Drive(engine, on_result, share.seed, self.tasks)
        feed = Feed(_prompts_of(self.prompts, share), share.stage, share.count, deadline, stop, 0)
        try:
            await drive(ctx, share.stage, feed)
        except asyncio.CancelledError:
            if not self.cancelled:
                raise
        finally:
            self._cpu1 = self._cpu()
            self.stop_event = None
        return feed.next_index, list(ctx.notes)

    def begin_stage(self) -> asyncio.Event:
        """A new stage is coming: a stop said from now on is the new stage's (call before ``run_stage`` is
        scheduled, so a stop that arrives before it starts is not lost)."""
        self.stop_event = asyncio.Event()
        self.cancelled = False
        return self.stop_event

    def stop(self, cancel: bool) -> None:
        """No new sends; ``cancel``: the requests in flight are cancelled too (Ctrl-C)."""
        self.cancelled = self.cancelled or cancel
        if self.stop_event is not None:
            self.stop_event.set()
        if cancel:
            for t in list(self.tasks):
                t.cancel()

    async def close(self) -> dict[str, Any]:
        """Close the engine; what it noticed (``after_run``) and this process's CPU over its stages."""
        after: dict[str, Any] = {}
        if self.engine is not None:
            after = await self.engine.after_run()
            await self.engine.close()
            self.engine = None
        return {"after_run": after, "cpu": self._cpu_record(), "requests": self.requests}

    def _cpu_record(self) -> dict[str, Any]:
        if self._cpu0 is None or self._cpu1 is None:
            return {}
        (w0, u0, s0, l0), (w1, u1, s1, l1) = self._cpu0, self._cpu1
        wall = max(w1 - w0, 1e-9)
        out: dict[str, Any] = {
            "cpu_user_s": u1 - u0, "cpu_system_s": s1 - s0, "wall_s": wall,
            "cpu_util_ratio": (u1 - u0 + s1 - s0) / wall,
        }
        if l0 is not None and l1 is not None:
            run, wait = l1[0] - l0[0], l1[1] - l0[1]
            out["event_loop_busy_ratio"] = min(1.0, max(0.0, (run + wait) / wall))
            out["event_loop_wait_ratio"] = min(1.0, max(0.0, wait / wall))
        return out


# -- a local process -------------------------------------------------------------------------------------


def child_main(conn: Connection) -> None:
    """The entry point of a local load process (``multiprocessing``, spawned): serve the coordinator's
    commands on ``conn`` until it says ``close`` or goes away."""
    with contextlib.suppress(ValueError, OSError):
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the coordinator, which stops us
    asyncio.run(_serve(conn))


async def _serve(conn: Connection) -> None:
    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()

    def read() -> None:
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                msg = ("close",)
            loop.call_soon_threadsafe(inbox.put_nowait, msg)
            if msg[0] == "close":
                return

    threading.Thread(target=read, name="gpuledger-load-inbox", daemon=True).start()
    worker = LoadWorker()
    stage: asyncio.Task[None] | None = None

    def send(*msg: Any) -> None:
        with contextlib.suppress(OSError):
            conn.send(msg)

    async def run_stage(share: Share, deadline: float | None) -> None:
        try:
            sent, notes = await worker.run_stage(share, deadline, lambda r, s: send("result", r, s))
        except GpuledgerError as exc:
            send("error", exc.message)
            return
        except Exception as exc:  # a bug: the coordinator must hear of it, not wait for the stage
            send("error", f"load worker failed: {type(exc).__name__}: {exc}")
            raise
        send("stage_done", sent, notes)

    while True:
        msg = await inbox.get()
        kind = msg[0]
        if kind == "open":
            try:
                send("opened", await worker.open(*msg[1:]))
            except GpuledgerError as exc:
                send("error", exc.message)
            except Exception as exc:
                send("error", f"load worker failed to open: {type(exc).__name__}: {exc}")
                raise
        elif kind == "clock":
            send("clock", worker.clock())
        elif kind == "stage":
            worker.begin_stage()
            stage = asyncio.create_task(run_stage(msg[1], msg[2]))
        elif kind == "stop":
            worker.stop(bool(msg[1]))
        elif kind == "close":
            if stage is not None and not stage.done():
                worker.stop(True)
                with contextlib.suppress(asyncio.CancelledError):
                    await stage
            send("closed", await worker.close())
            return
