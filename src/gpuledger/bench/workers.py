"""``bench --workers N``: the measured load offered by N processes, merged into one run.

One Python process (one event loop) tops out at some hundred thousand streamed tokens per second; a server
of eight GPUs serves more. With ``--workers N`` the runner (``bench.runner``) still does everything a run
does — probe, prompts, warm-up, the writer, telemetry, the summary — but each measured stage is sent by N
load processes (``bench.load_worker``): local processes (``multiprocessing``, spawned, each with its own
engine and event loop), or Ray actors when a cluster is given (``bench.cluster``). Each gets a share of the
stage (``split_stage``):

- ``concurrency C``: worker i keeps ``C_i`` in flight (C split as evenly as whole numbers allow), and sends
  its share of the stage's requests in proportion (largest remainder), as a block of consecutive indexes;
- ``rate R``: each worker sends Poisson arrivals at ``R / N`` (the sum of N independent Poisson processes
  of rate R/N is one of rate R) from its own seed (``seed + i × 1000003``), the cap split like C;
- a timed stage (``--duration``): worker i's requests are indexes ``i, i + N, i + 2N, …`` of the stage.

Request ``k`` gets the prompt a single process would have given it, so the run holds the same requests.

One clock: at start the coordinator asks each worker for its ``perf_counter()`` ``CLOCK_PINGS`` times and
keeps the reply with the shortest round trip: offset = midpoint of the round trip − the worker's reading
(± half the round trip). Every time a worker reports is moved by its offset onto the run's clock. A worker
on this machine (same boot id) whose measured offset is within its uncertainty reads the same
``CLOCK_MONOTONIC`` as the coordinator: its offset is 0. Both figures are kept in
``RunInfo.client["load_workers"]``.

The client record: each load process is one event loop, so the busiest one's CPU share and event-loop
demand stand as the client's figures (what the verdict's ``client_bound`` judges), each worker's are listed,
and the coordinator's own are kept beside them.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any, Protocol

from gpuledger.bench.drive import Drive
from gpuledger.bench.load_worker import Emit, Share, boot_id, child_main
from gpuledger.bench.writer import CLIENT_CPU_WARN_RATIO, RunWriter
from gpuledger.engines import GenResult
from gpuledger.errors import EngineError, UsageError
from gpuledger.kinds.text.spec import ServerSpec
from gpuledger.records import BenchSpec
from gpuledger.records.run import CLIENT_CORE_WARNING
from gpuledger.records.spec import ConcurrencyStage, RateStage, Stage, dump_spec
from gpuledger.workload.datasets import Prompt

MAX_WORKERS = 256
SEED_STRIDE = 1_000_003
CLOCK_PINGS = 9
OPEN_TIMEOUT_S = 120.0
REPLY_TIMEOUT_S = 30.0
EXIT_TIMEOUT_S = 10.0


# -- shares ------------------------------------------------------------------------------------------


def check_workers(spec: BenchSpec, workers: int) -> None:
    """``UsageError`` when the run cannot be spread over ``workers`` load processes."""
    if not 1 <= workers <= MAX_WORKERS:
        raise UsageError(f"--workers must be 1 to {MAX_WORKERS}, got {workers}")
    if workers == 1:
        return
    if not isinstance(spec, ServerSpec):
        raise UsageError(
            f"--workers is for runs against a server: --engine {spec.engine} computes in this process"
        )
    why = spec.single_process_reason()
    if why is not None:
        raise UsageError(f"--workers {workers} cannot share this load: {why}")
    for stage in spec.stages():
        cap = stage.in_flight()
        if cap is not None and cap < workers:
            flag = "--concurrency" if isinstance(stage, RateStage | ConcurrencyStage) else "the batch size"
            raise UsageError(
                f"--workers {workers} needs at least one request in flight per worker: {flag} of stage "
                f"{stage.stage} is {cap}"
            )


def _spread(total: int, weights: Sequence[int]) -> list[int]:
    """``total`` split in proportion to ``weights`` in whole numbers (largest remainder, ties to the
    first)."""
    whole = sum(weights)
    exact = [total * w / whole for w in weights]
    out = [int(x) for x in exact]
    order = sorted(range(len(weights)), key=lambda i: (out[i] - exact[i], i))
    for i in order[: total - sum(out)]:
        out[i] += 1
    return out


def split_stage(stage: Stage, count: int | None, workers: int, base: int, seed: int) -> list[Share]:
    """Each worker's share of ``stage`` (``count`` requests, None: timed), the stage's requests numbered
    from ``base`` (the module docstring says how)."""
    if isinstance(stage, ConcurrencyStage):
        inflight = _spread(stage.concurrency, [1] * workers)
        parts: list[Stage] = [stage.model_copy(update={"concurrency": c}) for c in inflight]
        weights = inflight
    elif isinstance(stage, RateStage):
        caps = _spread(stage.max_concurrency, [1] * workers) if stage.max_concurrency else [None] * workers
        parts = [
            stage.model_copy(update={"rate_requests_per_s": stage.rate_requests_per_s / workers,
                                     "max_concurrency": cap})
            for cap in caps
        ]
        weights = [1] * workers
    else:
        raise UsageError(f"--workers cannot share a stage released by {stage.RELEASE}")
    seeds = [seed + i * SEED_STRIDE for i in range(workers)]
    if count is None:
        return [Share(p, None, base + i, workers, s)
                for i, (p, s) in enumerate(zip(parts, seeds, strict=True))]
    counts = _spread(count, weights)
    firsts = [base + sum(counts[:i]) for i in range(workers)]
    return [Share(p, n, f, 1, s) for p, n, f, s in zip(parts, counts, firsts, seeds, strict=True)]


def _shift(res: GenResult, offset: float) -> None:
    """The worker's times onto the run's clock."""
    if offset:
        res.t_send += offset
        res.t_end += offset
        res.chunk_times = [t + offset for t in res.chunk_times]


# -- the links to the workers -------------------------------------------------------------------------


class WorkerLink(Protocol):
    """How the coordinator talks to one load process (a local process, a Ray actor)."""

    kind: str

    async def open(
        self, spec_doc: dict[str, Any], prompts: list[Prompt], max_in_flight: int | None, api_key: str | None
    ) -> dict[str, Any]: ...

    async def clock(self) -> float: ...

    async def stage(self, share: Share, deadline: float | None, on_result: Emit) -> tuple[int, list[str]]: ...

    def stop(self, cancel: bool) -> None: ...

    async def close(self) -> dict[str, Any]: ...

    async def shutdown(self) -> None: ...


class LocalLink:
    """A spawned local process running ``load_worker.child_main``: commands and results over a pipe,
    read by a thread that hands each message to the event loop."""

    kind = "local process"

    def __init__(self, index: int) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.index = index
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=child_main, args=(child,), name=f"gpuledger-load-{index}",
                                 daemon=True)
        self._proc.start()
        child.close()
        self._loop = asyncio.get_running_loop()
        self._inbox: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
        threading.Thread(target=self._read, name=f"gpuledger-load-{index}-reader", daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                msg = self._conn.recv()
            except (EOFError, OSError):
                msg = ("eof",)
            try:
                self._loop.call_soon_threadsafe(self._inbox.put_nowait, msg)
            except RuntimeError:  # the loop is closed: nobody is listening any more
                return
            if msg[0] == "eof":
                return

    def _send(self, *msg: Any) -> None:
        try:
            self._conn.send(msg)
        except (OSError, ValueError) as exc:
            raise EngineError(f"load worker {self.index} cannot be reached: {exc}") from exc

    def _problem(self, msg: tuple[Any, ...]) -> EngineError | None:
        if msg[0] == "error":
            return EngineError(f"load worker {self.index}: {msg[1]}")
        if msg[0] == "eof":
            self._proc.join(1.0)
            return EngineError(f"load worker {self.index} (pid {self._proc.pid}) exited "
                               f"(exit code {self._proc.exitcode})")
        return None

    async def _expect(self, kind: str, timeout_s: float) -> tuple[Any, ...]:
        try:
            msg = await asyncio.wait_for(self._inbox.get(), timeout_s)
        except TimeoutError:
            raise EngineError(f"load worker {self.index} did not answer within {timeout_s:g} s") from None
        problem = self._problem(msg)
        if problem is not None:
            raise problem
        if msg[0] != kind:
            raise EngineError(f"load worker {self.index} answered {msg[0]!r}, not {kind!r}")
        return msg

    async def open(
        self, spec_doc: dict[str, Any], prompts: list[Prompt], max_in_flight: int | None, api_key: str | None
    ) -> dict[str, Any]:
        self._send("open", spec_doc, prompts, max_in_flight, api_key)
        identity: dict[str, Any] = (await self._expect("opened", OPEN_TIMEOUT_S))[1]
        return identity

    async def clock(self) -> float:
        self._send("clock")
        return float((await self._expect("clock", REPLY_TIMEOUT_S))[1])

    async def stage(self, share: Share, deadline: float | None, on_result: Emit) -> tuple[int, list[str]]:
        self._send("stage", share, deadline)
        while True:
            msg = await self._inbox.get()
            if msg[0] == "result":
                on_result(msg[1], msg[2])
                continue
            problem = self._problem(msg)
            if problem is not None:
                raise problem
            return int(msg[1]), list(msg[2])

    def stop(self, cancel: bool) -> None:
        with contextlib.suppress(EngineError):
            self._send("stop", cancel)

    async def close(self) -> dict[str, Any]:
        self._send("close")
        record: dict[str, Any] = (await self._expect("closed", REPLY_TIMEOUT_S))[1]
        return record

    async def shutdown(self) -> None:
        proc = self._proc
        with contextlib.suppress(OSError, ValueError):
            self._conn.send(("close",))  # closes its engine, if it is still there to hear it
        await asyncio.to_thread(proc.join, EXIT_TIMEOUT_S)
        if proc.is_alive():
            proc.kill()
            await asyncio.to_thread(proc.join, EXIT_TIMEOUT_S)
        self._conn.close()


# -- the pool ----------------------------------------------------------------------------------------


@dataclass
class _Member:
    link: WorkerLink
    index: int
    identity: dict[str, Any] = field(default_factory=dict)
    offset: float = 0.0
    measured_offset: float = 0.0
    rtt: float = 0.0
    same_clock: bool = False
    sent: int = 0
    closed: dict[str, Any] | None = None

    def record(self) -> dict[str, Any]:
        cpu = (self.closed or {}).get("cpu") or {}
        return {
            "worker": self.index,
            "kind": self.link.kind,
            **{k: self.identity.get(k) for k in ("pid", "host")},
            "requests_sent": self.sent,
            "clock_offset_s": self.offset,
            "clock_offset_measured_s": self.measured_offset,
            "clock_uncertainty_s": self.rtt / 2,
            "clock": "the coordinator's CLOCK_MONOTONIC (same machine)" if self.same_clock
            else "offset measured at start (shortest of the round trips)",
            **cpu,
        }


class WorkerPool:
    """The load processes of one run (the module docstring says how they share it)."""

    def __init__(self, links: Sequence[WorkerLink]) -> None:
        self.members = [_Member(link, i) for i, link in enumerate(links)]
        self.finished = False

    @property
    def kind(self) -> str:
        return self.members[0].link.kind if self.members else "none"

    async def open(self, spec: BenchSpec, prompts: list[Prompt], stages: Sequence[Stage],
                   api_key: str | None) -> None:
        """Open every worker's engine and measure its clock; ``EngineError`` when one cannot."""
        n = len(self.members)
        caps = [sh.stage.in_flight() for st in stages for sh in split_stage(st, None, n, 0, 0)]
        cap = None if not caps or None in caps else max(c for c in caps if c is not None)
        doc = dump_spec(spec, keep_secrets=True)  # to this run's own load processes: the URL whole
        identities = await asyncio.gather(*(m.link.open(doc, prompts, cap, api_key) for m in self.members))
        here, boot = socket.gethostname(), boot_id()
        for m, identity in zip(self.members, identities, strict=True):
            m.identity = identity
            best: tuple[float, float] | None = None
            for _ in range(CLOCK_PINGS):
                t0 = perf_counter()
                theirs = await m.link.clock()
                t1 = perf_counter()
                if best is None or t1 - t0 < best[0]:
                    best = (t1 - t0, (t0 + t1) / 2 - theirs)
            assert best is not None
            m.rtt, m.measured_offset = best
            m.same_clock = (boot is not None and identity.get("boot_id") == boot
                            and identity.get("host") == here and abs(m.measured_offset) <= m.rtt / 2 + 1e-6)
            m.offset = 0.0 if m.same_clock else m.measured_offset

    async def drive(
        self, ctx: Drive, stage: Stage, count: int | None, deadline: float | None, stop: asyncio.Event,
        interrupted: Sequence[str], base: int,
    ) -> tuple[int, int]:
        """Run one stage over the workers; every finished request goes to ``ctx.on_result`` on the run's
        clock. Returns (the next stage's first index, the requests sent)."""
        shares = split_stage(stage, count, len(self.members), base, ctx.seed)

        def deliver(m: _Member) -> Emit:
            def on(res: GenResult, scheduled: float | None) -> None:
                _shift(res, m.offset)
                if scheduled is not None:
                    ctx.scheduled[res.index] = scheduled + m.offset
                ctx.engine.chunks_seen += len(res.chunk_times)  # the progress display's live count
                ctx.on_result(res)

            return on

        runs = [
            asyncio.create_task(
                m.link.stage(sh, None if deadline is None else deadline - m.offset, deliver(m)))
            for m, sh in zip(self.members, shares, strict=True)
        ]
        stopper = asyncio.create_task(stop.wait())
        stopped = False
        try:
            pending: set[asyncio.Task[Any]] = set(runs)
            while pending:
                done, pending = await asyncio.wait(pending | ({stopper} if not stopped else set()),
                                                   return_when=asyncio.FIRST_COMPLETED)
                pending.discard(stopper)
                failed = [t for t in done if t is not stopper and t.exception() is not None]
                if (stopper in done or failed) and not stopped:
                    stopped = True
                    for m in self.members:
                        m.link.stop(cancel=bool(interrupted) or bool(failed))
                if failed:
                    await asyncio.wait(pending, timeout=REPLY_TIMEOUT_S)
                    raise failed[0].exception() or EngineError("a load worker failed")
        finally:
            stopper.cancel()
            for t in runs:
                t.cancel()
        outcomes = [t.result() for t in runs]
        for m, (sent, notes) in zip(self.members, outcomes, strict=True):
            m.sent += sent
            ctx.notes.extend(n for n in notes if n not in ctx.notes)
        sent_total = sum(sent for sent, _ in outcomes)
        if count is None:
            return base + len(self.members) * max(sent for sent, _ in outcomes), sent_total
        return base + sum(sh.count or 0 for sh in shares), sent_total

    async def finish(self) -> list[str]:
        """Close every worker's engine (their CPU records are kept); the warnings their engines noted."""
        if self.finished:
            return []
        self.finished = True
        warnings: list[str] = []
        for m in self.members:
            m.closed = await m.link.close()
            after = m.closed.get("after_run") or {}
            warnings.extend(w for w in after.get("warnings", []) if w not in warnings)
        return warnings

    async def shutdown(self) -> None:
        """Make sure every worker process is gone (after ``finish``, or after a failure)."""
        if not self.finished:
            self.finished = True
            for m in self.members:
                m.link.stop(cancel=True)
        await asyncio.gather(*(m.link.shutdown() for m in self.members), return_exceptions=True)

    def client_record(self, coordinator: dict[str, Any]) -> dict[str, Any]:
        """The run's client record: the busiest worker's figures as the client's, every worker's and the
        coordinator's (``coordinator``: what the run writer measured of this process) beside them."""
        workers = [m.record() for m in self.members]
        keys = ("cpu_user_s", "cpu_system_s", "wall_s", "cpu_util_ratio", "event_loop_busy_ratio",
                "event_loop_wait_ratio")
        out = {k: v for k, v in coordinator.items() if k not in (*keys, "warnings")}
        measured = [w for w in workers if "cpu_util_ratio" in w]
        if measured:
            def demand(w: dict[str, Any]) -> float:
                return max(float(w["cpu_util_ratio"]), float(w.get("event_loop_busy_ratio", 0.0)))

            busiest = max(measured, key=demand)
            out.update({k: busiest[k] for k in keys if k in busiest})
            ratio = demand(busiest)
            if ratio >= CLIENT_CPU_WARN_RATIO:
                out["warnings"] = [
                    f"load worker {busiest['worker']} used {ratio:.0%} {CLIENT_CORE_WARNING}: it may have "
                    "limited the run"
                ]
        out["load_workers"] = {
            "count": len(workers),
            "kind": self.kind,
            "figures": "the client's CPU figures are the busiest load process's (each is one event loop: one "
            "core is its ceiling)",
            "workers": workers,
            "coordinator": {k: coordinator[k] for k in keys if k in coordinator},
        }
        return out


class PoolWriter(RunWriter):
    """The run writer of a run whose load comes from a ``WorkerPool``: the client record is the pool's."""

    pool: WorkerPool | None = None

    def client_usage(self) -> dict[str, Any]:
        out = super().client_usage()
        return self.pool.client_record(out) if self.pool is not None else out


async def start_pool(
    spec: BenchSpec, prompts: list[Prompt], stages: Sequence[Stage], workers: int, cluster: str | None,
    api_key: str | None,
) -> WorkerPool:
    """``workers`` load processes, opened and on the run's clock: Ray actors on ``cluster``, else local."""
    check_workers(spec, workers)
    if cluster is not None:
        from gpuledger.bench.cluster import load_links

        links: list[WorkerLink] = list(load_links(cluster, workers))
    else:
        links = [LocalLink(i) for i in range(workers)]
    pool = WorkerPool(links)
    try:
        await pool.open(spec, prompts, stages, api_key)
    except BaseException:
        await pool.shutdown()
        raise
    return pool
