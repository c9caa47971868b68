"""The bench runner: the one run lifecycle of every engine, HTTP or in-process. It drives the engine with
the spec's prompts and stages and records the measured window through ``bench.writer.RunWriter``.

Order of work: check the spec's numbers against their bounds (``bench.bounds``) → make the engine from the
registry (``engines.registry``) → open it (probe the server, or plan, check and load the model; a refusal
raises and no run is created) → check the lengths against what the server said bounds them (its context
length) → open the prompt source and make the first prompts (``bench.prepare``: the server's tokenizer
makes exact lengths when it has one; the in-process engine draws token ids; the rest are made as the run
sends them) → warm-up (not recorded) → create the run and start the window → the stages (``bench.drive``:
one driver per stage release; sessions of multi-turn conversations and trace replay: ``bench.feeds``) →
server state → summary.

The signal handlers are installed first, before the engine is opened, and every step before the window runs
as a task they cancel: SIGINT / SIGTERM before the window raise ``Interrupted`` (no run was created) at
once, whatever the step was waiting for. During the window, SIGINT / SIGTERM — or the caller, through the
stop function ``Hooks.stopper`` hands it (a matrix being stopped) — stop new sends, cancel the requests in
flight (they never finished, so they are not recorded) and save the run as ``incomplete`` with every
finished request; the run is returned with ``summary.interrupted`` set (the CLI then exits 130). The work
that runs on the loop's thread without giving it back — opening the telemetry (an exporter that takes its
timeout to answer), and saving the run (closing the telemetry: a slow exporter's last reading, a Prometheus
server's range query) — hears the signals directly (``_sync_signals``): while the telemetry is opened a
signal raises ``Interrupted`` at once (no run was created); after the window it cuts the telemetry's end
short (``RunWriter.interrupt_telemetry``: no waiting for a slow exporter) and the run is saved
``incomplete`` with ``summary.interrupted``, as during the window. A signal during the window cuts that end
short too. The handlers that were installed before the run (the CLI's own) are put back after it. Any other
exception during the window (the engine failed, a bug) stores the run with the reason in ``summary.aborted`` —
``incomplete`` when requests finished, ``failed`` when none did — with its telemetry closed, and is raised
again.

``Hooks.workers`` > 1 (``bench --workers N``): the measured stages are sent by N load processes
(``bench.workers``: local processes, or Ray actors on ``Hooks.cluster``), started after the warm-up, their
requests merged on the run's clock into this one run.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter
from typing import TYPE_CHECKING, Any, TypeVar

from gpuledger.bench.bounds import ServerLimits, check_server_limits, check_spec, in_flight_budget
from gpuledger.bench.drive import Drive
from gpuledger.bench.feeds import feed_for, send_stage
from gpuledger.bench.prepare import PromptCheck, open_prompts
from gpuledger.bench.progress import BenchProgress, PrepProgress
from gpuledger.bench.server_state import ServerStateSampler, StateUnavailable, summarize_state
from gpuledger.bench.validity import prompt_prefixes
from gpuledger.bench.workers import PoolWriter, WorkerPool, start_pool
from gpuledger.bench.writer import RunWriter, StoreLike
from gpuledger.engines import (
    Engine,
    EngineOptions,
    GenResult,
    InProcessEngine,
    ServerInfo,
    engine_kind,
    make_engine,
)
from gpuledger.engines.base import CANNOT_CONNECT
from gpuledger.engines.http import HttpEngine
from gpuledger.engines.server_metrics import STATE_SERIES
from gpuledger.errors import EngineError, GpuledgerError, Interrupted
from gpuledger.kinds.text.spec import ServerSpec
from gpuledger.records import BenchSpec, RunInfo, RunStatus
from gpuledger.records.run import LEGACY_UNIT, unit_of_run
from gpuledger.records.spec import DatasetSpec, Stage
from gpuledger.urls import redact_url
from gpuledger.workload.prompts import Prompts
from gpuledger.workload.traces import check_replay

if TYPE_CHECKING:
    from rich.console import Console

GIL_SWITCH_S = 0.0005
# A run stops (kept as incomplete) when this many requests in a row (at least 2x the concurrency)
# could not even connect: the server went away, and every further request would fail the same way.
GONE_AFTER_FAILED_CONNECTS = 20
# bench --workers N: the load processes get at most this many measured prompts (cycled past the end).
POOL_PROMPTS = 4096

Fingerprint = Callable[[], Mapping[str, Any]]
T = TypeVar("T")


@dataclass(slots=True)
class Hooks:
    """Who hears about the run while it goes on: the run's id once it exists, the store writer's warnings,
    the engine's phases (loading a model), finished requests (done, planned) and the machine's fingerprint,
    taken right before the window (``gpuledger.lock.fingerprint`` from the CLI)."""

    on_run_created: Callable[[str], None] | None = None
    on_warning: Callable[[str], None] | None = None
    on_phase: Callable[[str], None] | None = None
    on_progress: Callable[[int, int | None], None] | None = None
    environment: Fingerprint | None = None
    # What the caller adds to the run's workload record: a repeat's group and index (bench --repeat N).
    workload: Mapping[str, Any] | None = None
    # --telemetry-from URLs: telemetry of the server's node (gpuledger.telemetry.remote); not stored as given
    # (they may hold credentials): the run records each source by its redacted name.
    telemetry_from: tuple[str, ...] = ()
    # Where the progress of the preparation and the window is drawn (the CLI's safe stderr console); None:
    # nowhere, whatever ``progress`` says.
    console: Console | None = None
    # bench --workers N: load processes for the measured stages (bench.workers); Ray actors on this cluster
    # address when one is given, else local processes.
    workers: int = 1
    cluster: str | None = None
    # The id the run is created under (a matrix cell reserves it first); None: a new one.
    run_id: str | None = None
    # Called once the run's event loop runs, with a function that stops the run as SIGINT would (callable
    # from any thread, with the name the run records as the signal).
    stopper: Callable[[Callable[[str], None]], None] | None = None


@dataclass(slots=True)
class _Run:
    """The state of one run while it goes on."""

    spec: BenchSpec
    engine: Engine
    store: StoreLike
    hooks: Hooks
    show_progress: bool
    telemetry_root: Path
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    interrupted: list[str] = field(default_factory=list)
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    pool: WorkerPool | None = None
    # What the run's checks noted before the window (bench.bounds: lengths over the server's context).
    notes: list[str] = field(default_factory=list)
    # The most requests in flight this process can hold (HTTP engines; bench.bounds.in_flight_budget).
    in_flight_cap: int | None = None
    # The signals the loop's handlers were installed for (``_sync_signals`` lends them out).
    signals: list[signal.Signals] = field(default_factory=list)

    def say(self, text: str) -> None:
        if self.hooks.on_phase is not None:
            self.hooks.on_phase(text)

    def on_signal(self, name: str) -> None:
        if not self.interrupted:
            self.interrupted.append(name)
        self.stop.set()
        for t in list(self.tasks):
            t.cancel()

    async def step(self, work: Awaitable[T], when: str) -> T:
        """Await ``work`` (a step before the window) as a task a signal cancels: ``Interrupted`` then."""
        if self.interrupted:
            if asyncio.iscoroutine(work):
                work.close()
            raise Interrupted(f"interrupted {when}: no run was created")
        task = asyncio.ensure_future(work)
        self.tasks.add(task)
        try:
            return await task
        except asyncio.CancelledError:
            if self.interrupted:
                raise Interrupted(f"interrupted {when}: no run was created") from None
            raise
        finally:
            self.tasks.discard(task)


Installed = list[tuple[signal.Signals, Any]]


def _install_signals(loop: asyncio.AbstractEventLoop, on_signal: Callable[[str], None]) -> Installed:
    """The run's SIGINT / SIGTERM handlers; returns each signal with the handler it replaced."""
    installed: Installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        # Outside the main thread (an embedding application) no handler can be set: default behaviour.
        with contextlib.suppress(RuntimeError, ValueError):
            previous = signal.getsignal(sig)
            loop.add_signal_handler(sig, on_signal, sig.name)
            installed.append((sig, previous))
    return installed


