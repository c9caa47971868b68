"""The records every part of gpuledger exchanges: a run, its telemetry samples, a doctor run (a request:
``records.request``).

These are the contract between engines/bench (which produce them), the store (which keeps them),
and metrics/cost/report (pure functions over them). Times inside a run are seconds on the run's own
monotonic clock, measured from ``RunInfo.t0_monotonic``; ``RunInfo.started_at`` is the wall-clock
moment of that zero, so a colleague can line a run up with other logs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from gpuledger.records.environment import Environment, load_environment
from gpuledger.records.kinds import kind_of_spec, kind_of_summary
from gpuledger.records.spec import BenchSpec, load_spec
from gpuledger.records.summary import RunSummary
from gpuledger.records.telemetry import DeviceWindow, load_telemetry_summary

# ``cancelled``: stopped (Ctrl-C, SIGTERM) before any request finished — nothing was measured.
RunStatus = Literal["running", "complete", "incomplete", "failed", "cancelled"]
RUN_STATUSES: tuple[RunStatus, ...] = ("running", "complete", "incomplete", "failed", "cancelled")

# The phrases of the client's and the server's warnings that say a run's measured figures are noisy: the
# client's own CPU near a core, a CPU busy with other work. Their producers (``bench.writer``,
# ``bench.workers``, ``engines.torch.device``) write them, the report's "why" lines pick those warnings out
# by them (runs stored earlier carry the same phrases); any other warning is not about noise.
CLIENT_CORE_WARNING = "of one CPU core during the window"
CPU_BUSY_WARNING = "the CPU is busy"
NOISE_WARNINGS = (CLIENT_CORE_WARNING, CPU_BUSY_WARNING)
# The unit every run was stored in before the workload kinds (image and training runs too), and still that
# of text generation's runs (``kinds/text``: what their documents have always said).
LEGACY_UNIT = "token"


def unit_of_run(summary: RunSummary | None, config: BenchSpec) -> str | None:
    """The unit a run is stored in: its workload kind's (``WorkloadKind.unit``: ``image``,
    ``training_token``, ``token`` for text generation), the kind found by its summary, else its spec;
    None for a run of no registered kind."""
    kind = kind_of_summary(summary.kind) if summary is not None else None
    if kind is None:
        kind = kind_of_spec(config.kind)
    return kind.unit if kind is not None else None


@dataclass(slots=True)
class TelemetrySample:
    """One reading. ``t`` is seconds on the run's clock; ``value`` is in base units
    (W, J, bytes, ratio 0..1, °C, Hz). ``device`` is a stable key such as ``nvidia:0`` or ``cpu``."""

    t: float
    device: str
    metric: str
    value: float
    source: str


@dataclass(slots=True)
class RunInfo:
    """The header of a run. ``config`` is the typed spec of what the run was asked to do (a mapping given
    here is read as a stored one: ``records.spec.load_spec``); ``environment`` the typed stack fingerprint
    (a mapping given here is read with ``records.environment.load_environment``). ``summary`` is the cached
    output of the metrics functions (``None`` until the run is summarised) and can be recomputed from the
    requests at any time. ``unit`` is the unit of its workload kind (``unit_of_run``); a run stored before
    the kinds with ``"token"`` whatever it measured reads in its kind's unit (an image run as ``image``).
    ``telemetry_summary`` holds one typed window per device (a mapping given here is read as a stored
    one: ``records.telemetry.load_telemetry_summary``)."""

    id: str
    label: str = ""
    created_at: datetime | None = None
    started_at: datetime | None = None
    status: RunStatus = "running"
    engine: str = ""
    model: str = ""
    base_url: str | None = None
    unit: str = LEGACY_UNIT
    workload: dict[str, Any] = field(default_factory=dict)
    config: BenchSpec = field(default_factory=BenchSpec)
    environment: Environment = field(default_factory=Environment)
    server: dict[str, Any] = field(default_factory=dict)
    summary: RunSummary | None = None
    telemetry_summary: list[DeviceWindow] = field(default_factory=list)
    client: dict[str, Any] = field(default_factory=dict)
    duration_s: float | None = None
    num_requests: int = 0
    finished_at: datetime | None = None

    def __post_init__(self) -> None:
        env: object = self.environment
        if isinstance(env, Mapping):
            self.environment = load_environment(env)
        config: object = self.config
        if isinstance(config, Mapping):
            self.config = load_spec(config, self.engine, workload=self.workload, summary=self.summary)
        windows: object = self.telemetry_summary
        if not isinstance(windows, list) or not all(isinstance(w, DeviceWindow) for w in windows):
            self.telemetry_summary = load_telemetry_summary(windows)
        if self.unit == LEGACY_UNIT:
            self.unit = unit_of_run(self.summary, self.config) or LEGACY_UNIT


@dataclass(slots=True)
class DoctorRunRecord:
    """One ``gpuledger doctor`` run, kept for the setup-labour ledger (seed §2.3, §7.3 step 4).
    ``findings`` holds ``{"id", "layer", "severity", "title"}`` dicts."""

    machine: str
    created_at: datetime
    errors: int
    warnings: int
    findings: list[dict[str, Any]] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    id: int | None = None
