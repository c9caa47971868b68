"""The asyncio bench runner: drives an HTTP engine with a dataset and a load pattern, and records the
measured window through :class:`gpuledger.bench.writer.RunWriter`.

Order of work: open the engine (probe the server — an unreachable server raises ``EngineError`` and
no run is created) → build the prompts (the server's tokenizer cuts exact lengths when it has one) →
warmup (not recorded) → create the run and start the window → the stages → server state → summary.
SIGINT / SIGTERM stop new sends, cancel the requests in flight (they never finished, so they are not
recorded) and save the run as ``incomplete`` with every finished request; the run is returned with
``summary["interrupted"]`` set (the CLI then exits 130). A signal before the window raises
``Interrupted``: no run was created.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import math
import os
import signal
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter
from typing import Any

from gpuledger.bench.progress import BenchProgress
from gpuledger.bench.server_state import ServerStateSampler, summarize_state
from gpuledger.bench.writer import RunWriter, StoreLike
from gpuledger.engines import DEFAULT_BASE_URLS, ENDPOINTS, Engine, GenRequest, GenResult, make_engine
from gpuledger.engines.base import CANNOT_CONNECT, ServerInfo
from gpuledger.engines.http import HttpEngine
from gpuledger.engines.server_metrics import STATE_SERIES
from gpuledger.errors import EngineError, GpuledgerError, Interrupted, UsageError
from gpuledger.records import RunInfo, RunStatus
from gpuledger.urls import redact_url
from gpuledger.workload.datasets import DEFAULT_MAX_TOKENS, DatasetSpec, Prompt, build_dataset
from gpuledger.workload.load import LoadPattern, Stage, poisson_gaps

DEFAULT_NUM_REQUESTS = 64
GIL_SWITCH_S = 0.0005
# A run stops (kept as incomplete) when this many requests in a row (at least 2x the concurrency)
# could not even connect: the server went away, and every further request would fail the same way.
GONE_AFTER_FAILED_CONNECTS = 20
DURATION_PROMPT_POOL = 256


@dataclass(slots=True)
class BenchConfig:
    """Everything ``gpuledger bench`` was asked to do (stored in ``RunInfo.config``, minus secrets)."""

    engine: str = "openai"
    base_url: str | None = None
    model: str | None = None
    endpoint: str | None = None
    dataset: DatasetSpec = field(default_factory=DatasetSpec)
    load: LoadPattern = field(default_factory=LoadPattern)
    num_requests: int | None = None
    duration_s: float | None = None
    warmup: int = 0
    slo: dict[str, float] = field(default_factory=dict)
    label: str = ""
    telemetry: bool = True
    telemetry_interval_s: float = 0.1
    request_timeout_s: float = 300.0
    api_key_env: str = "OPENAI_API_KEY"
    seed: int = 0
    server_metrics: bool = False  # opt-in (--server-metrics): docs/bench.md says why
    server_metrics_interval_s: float | None = None  # None: read /metrics only where the server is idle
    like: dict[str, Any] | None = None  # {"run_id", "overridden"}: the workload was copied (bench --like)

    def validate(self) -> None:
        """Every bad combination raises ``UsageError`` (exit 2) with one line."""
        if self.engine not in ENDPOINTS:
            raise UsageError(f"--engine must be openai, ollama or torch, got {self.engine!r}")
        if self.endpoint is not None and self.endpoint not in ENDPOINTS[self.engine]:
            raise UsageError(
                f"--endpoint {self.endpoint} is not an endpoint of --engine {self.engine} "
                f"(choose {' or '.join(ENDPOINTS[self.engine])})"
            )
        if self.num_requests is not None and self.duration_s is not None:
            raise UsageError("give --num-requests or --duration, not both")
        if self.num_requests is not None and self.num_requests < 1:
            raise UsageError(f"--num-requests must be at least 1, got {self.num_requests}")
        if self.duration_s is not None and (not math.isfinite(self.duration_s) or self.duration_s <= 0):
            raise UsageError(f"--duration must be a positive number of seconds, got {self.duration_s}")
        if self.warmup < 0:
            raise UsageError(f"--warmup must be 0 or more, got {self.warmup}")
        if not (self.request_timeout_s > 0 and math.isfinite(self.request_timeout_s)):
            raise UsageError(
                f"--request-timeout must be a positive number of seconds, got {self.request_timeout_s}"
            )
        interval = self.server_metrics_interval_s
        if interval is not None and not (interval > 0 and math.isfinite(interval)):
            raise UsageError(
                "--server-metrics-interval must be a positive number of seconds, got "
                f"{self.server_metrics_interval_s}"
            )
        if not (self.telemetry_interval_s > 0 and math.isfinite(self.telemetry_interval_s)):
            raise UsageError(
                f"--telemetry-interval must be a positive number of seconds, got {self.telemetry_interval_s}"
            )
        self.load.validate()
        self.dataset.validate()

    @property
    def url(self) -> str:
        return self.base_url or DEFAULT_BASE_URLS[self.engine]

    def requests_per_stage(self) -> int | None:
        if self.duration_s is not None:
            return None
        return self.num_requests or DEFAULT_NUM_REQUESTS

    def to_dict(self) -> dict[str, Any]:
        d = self.dataset
        return {
            "engine": self.engine,
            "base_url": redact_url(self.url),
            "model": self.model,
            "endpoint": self.endpoint or ENDPOINTS[self.engine][0],
            "dataset": {
                "name": d.name,
                "path": str(d.path) if d.path else None,
                "input_len": d.input_len,
                "output_len": d.output_len,
                "range_ratio": d.range_ratio,
                "seed": d.seed,
            },
            "load": self.load.to_dict(),
            "num_requests_per_stage": self.requests_per_stage(),
            "duration_s": self.duration_s,
            "warmup": self.warmup,
            "slo": self.slo,
            "label": self.label,
            "telemetry": self.telemetry,
            "telemetry_interval_s": self.telemetry_interval_s,
            "server_metrics": self.server_metrics,
            "server_metrics_interval_s": self.server_metrics_interval_s,
            "request_timeout_s": self.request_timeout_s,
            "api_key_env": self.api_key_env,  # the variable's NAME; the key itself is never stored
            "seed": self.seed,
            "sampling": "server defaults (no temperature/top_p sent)",
            **({"like": self.like} if self.like else {}),
        }


class _Feed:
    """Hands out the stage's requests until its count or deadline is reached, or the run stops."""

    def __init__(
        self,
        prompts: Iterator[Prompt],
        stage: Stage,
        count: int | None,
        deadline: float | None,
        stop: asyncio.Event,
        first_index: int,
    ) -> None:
        self._prompts = prompts
        self._stage = stage
        self._left = count
        self._deadline = deadline
        self._stop = stop
        self.next_index = first_index

    def expired(self) -> bool:
        return self._stop.is_set() or (self._deadline is not None and perf_counter() >= self._deadline)

    async def pause(self, delay: float) -> None:
        """Sleep ``delay`` seconds, or less: until the deadline, or until the run is stopped."""
        if self._deadline is not None:
            delay = min(delay, self._deadline - perf_counter())
        if delay > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), delay)

    def next(self) -> GenRequest | None:
        if self._left is not None and self._left <= 0:
            return None
        if self.expired():
            return None
        if self._left is not None:
            self._left -= 1
        p = next(self._prompts)
        idx = self.next_index
        self.next_index += 1
        return GenRequest(
            index=idx,
            prompt=p.text,
            messages=p.messages,
            max_tokens=p.output_len if p.output_len is not None else DEFAULT_MAX_TOKENS,
            fixed_output=p.output_len is not None,
            input_tokens_hint=p.input_len,
            stage=self._stage.name,
        )