def _restore_signals(loop: asyncio.AbstractEventLoop, installed: Installed) -> None:
    """Put back the handlers the run replaced: asyncio's ``remove_signal_handler`` leaves SIGTERM at the
    default (the process would die silently, exit 143, in what its caller does next: ``gpuledger run``'s
    cost and report steps)."""
    for sig, previous in installed:
        loop.remove_signal_handler(sig)
        if previous is not None:
            with contextlib.suppress(ValueError, OSError, TypeError):
                signal.signal(sig, previous)


def _api_key(spec: BenchSpec) -> str | None:
    """The API key, read from the variable the spec names (never stored)."""
    api_env = spec.api_key_env if isinstance(spec, ServerSpec) else None
    return (os.environ.get(api_env) if api_env else None) or None


def engine_for(spec: BenchSpec, hooks: Hooks | None = None) -> Engine:
    """The engine the spec names, made from the registry (the API key read from the variable it names)."""
    return make_engine(spec, EngineOptions(api_key=_api_key(spec),
                                           on_phase=hooks.on_phase if hooks is not None else None))


async def run_bench_async(
    spec: BenchSpec,
    store: StoreLike,
    *,
    engine: Engine | None = None,
    progress: bool = False,
    telemetry_root: Path = Path("/"),
    hooks: Hooks | None = None,
) -> RunInfo:
    """Run the benchmark ``spec`` describes and return the stored run (the module docstring says the order
    of work). ``engine``: one already made (tests, ``gpuledger run``'s planned model)."""
    hooks = hooks or Hooks()
    check_spec(spec)  # every number within its bound (bench.bounds) before anything is opened
    engine = engine if engine is not None else engine_for(spec, hooks)
    run = _Run(spec, engine, store, hooks, progress and hooks.console is not None, telemetry_root)
    loop = asyncio.get_running_loop()
    installed = _install_signals(loop, run.on_signal)  # before anything that may take a while
    run.signals = [sig for sig, _ in installed]
    if hooks.stopper is not None:

        def stop(name: str) -> None:
            loop.call_soon_threadsafe(run.on_signal, name)

        hooks.stopper(stop)
    try:
        return await _run(run)
    finally:
        if run.pool is not None:
            await run.pool.shutdown()
        await engine.close()
        _restore_signals(loop, installed)


