"""Ray: the one module of gpuledger that imports it, lazily (it is the optional extra ``gpuledger[cluster]``).

Two uses: a benchmark matrix's cells as Ray tasks (``CellTasks``: each placed by the resources and node labels
its target asks for, retried by Ray when its worker dies), and ``bench --workers N`` with a cluster given:
the N load processes as Ray actors (``load_links``, spread over the nodes).

Where (``connect``): ``local`` starts a Ray instance on this machine for the command's lifetime, ``auto``
joins the cluster this machine is part of (``ray start`` ran here, or ``RAY_ADDRESS``), anything else is
the address of a cluster's head (``HOST:6379``, or ``ray://HOST:10001`` through Ray Client). Every node of
the cluster runs the same gpuledger (installed there, or shipped with a ``runtime_env``): a task is found
by its module and name.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from time import perf_counter
from typing import Any, Protocol, TypeAlias, cast

from gpuledger.bench.load_worker import Emit, LoadWorker, Share
from gpuledger.engines import GenResult
from gpuledger.errors import MissingDependencyError, ResourceError, UsageError
from gpuledger.telemetry.amd import guard_amdsmi
from gpuledger.workload.datasets import Prompt

INSTALL_HINT = 'pip install "gpuledger[cluster]" (Ray, with its dashboard and state API: "ray[default]")'
# Ray's own retries of a cell whose worker process died (not of a cell that failed: that is recorded).
CELL_RETRIES = 2
POLL_S = 0.05

_started_here: list[bool] = []


def available() -> bool:
    """Is Ray installed here (without importing it)?"""
    return importlib.util.find_spec("ray") is not None


# -- the part of Ray gpuledger uses ---------------------------------------------------------------------
# Ray ships its types (py.typed): installed, mypy reads its module; absent, ``import ray`` is Any to mypy. The
# Protocols below are what this module calls, so the code is checked the same way with and without Ray.

ObjectRef: TypeAlias = Any  # a ray.ObjectRef: opaque, handed back to Ray (wait, get, cancel)
ActorHandle: TypeAlias = Any  # a ray.actor.ActorHandle: the actor class's methods, called as .remote()


class _RuntimeContext(Protocol):
    def get_node_id(self) -> str: ...

    def get_node_labels(self) -> Mapping[str, str] | None: ...


class _RayExceptions(Protocol):
    RayError: type[Exception]
    RayTaskError: type[Exception]


class RayApi(Protocol):
    """``ray`` as gpuledger calls it."""

    __version__: str
    exceptions: _RayExceptions

    def is_initialized(self) -> bool: ...

    def init(self, address: str, **options: Any) -> object: ...

    def nodes(self) -> list[dict[str, Any]]: ...

    def get_runtime_context(self) -> _RuntimeContext: ...

    def shutdown(self) -> None: ...

    def remote(self, *target: Any, **options: Any) -> Any: ...

    def wait(self, refs: list[ObjectRef], *, num_returns: int,
             timeout: float | None) -> tuple[list[ObjectRef], list[ObjectRef]]: ...

    def get(self, ref: ObjectRef) -> Any: ...

    def cancel(self, ref: ObjectRef, *, force: bool) -> None: ...

    def kill(self, actor: ActorHandle) -> None: ...


def _ray() -> RayApi:
    # Ray's import imports amdsmi, catching only ImportError: a broken amdsmi (no ROCm) is put out of reach
    # first, or it prints on stdout and raises KeyError inside `import ray`.
    guard_amdsmi()
    try:
        import ray
    except ImportError as exc:
        raise MissingDependencyError(f"Ray is not installed ({exc})", hint=INSTALL_HINT) from exc
    return cast(RayApi, ray)


def connect(address: str) -> str:
    """Join (or, for ``local``, start) the Ray cluster at ``address`` once per process; returns what was
    joined, in words."""
    ray = _ray()
    if ray.is_initialized():
        return "on the Ray instance this process is already connected to"
    if not address.strip():
        raise UsageError("--ray needs local, auto or a cluster address (HOST:6379, ray://HOST:10001)")
    try:
        # log_to_driver=False: the workers' output and Ray's own notices never reach this process's stdout
        # (--json owns it); each worker's log stays in the node's Ray session folder.
        if address == "local":
            ray.init(address="local", include_dashboard=False, logging_level="ERROR", log_to_driver=False,
                     num_cpus=os.cpu_count() or 1)
        else:
            ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ResourceError(f"cannot join the Ray cluster at {address!r}: {exc}",
                            hint="docs/matrix.md: pointing gpuledger at an existing Ray cluster") from exc
    _started_here.append(True)
    _notices_to_stderr()
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    return f"on Ray {ray.__version__} at {address} ({len(nodes)} node{'s' if len(nodes) != 1 else ''})"


def _notices_to_stderr() -> None:
    """Ray prints the cluster's notices to this process (a worker died, a task is retried) on stdout, from a
    thread of its own, whatever ``log_to_driver`` says; stdout is ``--json``'s: they go to stderr."""
    import ray._private.worker as ray_worker

    original = getattr(ray_worker, "print_to_stdstream", None)
    if original is None or getattr(original, "gpuledger_stderr", False):
        return

    def to_stderr(data: dict[str, Any], ignore_prefix: bool) -> None:
        original({**data, "is_err": True}, ignore_prefix)

    to_stderr.gpuledger_stderr = True  # type: ignore[attr-defined]
    ray_worker.print_to_stdstream = to_stderr


