"""The monitor's status document: what ``gpuledger monitor --json`` prints when it stops, as typed
models (frozen, unknown keys refused). :meth:`MonitorState.status` builds it; its
``model_dump(mode="json")`` is the document, and the terminal summary reads its attributes.

The money figures of the cost block are keyed by the profile's currency (``usd_total``,
``cny_per_hour``): :class:`CostStatus` holds them as ``total`` and ``per_hour`` and names them so in its
dump (and reads them back so named)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer, model_validator

from gpuledger.engines.server_metrics import EngineCounters, EngineKind
from gpuledger.records import EnergyMethod, Vendor

_DOCUMENT = ConfigDict(extra="forbid", frozen=True)

EventKind = Literal["source_up", "source_down", "device_lost", "energy", "alert", "engine_up", "engine",
                    "engine_down"]
CostMode = Literal["ownership", "rental"]


class AlertSettings(BaseModel):
    """The low-utilisation alert's settings (--alert-util, --alert-window)."""

    model_config = _DOCUMENT

    util_ratio: float
    window_s: float


class SourceStatus(BaseModel):
    """A telemetry source: whether it reads now, and why not."""

    model_config = _DOCUMENT

    name: str
    up: bool
    available_at_start: bool
    reason: str | None
    devices: tuple[str, ...]


class DeviceStatus(BaseModel):
    """A device's identity, its latest fresh readings and what the monitor accrued for it."""

    model_config = _DOCUMENT

    device: str
    vendor: Vendor
    name: str
    uuid: str | None
    index: int | None
    accounted: bool
    up: bool
    error: str | None
    sources: tuple[str, ...]
    latest: dict[str, float]  # metric -> latest value, by metric name
    energy_j: float | None  # None: the device has given no power reading and no live counter
    energy_method: EnergyMethod | None
    energy_reason: str | None
    busy_s: float
    low_utilization_alert: bool
    idle_cost: float | None  # None without a cost profile, or for a device that is not priced

    @property
    def util_now(self) -> float | None:
        """The latest utilisation ratio (a GPU's, else the CPU's); None when there is none."""
        return self.latest.get("util_ratio", self.latest.get("cpu_util_ratio"))


class FallbackPower(BaseModel):
    """The power a device is priced at while it reports none, and where the figure comes from."""

    model_config = _DOCUMENT

    watts: float
    source: str


class CostStatus(BaseModel):
    """The cost accrued since the monitor started, by the profile. ``total`` and ``per_hour`` are dumped
    as ``<currency>_total`` and ``<currency>_per_hour`` (lower case)."""

    model_config = _DOCUMENT

    profile: str
    currency: str
    mode: CostMode
    note: str
    total: float
    components: dict[str, float]
    per_hour: float | None
    priced_power_w: float | None
    power_source: str
    energy_reason: str | None
    gpu_count: int
    fallback_power: dict[str, FallbackPower]

    @property
    def total_key(self) -> str:
        return f"{self.currency.lower()}_total"

    @property
    def per_hour_key(self) -> str:
        return f"{self.currency.lower()}_per_hour"

    @model_validator(mode="before")
    @classmethod
    def _currency_keys(cls, data: Any) -> Any:
        """A dumped document names the money figures by its currency: read them back as the fields."""
        if not isinstance(data, dict) or not isinstance(data.get("currency"), str):
            return data
        prefix = data["currency"].lower()
        renames = {f"{prefix}_total": "total", f"{prefix}_per_hour": "per_hour"}
        return {renames.get(k, k): v for k, v in data.items()}

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        dumped: dict[str, Any] = handler(self)
        renames = {"total": self.total_key, "per_hour": self.per_hour_key}
        return {renames.get(k, k): v for k, v in dumped.items()}


class EngineScrape(BaseModel):
    """The serving engine's cumulative counters at its latest scrape."""

    model_config = _DOCUMENT

    engine: EngineKind
    prompt_tokens_total: float | None
    output_tokens_total: float | None
    requests_total: float | None
    e2e_seconds_sum: float | None
    e2e_count: float | None
    models: tuple[str, ...]
    requests_reason: str | None

    @classmethod
    def of(cls, counters: EngineCounters) -> EngineScrape:
        return cls(engine=counters.kind, prompt_tokens_total=counters.prompt_tokens,
                   output_tokens_total=counters.output_tokens, requests_total=counters.requests,
                   e2e_seconds_sum=counters.e2e_sum_s, e2e_count=counters.e2e_count, models=counters.models,
                   requests_reason=counters.requests_reason)


class EngineWindowStatus(BaseModel):
    """The engine's sliding window: differences between its oldest and newest scrape and the rates that
    follow. A figure that cannot be computed is None and ``reasons`` says why, by field name."""

    model_config = _DOCUMENT

    window_s: float
    prompt_tokens: float | None
    output_tokens: float | None
    requests: float | None
    cost: float | None
    busy_device_seconds: float
    allocated_device_seconds: float
    e2e_mean_s: float | None
    output_tokens_per_s: float | None
    requests_per_s: float | None
    cost_per_million_tokens: float | None
    cost_per_million_output_tokens: float | None
    device_seconds_per_request: float | None
    busy_device_seconds_per_request: float | None
    reasons: dict[str, str]


class EngineStatus(BaseModel):
    """The serving engine's endpoint (password redacted), whether it answers, and its window."""

    model_config = _DOCUMENT

    url: str
    up: bool
    reason: str | None
    scrapes: int
    failures: int
    last: EngineScrape | None
    window: EngineWindowStatus | None  # None until two scrapes are in the window


class MonitorEvent(BaseModel):
    """A line the monitor logged (``t_s`` since it started). ``device``, ``active`` and ``source`` are
    set by the kinds that name them (alert, device_lost, source_down) and left out of the dump when not."""

    model_config = _DOCUMENT

    t_s: float
    kind: EventKind
    message: str
    device: str | None = None
    active: bool | None = None
    source: str | None = None

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        dumped: dict[str, Any] = handler(self)
        return {k: v for k, v in dumped.items()
                if not (k in ("device", "active", "source") and v is None)}


class MonitorStatus(BaseModel):
    """Everything the monitor knows at one instant: its sources, devices, cost, engine and last events."""

    model_config = _DOCUMENT

    hostname: str
    uptime_s: float
    interval_s: float
    alert: AlertSettings
    sources: tuple[SourceStatus, ...]
    devices: tuple[DeviceStatus, ...]
    cost: CostStatus | None  # None without a cost profile: ``cost_note`` says why
    cost_note: str
    engine: EngineStatus | None  # None without --engine-metrics
    events: tuple[MonitorEvent, ...]  # the last 200


class _Listening(BaseModel):
    model_config = _DOCUMENT

    listen: str


class MonitorSummary(MonitorStatus, _Listening):
    """What ``gpuledger monitor --json`` prints when it stops: the URL it served (first), then the
    status at the end."""

    @classmethod
    def of(cls, listen: str, status: MonitorStatus) -> MonitorSummary:
        return cls.model_validate({"listen": listen, **dict(status)})


__all__ = [
    "AlertSettings",
    "CostStatus",
    "DeviceStatus",
    "EngineScrape",
    "EngineStatus",
    "EngineWindowStatus",
    "FallbackPower",
    "MonitorEvent",
    "MonitorStatus",
    "MonitorSummary",
    "SourceStatus",
]