async def _run(run: _Run) -> RunInfo:
    spec, engine = run.spec, run.engine
    stages = spec.stages()
    in_flight = _max_in_flight(stages)
    if isinstance(engine, HttpEngine):  # a connection per request in flight: what this process can hold
        in_flight = run.in_flight_cap = in_flight_budget(in_flight)
    run.say("opening the engine")
    server = await run.step(engine.open(in_flight), "while opening the engine")
    if isinstance(engine, InProcessEngine):
        spec = run.spec = engine.resolved(spec)
        stages = spec.stages()
    run.notes = check_server_limits(spec, ServerLimits.of(server.details))
    warmup = spec.warmup_requests()
    chat = engine_kind(spec.engine).is_chat(spec.endpoint if isinstance(spec, ServerSpec) else None)
    prompts_of = spec.dataset_spec() or DatasetSpec()
    first = warmup + (stages[0].in_flight() or run.in_flight_cap or 1)
    with PrepProgress(run.hooks.console if run.show_progress else None) as prep:
        source = await run.step(open_prompts(prompts_of, engine.tokenizer, chat=chat, first=first,
                                             on_step=prep.step), "while preparing the prompts")
    try:
        check_replay(source, stages[0], spec.stage_duration_s())  # a trace's span, before any run exists
    except BaseException:
        await source.aclose()
        raise
    state: ServerStateSampler | str | None = None
    try:
        warmup_result = await _warmup(run, stages[0], source, warmup)
        if run.hooks.workers > 1:
            run.say(f"starting {run.hooks.workers} load workers")
            # The load processes get the measured prompts as a list (cycled past its end).
            measured = await run.step(source.take(_pool_prompts(spec, stages)), "while preparing the prompts")
            run.pool = await run.step(
                start_pool(spec, measured, stages, run.hooks.workers, run.hooks.cluster, _api_key(spec)),
                "while starting the load workers",
            )
        state = await run.step(_state_sampler(spec, engine, server), "while reading the server's metrics")
        info = RunInfo(
            id=run.hooks.run_id or "",
            label=spec.label or "",
            engine=spec.engine or engine.name,
            model=str(getattr(engine, "model", None) or getattr(spec, "model", None) or ""),
            base_url=_display_url(engine),
            unit=unit_of_run(None, spec) or LEGACY_UNIT,  # the unit of the spec's kind: image, training_token
            workload=_workload(spec, source.meta, warmup_result, run.hooks.workload),
            config=spec,
            server=server.to_dict(),
        )
        return await _window(run, info, stages, source, state)
    finally:
        await source.aclose()
        if isinstance(state, ServerStateSampler):
            await state.close()


