"""Live progress of a bench run on stderr: a rich bar with requests done, failures and live tok/s, and
before it the preparation (learning the server's tokenizer, making the first prompts).

Drawn on the console the caller passes (the CLI's safe stderr console, ``gpuledger.cli.common``: nothing
from outside reaches the terminal raw); without one nothing is drawn. Refreshed from the event loop (no
refresh thread competing with the measurement): 4 times a second during the window, at most 10 times a
second while preparing. The live rate counts content chunks (one token each, or more): the stored summary
is the figure of record.
"""

from __future__ import annotations

import asyncio
import contextlib
from time import perf_counter
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from gpuledger.engines.base import Engine, GenResult
from gpuledger.textsafe import neutralise

REFRESH_S = 0.25
PREPARE_REFRESH_S = 0.1


class PrepProgress:
    """The preparation's progress: one transient line per step (``step(what, done, total)``), a bar when
    the step has a total. Drawn only when ``console`` is given."""

    def __init__(self, console: Console | None) -> None:
        self._console = console
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._what = ""
        self._shown = 0.0

    def __enter__(self) -> PrepProgress:
        if self._console is None:
            return self
        self._progress = Progress(
            SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), console=self._console, auto_refresh=False, transient=True,
        )
        self._progress.start()
        self._task = self._progress.add_task("preparing", total=None)
        return self

    def step(self, what: str, done: int, total: int | None) -> None:
        if self._progress is None or self._task is None:
            return
        now = perf_counter()
        if what == self._what and done != total and now - self._shown < PREPARE_REFRESH_S:
            return
        self._what, self._shown = what, now
        self._progress.update(self._task, description=escape(neutralise(f"preparing: {what}")),
                              total=total, completed=done)
        self._progress.refresh()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


class BenchProgress:
    def __init__(self, engine: Engine, *, enabled: bool, console: Console | None = None) -> None:
        self.engine = engine
        self.enabled = enabled and console is not None
        self.console = console
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._t0 = perf_counter()
        self._chunks0 = 0
        self._done = 0
        self._failed = 0
        self._count: int | None = None
        self._duration: float | None = None
        self._stage_t0 = self._t0

    def __enter__(self) -> BenchProgress:
        if not self.enabled or self.console is None:
            return self
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TextColumn("{task.fields[failed]}"),
            TimeElapsedColumn(),
            console=self.console,
            auto_refresh=False,
            transient=False,
        )
        self._progress.start()
        self._ticker = asyncio.get_running_loop().create_task(self._tick())
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            self._ticker = None
        if self._progress is not None:
            self._update()
            self._progress.stop()
            self._progress = None

    def stage(self, name: str, count: int | None, duration_s: float | None) -> None:
        self._count, self._duration = count, duration_s
        self._done = self._failed = 0
        self._stage_t0 = perf_counter()
        self._chunks0 = self.engine.chunks_seen
        if self._progress is None:
            return
        total: Any = count if count is not None else duration_s
        self._task = self._progress.add_task(escape(neutralise(name)), total=total, rate="", failed="")
        self._update()

    def request_done(self, res: GenResult) -> None:
        self._done += 1
        if res.error is not None:
            self._failed += 1

    def _update(self) -> None:
        if self._progress is None or self._task is None:
            return
        elapsed = max(perf_counter() - self._stage_t0, 1e-9)
        rate = (self.engine.chunks_seen - self._chunks0) / elapsed
        completed = self._done if self._count is not None else int(min(elapsed, self._duration or elapsed))
        self._progress.update(
            self._task,
            completed=completed,
            rate=f"{rate:,.0f} tok/s",
            failed=f"[red]{self._failed} failed[/red]" if self._failed else "",
        )
        self._progress.refresh()

    async def _tick(self) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            while True:
                await asyncio.sleep(REFRESH_S)
                self._update()