async def _drive(
    engine: Engine,
    stage: Stage,
    feed: _Feed,
    on_result: Callable[[GenResult], None],
    seed: int,
    tasks: set[asyncio.Task[Any]],
) -> None:
    """Run one stage: fixed concurrency, or Poisson arrivals with an optional in-flight cap."""

    async def one(req: GenRequest, sem: asyncio.Semaphore | None) -> None:
        try:
            on_result(await engine.generate(req))
        finally:
            if sem is not None:
                sem.release()

    if stage.rate is None:

        async def worker() -> None:
            while (req := feed.next()) is not None:
                on_result(await engine.generate(req))

        workers = [asyncio.create_task(worker()) for _ in range(stage.concurrency or 1)]
        tasks.update(workers)
        try:
            await asyncio.gather(*workers)
        finally:
            tasks.difference_update(workers)
        return

    gaps = poisson_gaps(stage.rate, seed)
    sem = asyncio.Semaphore(stage.concurrency) if stage.concurrency else None
    inflight: set[asyncio.Task[Any]] = set()
    next_send = perf_counter()
    first = True
    while True:
        if not first:
            next_send += next(gaps)
            await feed.pause(next_send - perf_counter())
        first = False
        if sem is not None:
            await sem.acquire()
        req = feed.next()
        if req is None:
            if sem is not None:
                sem.release()
            break
        t = asyncio.create_task(one(req, sem))
        inflight.add(t)
        tasks.add(t)
        t.add_done_callback(inflight.discard)
        t.add_done_callback(tasks.discard)
    if inflight:
        await asyncio.gather(*list(inflight))