def _pool_prompts(spec: BenchSpec, stages: list[Stage]) -> int:
    """How many prompts the load processes get: the measured requests, at most ``POOL_PROMPTS``."""
    per_stage = spec.requests_per_stage()
    return min(POOL_PROMPTS, per_stage * len(stages) if per_stage is not None else POOL_PROMPTS)


async def _window(run: _Run, info: RunInfo, stages: list[Stage], source: Prompts,
                  state: ServerStateSampler | str | None) -> RunInfo:
    """Create the run and measure it (``_measure``), with the environment's fingerprint taken first."""
    spec, engine = run.spec, run.engine
    fingerprint = run.hooks.environment
    env = (await run.step(asyncio.to_thread(fingerprint), "while taking the environment's fingerprint")
           if fingerprint is not None else None)
    writer = (PoolWriter if run.pool is not None else RunWriter)(
        run.store,
        info,
        telemetry=spec.telemetry_enabled(),
        telemetry_interval_s=spec.telemetry_interval_s(),
        telemetry_root=run.telemetry_root,
        telemetry_from=run.hooks.telemetry_from,
        slo=spec.slo_limits(),
        stages=spec.summary_stages(),
        on_warning=run.hooks.on_warning,
        environment=env,
        in_process=engine.client_note() if isinstance(engine, InProcessEngine) else None,
    )
    if isinstance(writer, PoolWriter):
        writer.pool = run.pool
    with _quiet_runtime():
        return await _measure(run, writer, info, stages, source, state)


