"""Data-parallel training over several processes: ``torchrun`` (or any launcher that sets its variables)
starts one process per device; each runs the same ``gpuledger bench --task train`` command. Rank 0 runs the
bench lifecycle (window, telemetry, store); the other ranks follow it step by step and store nothing.

``dist_env`` reads the launcher's variables (``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``) without importing
torch. ``Group`` is the process group (NCCL — RCCL on ROCm — between GPUs, gloo between CPU processes) and
the few collectives the engine needs besides DDP's own gradient all-reduce: every step starts with ``agree``
(a sum of [stop, step index] over the ranks: rank 0 says which step comes next, any rank can say stop, so
that every rank runs the same steps and stops at the same one), the loss is averaged over the ranks
(``mean``), and at open the ranks compare their memory checks (``all_fit``) and gather their devices.

The rendezvous is torch's ``init_method``: ``env://`` (``MASTER_ADDR``/``MASTER_PORT``, what torchrun sets) by
default, or ``GPULEDGER_DIST_INIT_METHOD`` (``file:///path``: a FileStore, no listening socket; gloo then
binds the interface ``GLOO_SOCKET_IFNAME`` names, ``lo`` for loopback only). ``GPULEDGER_DIST_TIMEOUT_S``
bounds every collective (default 600 s).
"""

from __future__ import annotations

import datetime
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuledger.engines.torch.imports import import_torch
from gpuledger.errors import EngineError, UsageError

INIT_METHOD_VAR = "GPULEDGER_DIST_INIT_METHOD"
TIMEOUT_VAR = "GPULEDGER_DIST_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 600.0
MAX_WORLD_SIZE = 65_536


@dataclass(frozen=True, slots=True)
class DistEnv:
    """This process's place in a multi-process run, as the launcher set it."""

    world_size: int
    rank: int
    local_rank: int
    init_method: str
    timeout_s: float


def _int(env: Mapping[str, str], name: str, default: int | None = None) -> int:
    raw = env.get(name)
    if raw is None:
        if default is None:
            raise UsageError(f"{name} is not set, but WORLD_SIZE is: start the ranks with torchrun")
        return default
    try:
        return int(raw.strip())
    except ValueError as exc:
        raise UsageError(f"{name}={raw!r} is not a whole number (set by the launcher: torchrun)") from exc


def dist_env(env: Mapping[str, str] | None = None) -> DistEnv | None:
    """The launcher's variables, or None for a single process (``WORLD_SIZE`` unset or 1)."""
    env = os.environ if env is None else env
    if "WORLD_SIZE" not in env:
        return None
    world = _int(env, "WORLD_SIZE")
    if world == 1:
        return None
    if not 1 < world <= MAX_WORLD_SIZE:
        raise UsageError(f"WORLD_SIZE must be between 1 and {MAX_WORLD_SIZE}, got {world}")
    rank = _int(env, "RANK")
    local = _int(env, "LOCAL_RANK", rank)
    if not 0 <= rank < world or local < 0:
        raise UsageError(f"RANK={rank} / LOCAL_RANK={local} do not fit WORLD_SIZE={world}")
    raw_timeout = env.get(TIMEOUT_VAR, str(DEFAULT_TIMEOUT_S))
    try:
        timeout = float(raw_timeout)
    except ValueError as exc:
        raise UsageError(f"{TIMEOUT_VAR}={raw_timeout!r} is not a number of seconds") from exc
    if not 0 < timeout <= 86_400:
        raise UsageError(f"{TIMEOUT_VAR} must be between 0 and 86400 seconds, got {raw_timeout}")
    init = env.get(INIT_METHOD_VAR) or "env://"
    if not init.startswith(("env://", "file://", "tcp://")):
        raise UsageError(f"{INIT_METHOD_VAR}={init!r}: give env://, file:///PATH or tcp://HOST:PORT")
    return DistEnv(world, rank, local, init, timeout)


def process_rank(env: Mapping[str, str] | None = None) -> int:
    """This process's rank (0 for a single process)."""
    found = dist_env(env)
    return found.rank if found is not None else 0


class Group:
    """The process group of a data-parallel run (see the module docstring). ``stopped``: a stop was agreed,
    no collective may follow."""

    def __init__(self, env: DistEnv, device_type: str) -> None:
        torch = import_torch()
        self.env = env
        self.torch = torch
        self.dist: Any = torch.distributed
        self.backend = "nccl" if device_type == "cuda" else "gloo"
        self.device = f"cuda:{env.local_rank}" if device_type == "cuda" else "cpu"
        self.stopped = False
        if not self.dist.is_available():
            raise EngineError("this PyTorch build has no torch.distributed: data-parallel training needs it")
        try:
            self.dist.init_process_group(
                self.backend,
                init_method=env.init_method,
                rank=env.rank,
                world_size=env.world_size,
                timeout=datetime.timedelta(seconds=env.timeout_s),
            )
        except (RuntimeError, ValueError) as exc:
            raise EngineError(
                f"rank {env.rank} of {env.world_size} could not join the process group ({self.backend}, "
                f"{env.init_method}): {str(exc).strip().splitlines()[0] if str(exc).strip() else exc!r}",
                hint="start every rank with torchrun (docs/train.md, 'Several GPUs')",
            ) from exc

    @property
    def rank(self) -> int:
        return self.env.rank

    @property
    def world_size(self) -> int:
        return self.env.world_size

    def _sum(self, values: list[float], dtype: Any) -> list[float]:
        t = self.torch.tensor(values, dtype=dtype, device=self.device)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.SUM)
        return [float(x) for x in t.tolist()]

    def agree(self, stop: bool, index: int) -> tuple[bool, int]:
        """Before a step: (stop agreed, the step rank 0 names). Rank 0 gives ``index``, the others 0."""
        if self.stopped:
            return True, 0
        mine = index if self.rank == 0 else 0
        total_stop, step = self._sum([1.0 if stop else 0.0, float(mine)], self.torch.float64)
        if total_stop > 0:
            self.stopped = True
        return self.stopped, int(step)

    def mean(self, value: float) -> float:
        """The mean of ``value`` over the ranks (NaN anywhere stays NaN)."""
        return self._sum([value], self.torch.float64)[0] / self.world_size

    def all_fit(self, fits: bool) -> int:
        """How many ranks' memory checks failed (each rank checked its own device)."""
        return int(self._sum([0.0 if fits else 1.0], self.torch.float64)[0])

    def gather(self, mine: dict[str, Any]) -> list[dict[str, Any]]:
        """Every rank's ``mine``, in rank order."""
        out: list[Any] = [None] * self.world_size
        self.dist.all_gather_object(out, mine)
        return [dict(x) if isinstance(x, dict) else {} for x in out]

    def close(self) -> None:
        if self.dist.is_initialized():
            self.dist.destroy_process_group()


def host_name() -> str:
    return socket.gethostname()


__all__ = [
    "DEFAULT_TIMEOUT_S",
    "INIT_METHOD_VAR",
    "TIMEOUT_VAR",
    "DistEnv",
    "Group",
    "dist_env",
    "host_name",
    "process_rank",
]
