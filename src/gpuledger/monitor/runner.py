"""The long-running monitor: poll every telemetry source on its own task, accrue cost, scrape the
engine, serve ``/metrics``; until ``stop()``, a signal, or ``duration_s``.

Fault isolation: each source is read on its own task and worker thread, so a source that raises or
hangs stops only itself (``gpuledger_source_up 0``, retried with backoff 1, 2, 4 ... 60 s); a GPU lost
mid-run stops only that GPU's gauges; an engine endpoint that is down or returns garbage only stops the
engine figures. The HTTP server runs on its own thread and renders whatever is known.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType

import aiohttp

from gpuledger.catalog import Catalog
from gpuledger.engines.server_metrics import EngineMetricsError, normalise_engine_url, scrape_engine
from gpuledger.monitor.config import MonitorConfig
from gpuledger.monitor.exporter import MetricsServer, make_registry
from gpuledger.monitor.pricing import choose_profile, power_fallbacks
from gpuledger.monitor.state import MonitorState, human_duration
from gpuledger.telemetry import Sampler, SourceError, close_sources, open_sources
from gpuledger.urls import redact_url

LogFn = Callable[[str], None]
ENGINE_MIN_PERIOD_S = 1.0


def _stderr(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


async def _sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    if seconds <= 0:
        await asyncio.sleep(0)
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)


class Monitor:
    """``Monitor(config, profile=...)`` opens the sources and resolves the cost profile;
    ``start_server()`` binds the port; ``run()`` blocks until stopped; ``close()`` releases everything.

    ``telemetry_from``: exporters' ``/metrics`` of other nodes (dcgm-exporter, AMD's device-metrics-exporter,
    another ``gpuledger monitor``), read live like a local source (``gpuledger.telemetry.remote``); their
    GPUs are served with the ``hostname`` they report. ``local_telemetry=False`` reads only those."""

    def __init__(
        self,
        config: MonitorConfig,
        *,
        sources: Sequence[Sampler] | None = None,
        root: Path = Path("/"),
        profile: str | None = None,
        log: LogFn | None = None,
        catalog: Catalog | None = None,
        process_metrics: bool = True,
        clock: Callable[[], float] = time.monotonic,
        telemetry_from: Sequence[str] = (),
        local_telemetry: bool = True,
    ) -> None:
        self.config = config
        self.clock = clock
        self.log: LogFn = log or _stderr
        self.sources: list[Sampler] = list(sources) if sources is not None else open_sources(
            root, remote=telemetry_from, local=local_telemetry, live=True)
        try:
            devices = [d for s in self.sources if s.available for d in s.devices()]
            choice = choose_profile(profile, devices, catalog)
            fallback = {}
            if choice.profile is not None and choice.profile.mode == "ownership":
                fallback = power_fallbacks(devices, choice.profile, catalog)
        except BaseException:
            close_sources(self.sources)
            raise
        engine_url = normalise_engine_url(config.engine_url) if config.engine_url else None
        self.state = MonitorState(config, self.sources, now=clock(), profile=choice.profile,
                                  profile_note=choice.note, fallback=fallback, engine_url=engine_url)
        self.registry = make_registry(self.state, clock=clock, process_metrics=process_metrics)
        self.server: MetricsServer | None = None
        self._stop = threading.Event()
        self._closed = False

    # ------------------------------------------------------------------ lifecycle

    def start_server(self) -> MetricsServer:
        if self.server is None:
            self.server = MetricsServer(self.registry, self.config.host, self.config.port)
        return self.server

    def stop(self) -> None:
        """Ask ``run()`` to return (thread-safe, idempotent)."""
        self._stop.set()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.server is not None:
            self.server.close()
        close_sources(self.sources)

    def __enter__(self) -> Monitor:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def startup_lines(self) -> list[str]:
        """What the monitor found, for the log: sources (with the reason for the missing ones), devices,
        cost profile, engine."""
        st = self.state
        lines = []
        for s in st.sources.values():
            if s.available_at_start:
                lines.append(f"source {s.name}: {', '.join(s.devices) or 'no devices'}")
            else:
                lines.append(f"source {s.name}: unavailable — {s.reason}")
        acc = ", ".join(f"{d.info.key} ({d.info.name})" for d in st.accounted()) or "none"
        lines.append(f"priced and alerted devices: {acc}")
        lines.append(st.profile_note)
        if st.cost is not None:
            for key, fb in st.cost.fallback.items():
                lines.append(f"power for {key} when it reports none: {fb.watts:g} W ({fb.source})")
        lines.append(f"alert: utilisation below {self.config.alert_util * 100:g} % for "
                     f"{human_duration(self.config.alert_window_s)}")
        if st.engine is not None:
            lines.append(f"engine metrics: {redact_url(st.engine.url)} (window "
                         f"{human_duration(self.config.engine_window_s)})")
        return lines

    # ------------------------------------------------------------------ loop

    def run(self, *, duration_s: float | None = None, handle_signals: bool = False,
            on_tick: Callable[[MonitorState], None] | None = None) -> None:
        """Poll, accrue and scrape until ``stop()``, SIGINT/SIGTERM (``handle_signals``, main thread
        only) or ``duration_s``. Takes a last accrual before returning."""
        asyncio.run(self._main(duration_s, handle_signals, on_tick))

    def _emit(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.log(line)

    async def _main(self, duration_s: float | None, handle_signals: bool,
                    on_tick: Callable[[MonitorState], None] | None) -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        # Our own pool: a read that hangs in a driver must not keep the process from exiting.
        pool = ThreadPoolExecutor(max_workers=len(self.sources) + 1, thread_name_prefix="gpuledger-monitor")
        installed: list[signal.Signals] = []
        # asyncio signal handlers exist on Unix event loops only (Windows' loop has none).
        on_main = threading.current_thread() is threading.main_thread()
        if handle_signals and on_main and sys.platform != "win32":
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(RuntimeError):
                    loop.add_signal_handler(sig, stop.set)
                    installed.append(sig)
        watcher = loop.run_in_executor(pool, self._stop.wait)
        watcher.add_done_callback(lambda _f: stop.set())
        tasks = [asyncio.create_task(self._poll(src, stop, pool), name=f"poll-{src.name}")
                 for src in self.sources if src.available]
        tasks.append(asyncio.create_task(self._tick(stop, on_tick), name="accrue"))
        if self.state.engine is not None:
            tasks.append(asyncio.create_task(self._engine(stop), name="engine"))
        timer = loop.call_later(duration_s, stop.set) if duration_s is not None else None
        try:
            await stop.wait()
        finally:
            if timer is not None:
                timer.cancel()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.state.accrue(self.clock())
            self._stop.set()  # releases the watcher thread
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            for sig in installed:
                loop.remove_signal_handler(sig)
            pool.shutdown(wait=False, cancel_futures=True)

    def read_source(self, src: Sampler, now: float | None = None) -> list[str]:
        """Read one source once and record the result (readings, or the failure); returns the log lines.
        ``now`` (tests) replaces the monotonic clock for the read and its bookkeeping."""
        began = self.clock() if now is None else now
        try:
            readings = src.read(began)
        except SourceError as exc:
            return self.state.source_failed(src.name, exc.message, began)
        except Exception as exc:  # noqa: BLE001 - fault boundary: shown as source_up 0 + the error, retried
            return self.state.source_failed(src.name, f"{type(exc).__name__}: {exc}", began)
        done = self.clock() if now is None else now
        logs = self.state.ingest(src.name, readings, done, read_s=done - began)
        for key, why in src.device_errors().items():
            logs.extend(self.state.device_failed(key, f"{src.name}: {why}", done))
        return logs

    def poll_once(self, now: float | None = None) -> list[str]:
        """Read every available source once (except those waiting for a retry), then accrue cost; logs
        what happened (and returns the lines). Used before serving, so the first scrape already has
        values; tests drive the monitor with it."""
        logs: list[str] = []
        t = self.clock() if now is None else now
        for src in self.sources:
            st = self.state.sources[src.name]
            if not src.available or (st.retry_at is not None and t < st.retry_at):
                continue
            logs.extend(self.read_source(src, now))
        self.state.accrue(t)
        self._emit(logs)
        return logs

    async def _poll(self, src: Sampler, stop: asyncio.Event, pool: ThreadPoolExecutor) -> None:
        loop = asyncio.get_running_loop()
        st = self.state.sources[src.name]
        while not stop.is_set():
            now = self.clock()
            if st.retry_at is not None and now < st.retry_at:
                await _sleep_or_stop(stop, st.retry_at - now)
                continue
            began = self.clock()
            self._emit(await loop.run_in_executor(pool, self.read_source, src))
            await _sleep_or_stop(stop, began + st.period(self.config.interval_s) - self.clock())

    async def _tick(self, stop: asyncio.Event, on_tick: Callable[[MonitorState], None] | None) -> None:
        while not stop.is_set():
            began = self.clock()
            self.state.accrue(began)
            if on_tick is not None:
                on_tick(self.state)
            await _sleep_or_stop(stop, began + self.config.interval_s - self.clock())

    async def _engine(self, stop: asyncio.Event) -> None:
        eng = self.state.engine
        assert eng is not None
        period = max(self.config.interval_s, ENGINE_MIN_PERIOD_S)
        async with aiohttp.ClientSession() as session:
            while not stop.is_set():
                began = self.clock()
                try:
                    counters = await scrape_engine(session, eng.url, self.config.engine_timeout_s)
                except EngineMetricsError as exc:
                    self._emit(self.state.engine_failed(self.clock(), exc.message))
                except Exception as exc:  # noqa: BLE001 - fault boundary: shown as engine down + the error
                    self._emit(self.state.engine_failed(self.clock(), f"{type(exc).__name__}: {exc}"))
                else:
                    self._emit(self.state.engine_scraped(self.clock(), counters))
                await _sleep_or_stop(stop, began + period - self.clock())