def _workload(
    spec: BenchSpec, meta: Mapping[str, Any], warmup: Mapping[str, Any], extra: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """``RunInfo.workload`` as the run is created: the spec's record of the dataset and what the caller adds
    (``Hooks.workload``); ``_finished_workload`` adds what making the prompts found."""
    return {**spec.workload_record(meta, warmup), **(extra or {})}


def _finished_workload(info: RunInfo, source: Prompts, check: PromptCheck) -> dict[str, Any]:
    """The workload record at the end of the run: what making the prompts found (exact lengths, waits), how
    much of the prompts' text a server's prefix cache could reuse (the verdict's ``prefix_cache`` check;
    prompts of token ids have no text), and the server's prompt counts against the asked ones."""
    out = {**info.workload, **source.report()}
    texts, each_new = source.sample_texts()
    if texts:
        out["prompt_prefixes"] = prompt_prefixes(texts)
        if each_new:  # prompts made new for every send: a sample, never sent twice
            out["prompt_prefixes"]["each_send_new"] = True
    checked = check.record()
    if checked is not None:
        out["prompt_tokens_check"] = checked
    return out


def _think_time(spec: BenchSpec) -> float:
    """The pause between a session's answer and its next turn (``--think-time``; 0 without sessions)."""
    ds = spec.dataset if isinstance(spec, ServerSpec) else None
    return (ds.think_time_s or 0.0) if ds is not None else 0.0


def _max_in_flight(stages: list[Stage]) -> int | None:
    """The most requests ever in flight (None: unbounded, a rate without a cap)."""
    values = [s.in_flight() for s in stages]
    return None if not values or None in values else max(v for v in values if v is not None)


def _display_url(engine: Engine) -> str | None:
    url = getattr(engine, "display_url", None)
    return redact_url(str(url)) if url else None


async def _warmup(run: _Run, first: Stage, source: Prompts, count: int) -> dict[str, Any]:
    """Send the unmeasured warm-up requests; ``EngineError`` when every one failed (no run is created)."""
    result: dict[str, Any] = {"requests": count}
    if not count:
        return result
    run.say("warm-up (not measured)")
    results: list[GenResult] = []
    stage = first.warmup(count)
    feed = feed_for(source, stage, count, None, run.stop, -count, run.spec.warmup_output_tokens(),
                    think_time_s=_think_time(run.spec))
    ctx = Drive(run.engine, results.append, run.spec.workload_seed(), run.tasks)
    try:
        await send_stage(ctx, stage, feed)
    except asyncio.CancelledError:
        if not run.interrupted:
            raise
    if run.interrupted:
        raise Interrupted("interrupted during warmup: no run was created")
    failed = [r for r in results if r.error]
    result["failed"] = len(failed)
    if failed and len(failed) == len(results):
        raise EngineError(
            f"all {len(results)} warmup requests failed; the first: {failed[0].error}",
            hint="check --model, --endpoint and the server's log",
        )
    return result


async def _state_sampler(
    spec: BenchSpec, engine: Engine, server: ServerInfo
) -> ServerStateSampler | str | None:
    """The server's /metrics sampler for the window, or why there is none (None: not asked for, or
    the engine has no such endpoint)."""
    asked = spec.records_server_metrics()
    if not asked or server.kind not in STATE_SERIES or not isinstance(engine, HttpEngine):
        return None
    interval = spec.server_metrics_interval_s if isinstance(spec, ServerSpec) else None
    sampler = ServerStateSampler(server.kind, engine.base_url + "/metrics", interval)
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


def _reason(exc: BaseException) -> str:
    """One line saying why the window ended early."""
    if isinstance(exc, GpuledgerError):
        return exc.message
    if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt):
        return f"the run was cancelled ({type(exc).__name__})"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