def _cycle(prompts: list[Prompt]) -> Iterator[Prompt]:
    while True:
        yield from prompts


def _install_signals(loop: asyncio.AbstractEventLoop, on_signal: Callable[[str], None]) -> list[int]:
    installed: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        # Outside the main thread (an embedding application) no handler can be set: default behaviour.
        with contextlib.suppress(RuntimeError, ValueError):
            loop.add_signal_handler(sig, on_signal, sig.name)
            installed.append(sig)
    return installed


async def run_bench_async(
    cfg: BenchConfig,
    store: StoreLike,
    *,
    engine: Engine | None = None,
    progress: bool = False,
    telemetry_root: Path = Path("/"),
    on_run_created: Callable[[str], None] | None = None,
    on_warning: Callable[[str], None] | None = None,
) -> RunInfo:
    """Run the benchmark and return the stored run. See the module docstring for the order of work.
    ``on_warning`` gets the store writer's warnings while the run goes on (``RunWriter``)."""
    cfg.validate()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    interrupted: list[str] = []
    tasks: set[asyncio.Task[Any]] = set()

    def on_signal(name: str) -> None:
        if not interrupted:
            interrupted.append(name)
        stop.set()
        for t in list(tasks):
            t.cancel()

    installed = _install_signals(loop, on_signal)
    api_key = os.environ.get(cfg.api_key_env) or None
    if engine is None:
        engine = make_engine(
            cfg.engine,
            cfg.url,
            cfg.model,
            endpoint=cfg.endpoint,
            api_key=api_key,
            request_timeout_s=cfg.request_timeout_s,
        )
    try:
        return await _run(
            cfg, store, engine, stop, interrupted, tasks, progress, telemetry_root, on_run_created, on_warning
        )
    finally:
        await engine.close()
        for sig in installed:
            loop.remove_signal_handler(sig)


