"""Typed views of a run's open documents: ``RunInfo.server`` (who answered, its warnings, its state over the
window, the engine's details), ``RunInfo.client`` (the load generator's own CPU, its warnings, an open-loop
load's send schedule) and the trace record of ``RunInfo.workload``.

Those documents stay stored JSON: their keys differ by engine (each engine's ``after_run`` adds its own) and
by the gpuledger that wrote them. A renderer reads them through these views, which name the keys they read
— a renamed key is a renamed attribute, which mypy follows — and leave the others to the document (they
ignore unknown keys: that is what a view of an open document is). Every field has the default a document
without it means, and a named key whose value the view cannot read (an imported document's, of another
shape) reads as absent: what it said is then "not recorded" on the terminal, never a crash of the command.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gpuledger.bench.server_state import ServerState, StateUnavailable, load_state
from gpuledger.quantity import Quantity


class _View(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    @classmethod
    def read(cls, doc: Mapping[str, Any]) -> Self:
        """The view of ``doc``; the keys whose values it cannot read left out."""
        try:
            return cls.model_validate(doc)
        except ValidationError as exc:
            unreadable = {e["loc"][0] for e in exc.errors() if e["loc"]}
            return cls.model_validate({k: v for k, v in doc.items() if k not in unreadable})


class ServerDetails(_View):
    """What the engine kept of itself (``server.details``); the figures a renderer reads."""

    # The allocator's peak over the run (in-process training: ``engines.torch.trainer``), None: not recorded.
    peak_memory: Quantity | None = None


class ServerView(_View):
    """``RunInfo.server``: the server family and version, its warnings, the engine's details and the
    server's own state over the window (``bench.server_state``; None: the run did not read /metrics)."""

    kind: str = "unknown"
    version: str | None = None
    warnings: list[str] = Field(default_factory=list)
    details: ServerDetails = Field(default_factory=ServerDetails)
    state: ServerState | StateUnavailable | None = None

    @field_validator("state", mode="before")
    @classmethod
    def _state(cls, value: object) -> ServerState | StateUnavailable | None:
        return load_state(value)

    @classmethod
    def of(cls, server: Mapping[str, Any]) -> ServerView:
        return cls.read(server)

    def who(self) -> str:
        """``vllm 0.32.0``: the family and, when the server said it, the version."""
        return self.kind + (f" {self.version}" if self.version else "")


class Lateness(_View):
    """How late the requests of an open-loop load left against their schedule (ms)."""

    mean: float | None = None
    p50: float | None = None
    p99: float | None = None
    max: float | None = None


class SendSchedule(_View):
    """``client.send_schedule`` (``bench.validity.schedule_summary``)."""

    requests: int = 0
    lag_ms: Lateness = Field(default_factory=Lateness)


class ClientView(_View):
    """``RunInfo.client``: the load generator's CPU over the window (one core = ratio 1.0), its warnings,
    and an open-loop load's send schedule (None: the load had none)."""

    cpu_user_s: float | None = None
    cpu_system_s: float | None = None
    wall_s: float | None = None
    cpu_util_ratio: float | None = None
    # The share in percent, as runs stored before the ratio wrote it.
    cpu_percent: float | None = None
    warnings: list[str] = Field(default_factory=list)
    send_schedule: SendSchedule | None = None

    @classmethod
    def of(cls, client: Mapping[str, Any]) -> ClientView:
        return cls.read(client)

    def cpu_share_percent(self) -> float | None:
        """The client's CPU use in percent of one core (None: not recorded)."""
        if self.cpu_percent is not None:
            return self.cpu_percent
        return None if self.cpu_util_ratio is None else self.cpu_util_ratio * 100


class TraceRecord(_View):
    """``workload.trace`` of a run that replayed a trace (``workload.traces.describe``)."""

    format: str | None = None
    arrivals: int = 0
    span_s: float | None = None


class WorkloadView(_View):
    """``RunInfo.workload``: the record of a replayed trace (None: the run replayed none)."""

    trace: TraceRecord | None = None

    @field_validator("trace", mode="before")
    @classmethod
    def _trace(cls, value: object) -> object:
        return value if isinstance(value, Mapping) else None

    @classmethod
    def of(cls, workload: Mapping[str, Any]) -> WorkloadView:
        return cls.read(workload)


__all__ = [
    "ClientView",
    "Lateness",
    "SendSchedule",
    "ServerDetails",
    "ServerView",
    "TraceRecord",
    "WorkloadView",
]