async def _measure(
    run: _Run,
    writer: RunWriter,
    info: RunInfo,
    stages: list[Stage],
    source: Prompts,
    state: ServerStateSampler | str | None,
) -> RunInfo:
    spec, engine = run.spec, run.engine
    per_stage = spec.requests_per_stage()
    duration_s = spec.stage_duration_s()
    planned = per_stage * len(stages) if per_stage is not None else None
    try:
        with _sync_signals(run, _raise_interrupt(run)):  # opening an exporter does not give the loop back
            run_id = writer.start()
    except KeyboardInterrupt:
        made = f"run {writer.run_id} is left incomplete" if writer.run_id else "no run was created"
        raise Interrupted(f"interrupted while opening the telemetry: {made}") from None
    prog = BenchProgress(engine, enabled=run.show_progress, console=run.hooks.console)
    check = PromptCheck(source.meta)
    finished = 0
    gone_after = max(GONE_AFTER_FAILED_CONNECTS, 2 * (_max_in_flight(stages) or 1))
    consecutive_unreachable = 0
    server_gone: list[str] = []
    stage_windows: list[tuple[str, float, float]] = []
    sampler = state if isinstance(state, ServerStateSampler) else None

    def on_result(res: GenResult) -> None:
        nonlocal finished, consecutive_unreachable
        finished += 1
        writer.add_result(res, ctx.scheduled.pop(res.index, None))
        target = ctx.targets.pop(res.index, None)
        if target is not None:
            check.add(target, res)
        prog.request_done(res)
        if run.hooks.on_progress is not None:
            run.hooks.on_progress(finished, planned)
        if writer.failed is not None:
            run.stop.set()
        if res.error is not None and res.error.startswith(CANNOT_CONNECT):
            consecutive_unreachable += 1
            if consecutive_unreachable >= gone_after and not server_gone:
                server_gone.append(
                    f"{consecutive_unreachable} requests in a row could not connect: {res.error}"
                )
                run.stop.set()
        else:
            consecutive_unreachable = 0

    ctx = Drive(engine, on_result, spec.workload_seed(), run.tasks, in_flight_cap=run.in_flight_cap)
    next_index = 0
    sent = 0
    try:
        if run.hooks.on_run_created is not None:
            run.hooks.on_run_created(run_id)
        if sampler is not None:
            sampler.start(writer.t0)
        run.say(f"measuring: {planned if planned is not None else 'timed'} requests")
        if run.hooks.on_progress is not None:
            run.hooks.on_progress(0, planned)
        with prog:
            for stage in stages:
                if run.stop.is_set():
                    break
                deadline = perf_counter() + duration_s if duration_s is not None else None
                prog.stage(stage.stage, per_stage, duration_s)
                t_stage = perf_counter() - writer.t0
                if run.pool is not None:  # bench --workers N: the stage is sent by the load processes
                    next_index, n = await run.pool.drive(ctx, stage, per_stage, deadline, run.stop,
                                                         run.interrupted, next_index)
                    sent += n
                else:
                    feed = feed_for(source, stage, per_stage, deadline, run.stop, next_index,
                                    targets=ctx.targets, think_time_s=_think_time(spec))
                    try:
                        await send_stage(ctx, stage, feed)
                    except asyncio.CancelledError:
                        if not run.interrupted:
                            raise
                    sent += feed.next_index - next_index
                    next_index = feed.next_index
                stage_windows.append((stage.stage, t_stage, perf_counter() - writer.t0))
                if sampler is not None and not run.interrupted:
                    await sampler.mark()  # the stage's requests have all finished: the server is idle
    except BaseException as exc:
        # Not a clean stop (the engine failed, a bug, the task itself cancelled): keep what finished, close
        # the telemetry, store why, then raise again.
        status: RunStatus = "incomplete" if finished else "failed"
        with contextlib.suppress(GpuledgerError):
            writer.finish(status, extra_summary={"aborted": f"the run stopped on an error: {_reason(exc)}"},
                          workload=_finished_workload(info, source, check))
        raise
    srv = dict(info.server)
    if sampler is not None:
        await sampler.stop()
        srv["state"] = summarize_state(sampler, stage_windows).model_dump(mode="json")
    elif isinstance(state, str):
        srv["state"] = StateUnavailable(reason=state).model_dump(mode="json")
    srv.update(await engine.after_run())
    if run.pool is not None:  # what the load processes' engines noticed
        known = list(srv.get("warnings", []))
        new = [w for w in await run.pool.finish() if w not in known]
        if new:
            srv["warnings"] = [*known, *new]
    prompt_warning = check.warning()
    if prompt_warning is not None and run.hooks.on_warning is not None:
        run.hooks.on_warning(prompt_warning)
    notes = [*run.notes, *source.notes, *([prompt_warning] if prompt_warning else []), *ctx.notes,
             *_prompt_wait_note(source)]
    if notes:
        srv["warnings"] = [*srv.get("warnings", []), *notes]
    fp = getattr(engine, "fingerprint", None)
    if fp:
        srv["system_fingerprint"] = fp
    # The status is decided now, after the awaits above: a signal during them counts.
    extra: dict[str, Any] = {}
    final: RunStatus = "complete"
    if server_gone:
        final = "incomplete"
        extra["aborted"] = f"the server went away: {server_gone[0]}"
    if run.interrupted:
        final = "incomplete"
        extra["interrupted"] = _interruption(run.interrupted[0], finished, max(0, sent - finished))
        writer.interrupt_telemetry(f"interrupted ({run.interrupted[0]})")

    def late(name: str) -> None:  # a signal while the run is saved (finish does not give the loop back)
        if not run.interrupted:
            run.interrupted.append(name)
        writer.interrupt_telemetry(f"interrupted ({name}) while the run was saved")

    with _sync_signals(run, late):
        stored = writer.finish(final, extra_summary=extra or None, server=srv,
                               workload=_finished_workload(info, source, check))
    if run.interrupted and "interrupted" not in extra:
        stored = _mark_interrupted(run.store, stored, _interruption(run.interrupted[0], finished, 0))
    return stored