async def _run(
    cfg: BenchConfig,
    store: StoreLike,
    engine: Engine,
    stop: asyncio.Event,
    interrupted: list[str],
    tasks: set[asyncio.Task[Any]],
    show_progress: bool,
    telemetry_root: Path,
    on_run_created: Callable[[str], None] | None,
    on_warning: Callable[[str], None] | None = None,
) -> RunInfo:
    stages = cfg.load.stages()
    server = await engine.open(cfg.load.max_in_flight())
    per_stage = cfg.requests_per_stage()
    n_measured = per_stage * len(stages) if per_stage is not None else DURATION_PROMPT_POOL
    chat = (cfg.endpoint or ENDPOINTS[cfg.engine][0]) == "chat"
    dataset = await build_dataset(cfg.dataset, cfg.warmup + n_measured, engine.tokenizer, chat=chat)
    prompts = dataset.prompts
    warm_prompts, measured_prompts = prompts[: cfg.warmup], prompts[cfg.warmup :]
    if interrupted:
        raise Interrupted("interrupted before the measured window: no run was created")

    warmup_result: dict[str, Any] = {"requests": cfg.warmup}
    if cfg.warmup:
        results: list[GenResult] = []
        wstage = Stage("warmup", min(cfg.warmup, stages[0].concurrency or cfg.warmup))
        feed = _Feed(iter(warm_prompts), wstage, cfg.warmup, None, stop, -cfg.warmup)
        try:
            await _drive(engine, wstage, feed, results.append, cfg.seed, tasks)
        except asyncio.CancelledError:
            if not interrupted:
                raise
        if interrupted:
            raise Interrupted("interrupted during warmup: no run was created")
        failed = [r for r in results if r.error]
        warmup_result["failed"] = len(failed)
        if failed and len(failed) == len(results):
            raise EngineError(
                f"all {len(results)} warmup requests failed; the first: {failed[0].error}",
                hint="check --model, --endpoint and the server's log",
            )

    state = await _state_sampler(cfg, engine, server)
    info = RunInfo(
        id="",
        label=cfg.label,
        engine=cfg.engine,
        model=str(getattr(engine, "model", None) or cfg.model or ""),
        base_url=redact_url(str(getattr(engine, "display_url", cfg.url))),
        unit="token",
        workload={
            **dataset.meta,
            "load": cfg.load.to_dict(),
            "num_requests_per_stage": per_stage,
            "duration_s": cfg.duration_s,
            "warmup": warmup_result,
        },
        config=cfg.to_dict(),
        server=server.to_dict(),
    )
    sweep_stages = [s.params() for s in stages] if cfg.load.sweep else None
    writer = RunWriter(
        store,
        info,
        telemetry=cfg.telemetry,
        telemetry_interval_s=cfg.telemetry_interval_s,
        telemetry_root=telemetry_root,
        slo=cfg.slo,
        stages=sweep_stages,
        on_warning=on_warning,
    )
    try:
        with _quiet_runtime():
            return await _measure(
                cfg,
                engine,
                writer,
                info,
                stages,
                per_stage,
                measured_prompts,
                stop,
                interrupted,
                tasks,
                show_progress,
                on_run_created,
                state,
            )
    finally:
        if isinstance(state, ServerStateSampler):
            await state.close()


async def _state_sampler(
    cfg: BenchConfig, engine: Engine, server: ServerInfo
) -> ServerStateSampler | str | None:
    """The server's /metrics sampler for the window, or why there is none (None: not asked for, or
    the engine has no such endpoint)."""
    if not cfg.server_metrics or server.kind not in STATE_SERIES or not isinstance(engine, HttpEngine):
        return None
    sampler = ServerStateSampler(server.kind, engine.base_url + "/metrics", cfg.server_metrics_interval_s)
    reason = await sampler.check()
    if reason is None:
        return sampler
    hint = " (llama.cpp serves it with --metrics)" if server.kind == "llamacpp" else ""
    return f"not sampled: {reason}{hint}"


@contextlib.contextmanager
def _quiet_runtime() -> Iterator[None]:
    """Keep the interpreter from delaying the event loop during the window: objects alive now are
    moved out of the collector's view (shorter GC pauses), and other threads (the store writer,
    the telemetry sampler) hand the GIL back after 0.5 ms instead of 5 ms."""
    gc.collect()
    gc.freeze()
    switch = sys.getswitchinterval()
    sys.setswitchinterval(min(switch, GIL_SWITCH_S))
    try:
        yield
    finally:
        sys.setswitchinterval(switch)
        gc.unfreeze()