def current_node() -> dict[str, Any] | None:
    """The Ray node this process runs on (a cell's task: its workload records it), or None outside Ray.
    Ray is not imported for it: a process that has not imported Ray is not on a Ray node."""
    loaded = sys.modules.get("ray")
    if loaded is None:
        return None
    ray = cast(RayApi, loaded)
    if not ray.is_initialized():
        return None
    ctx = ray.get_runtime_context()
    return {"node_id": ctx.get_node_id(), "labels": dict(ctx.get_node_labels() or {})}


def disconnect() -> None:
    """Leave (and for ``local``, stop) the cluster this process joined with ``connect``."""
    if _started_here:
        _started_here.clear()
        _ray().shutdown()


# -- matrix cells as tasks -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a cell may run: Ray resources (``CPU``/``GPU`` counted as Ray counts them, anything else a
    custom resource a node declares) and node labels it must match."""

    resources: Mapping[str, float]
    labels: Mapping[str, str]

    def options(self) -> dict[str, Any]:
        res = dict(self.resources)
        out: dict[str, Any] = {"num_cpus": res.pop("CPU", 1.0), "max_retries": CELL_RETRIES,
                               "retry_exceptions": False}
        if "GPU" in res:
            out["num_gpus"] = res.pop("GPU")
        if res:
            out["resources"] = res
        if self.labels:
            out["label_selector"] = dict(self.labels)
        return out


class CellLost(Exception):
    """A cell task that did not return: its worker (or node) died more often than Ray retries, or it
    raised. ``str()`` says which, in one line."""


class CellTasks:
    """Cells submitted as Ray tasks of ``fn(payload, *args)``; ``wait`` for some to end, ``result`` of one."""

    def __init__(self, fn: Callable[..., object]) -> None:
        self._remote = _ray().remote(fn)
        self._refs: dict[Any, ObjectRef] = {}

    def submit(self, key: Any, placement: Placement, *args: Any) -> None:
        self._refs[key] = self._remote.options(**placement.options()).remote(*args)

    def running(self) -> list[Any]:
        return list(self._refs)

    def wait(self, timeout_s: float) -> list[Any]:
        """The keys of the cells that ended within ``timeout_s`` (at least one is waited for)."""
        if not self._refs:
            return []
        by_ref = {ref: key for key, ref in self._refs.items()}
        done, _ = _ray().wait(list(by_ref), num_returns=1, timeout=timeout_s)
        if done:
            more, _ = _ray().wait(list(by_ref), num_returns=len(by_ref), timeout=0)
            done = list({*done, *more})
        return [by_ref[ref] for ref in done]

    def result(self, key: Any) -> object:
        """What the cell's task returned, unpickled from its worker and not checked (the caller checks it);
        ``CellLost`` when it did not return."""
        ray = _ray()
        ref = self._refs.pop(key)
        try:
            out: object = ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None) or exc
            raise CellLost(f"the cell's task raised {type(cause).__name__}: {_line(cause)}") from exc
        except ray.exceptions.RayError as exc:
            raise CellLost(f"the cell's worker died ({CELL_RETRIES + 1} attempts, Ray's retries included): "
                           f"{type(exc).__name__}: {_line(exc)}") from exc
        return out

    def cancel_all(self) -> None:
        """Stop every task still running (a second Ctrl-C: no waiting for cells to end)."""
        ray = _ray()
        for ref in self._refs.values():
            ray.cancel(ref, force=True)


def _line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else type(exc).__name__


# -- bench --workers N as Ray actors ----------------------------------------------------------------------


class LoadActor:
    """A load process as a Ray (async) actor: ``bench.load_worker.LoadWorker``, its finished requests kept
    until the coordinator takes them."""

    def __init__(self) -> None:
        self.worker = LoadWorker()
        self.buffer: list[tuple[GenResult, float | None]] = []

    async def open(self, spec_doc: dict[str, Any], prompts: list[Prompt], cap: int | None,
                   api_key: str | None) -> dict[str, Any]:
        return await self.worker.open(spec_doc, prompts, cap, api_key)

    async def clock(self) -> float:
        return perf_counter()

    async def begin(self) -> None:
        self.worker.begin_stage()

    async def run_stage(self, share: Share, deadline: float | None) -> tuple[int, list[str]]:
        return await self.worker.run_stage(share, deadline, lambda r, s: self.buffer.append((r, s)))

    async def take(self) -> list[tuple[GenResult, float | None]]:
        out, self.buffer = self.buffer, []
        return out

    async def stop(self, cancel: bool) -> None:
        self.worker.stop(cancel)

    async def close(self) -> dict[str, Any]:
        return await self.worker.close()


class RayLink:
    """The coordinator's side of one ``LoadActor`` (``bench.workers.WorkerLink``): results are taken from
    the actor every ``POLL_S`` while a stage runs."""

    kind = "Ray actor"

    def __init__(self, actor: ActorHandle) -> None:
        self._actor = actor

    async def open(self, spec_doc: dict[str, Any], prompts: list[Prompt], max_in_flight: int | None,
                   api_key: str | None) -> dict[str, Any]:
        identity: dict[str, Any] = await self._actor.open.remote(spec_doc, prompts, max_in_flight, api_key)
        return identity

    async def clock(self) -> float:
        return float(await self._actor.clock.remote())

    async def stage(self, share: Share, deadline: float | None, on_result: Emit) -> tuple[int, list[str]]:
        await self._actor.begin.remote()
        done = asyncio.ensure_future(self._actor.run_stage.remote(share, deadline))
        while True:
            finished = done.done()
            for res, scheduled in await self._actor.take.remote():
                on_result(res, scheduled)
            if finished:
                sent, notes = done.result()
                return int(sent), list(notes)
            await asyncio.wait({done}, timeout=POLL_S)

    def stop(self, cancel: bool) -> None:
        self._actor.stop.remote(cancel)

    async def close(self) -> dict[str, Any]:
        record: dict[str, Any] = await self._actor.close.remote()
        return record

    async def shutdown(self) -> None:
        _ray().kill(self._actor)


def load_links(cluster: str, workers: int) -> Sequence[RayLink]:
    """``workers`` load actors on the cluster at ``cluster`` (one CPU each, spread over the nodes)."""
    connect(cluster)
    actor = _ray().remote(num_cpus=1, scheduling_strategy="SPREAD")(LoadActor)
    return [RayLink(actor.remote()) for _ in range(workers)]