def _interruption(name: str, finished: int, cancelled: int) -> dict[str, Any]:
    """``summary.interrupted``: the signal, the finished requests, those cancelled in flight."""
    return {"signal": name, "finished_requests": finished, "cancelled_in_flight": cancelled}


def _mark_interrupted(store: StoreLike, run: RunInfo, interrupted: dict[str, Any]) -> RunInfo:
    """A run saved while a signal came (after its window): stored ``incomplete`` (unless ``failed`` or
    ``cancelled`` already) with ``summary.interrupted``, as a run interrupted during its window is."""
    fields: dict[str, Any] = {}
    if run.summary is not None:
        fields["summary"] = run.summary.amended(interrupted=interrupted)
    if run.status == "complete":
        fields["status"] = "incomplete"
    store.update_run(run.id, **fields)
    return store.get_run(run.id)


def _raise_interrupt(run: _Run) -> Callable[[str], None]:
    """A signal handler for synchronous work before the window: the run stops, the work is interrupted."""

    def handler(name: str) -> None:
        run.on_signal(name)
        raise KeyboardInterrupt(name)

    return handler


@contextlib.contextmanager
def _sync_signals(run: _Run, on: Callable[[str], None]) -> Iterator[None]:
    """While synchronous work holds the loop's thread (the loop would see a signal only once it is done),
    SIGINT / SIGTERM call ``on`` (signal name) at once, as Python-level handlers; the loop's handlers are
    put back after."""
    loop = asyncio.get_running_loop()
    lent: list[signal.Signals] = []

    def handler(signum: int, _frame: Any) -> None:
        on(signal.Signals(signum).name)

    for sig in run.signals:
        with contextlib.suppress(RuntimeError, ValueError, OSError):
            loop.remove_signal_handler(sig)
            signal.signal(sig, handler)
            lent.append(sig)
    try:
        yield
    finally:
        for sig in lent:
            with contextlib.suppress(RuntimeError, ValueError, OSError):
                loop.add_signal_handler(sig, run.on_signal, sig.name)


def _prompt_wait_note(source: Prompts) -> list[str]:
    """Requests that waited for their prompt (cut to length by the server's tokenizer as the run went)."""
    if not source.waits:
        return []
    return [f"{source.waits} requests waited for their prompt to be made ({source.waited_s:.2f} s in all): "
            "the load was that much lighter than asked"]


def run_bench(
    spec: BenchSpec, store: StoreLike, *, progress: bool = False, telemetry_root: Path = Path("/"),
    engine: Engine | None = None, hooks: Hooks | None = None,
) -> RunInfo:
    """Synchronous entry point (one event loop for the whole run)."""
    return asyncio.run(run_bench_async(spec, store, engine=engine, progress=progress,
                                       telemetry_root=telemetry_root, hooks=hooks))