async def _measure(
    cfg: BenchConfig,
    engine: Engine,
    writer: RunWriter,
    info: RunInfo,
    stages: list[Stage],
    per_stage: int | None,
    measured_prompts: list[Prompt],
    stop: asyncio.Event,
    interrupted: list[str],
    tasks: set[asyncio.Task[Any]],
    show_progress: bool,
    on_run_created: Callable[[str], None] | None,
    state: ServerStateSampler | str | None = None,
) -> RunInfo:
    run_id = writer.start()
    if on_run_created is not None:
        on_run_created(run_id)
    sampler = state if isinstance(state, ServerStateSampler) else None
    if sampler is not None:
        sampler.start(writer.t0)
    stage_windows: list[tuple[str, float, float]] = []

    status: RunStatus = "complete"
    prog = BenchProgress(engine, enabled=show_progress)
    finished = 0

    gone_after = max(GONE_AFTER_FAILED_CONNECTS, 2 * (cfg.load.max_in_flight() or 1))
    consecutive_unreachable = 0
    server_gone: list[str] = []

    def on_result(res: GenResult) -> None:
        nonlocal finished, consecutive_unreachable
        finished += 1
        writer.add_result(res)
        prog.request_done(res)
        if writer.failed is not None:
            stop.set()
        if res.error is not None and res.error.startswith(CANNOT_CONNECT):
            consecutive_unreachable += 1
            if consecutive_unreachable >= gone_after and not server_gone:
                server_gone.append(
                    f"{consecutive_unreachable} requests in a row could not connect: {res.error}"
                )
                stop.set()
        else:
            consecutive_unreachable = 0

    prompt_iter = _cycle(measured_prompts)
    next_index = 0
    try:
        with prog:
            for stage in stages:
                if stop.is_set():
                    break
                deadline = perf_counter() + cfg.duration_s if cfg.duration_s is not None else None
                feed = _Feed(prompt_iter, stage, per_stage, deadline, stop, next_index)
                prog.stage(stage.name, per_stage, cfg.duration_s)
                t_stage = perf_counter() - writer.t0
                try:
                    await _drive(engine, stage, feed, on_result, cfg.seed, tasks)
                except asyncio.CancelledError:
                    if not interrupted:
                        raise
                stage_windows.append((stage.name, t_stage, perf_counter() - writer.t0))
                next_index = feed.next_index
                if sampler is not None and not interrupted:
                    await sampler.mark()  # the stage's requests have all finished: the server is idle
    except BaseException:
        # Not a clean stop (a bug, or the task itself cancelled): keep what finished, then re-raise.
        with contextlib.suppress(GpuledgerError):
            writer.finish("incomplete", extra_summary={"aborted": "the run stopped on an unexpected error"})
        raise
    extra: dict[str, Any] = {}
    if server_gone:
        status = "incomplete"
        extra["aborted"] = f"the server went away: {server_gone[0]}"
    if interrupted:
        status = "incomplete"
        extra["interrupted"] = {
            "signal": interrupted[0],
            "finished_requests": finished,
            "cancelled_in_flight": max(0, next_index - finished),
        }
    srv = dict(info.server)
    if sampler is not None:
        await sampler.stop()
        srv["state"] = summarize_state(sampler, stage_windows)
    elif isinstance(state, str):
        srv["state"] = {"reason": state}
    srv.update(await engine.after_run())
    fp = getattr(engine, "fingerprint", None)
    if fp:
        srv["system_fingerprint"] = fp
    return writer.finish(status, extra_summary=extra or None, server=srv)


def run_bench(
    cfg: BenchConfig, store: StoreLike, *, progress: bool = False, telemetry_root: Path = Path("/")
) -> RunInfo:
    """Synchronous entry point (one event loop for the whole run)."""
    return asyncio.run(run_bench_async(cfg, store, progress=progress, telemetry_root=telemetry_root))
