"""One device over a run's measured window (:class:`DeviceWindow`): ``RunInfo.telemetry_summary`` holds one
per device the run's telemetry saw. The telemetry sampler makes them (``gpuledger.telemetry.sampler``: the one
energy computation), ``telemetry import`` makes them from a log of the server's node, the run writer adds
each device's figures per stage of a sweep (``stages``); the cost model, the report, ``show``, ``bench``,
``run`` and the gate read their attributes.

Units: ratios 0..1, bytes, W, J, seconds. ``None`` is "not measured" (``unavailable`` says why per metric,
``energy_reason`` why there is no energy figure), never a zero.

Stored as the fields that were set (``dump_window``): what each producer wrote and nothing more, so a run
stored by an older gpuledger dumps as it was stored (its ``show``, ``export`` and ``report`` documents keep
their shape) and a summary that had no ``reasons`` (before the reason codes) is not given an empty one. The
documents stored so far, each read by this model:

- since the first sampler: ``device, vendor, name, uuid, index, mean_util_ratio, peak_util_ratio,
  peak_memory_bytes, memory_total_bytes, mean_power_w, peak_power_w, energy_j, energy_method, energy_reason,
  valid, validity_reason, samples, interval_s, window_s, sources, unavailable``;
- since the energy audit (reason codes, gap limit, both energy figures, the assigned devices): also
  ``reasons, gap_limit_s, integrated_j, counter_j, assigned, assigned_by``;
- a sweep's devices since its power by stage: also ``stages`` (per stage, a :class:`StageWindow`);
- the devices ``monitor`` prices and ``estimate`` makes for a GPU the run did not use: a few of the fields.

``load_window`` upgrades what the readers accepted before this model in documents made by hand or by
another tool (imported, or written into a store with the API): ``key`` for ``device`` (a ``DeviceInfo``'s
spelling), ``sources`` as a mapping of metric to source (its sources, sorted), and no ``vendor`` (every
gpuledger wrote one): the vendor its device key names (every source keys its devices ``<vendor>:<index>``
or ``cpu``). Anything else unknown, a value of the wrong type, a negative or non-finite figure, or one past
:data:`MAX_FIGURE` is refused (``TelemetryRecordError``, naming the field): the store reads such a run as
unreadable, with that reason.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
)

Vendor = Literal["nvidia", "amd", "cpu"]
GPU_VENDORS: tuple[Vendor, ...] = ("nvidia", "amd")
# counter: the hardware energy counter, validated against the integral of sampled power; integrated: that
# integral (gpuledger.telemetry.energy).
EnergyMethod = Literal["counter", "integrated"]

# Past any figure a device can have over a window (1e18 J is 32 years of a gigawatt; 1e18 B an exabyte): a
# larger one is a corrupt document, refused before arithmetic overflows on it.
MAX_FIGURE = 1e18
# Counts (samples, a device index) are 32-bit in the store's other columns too.
MAX_COUNT = 2**31 - 1



def _figure(value: object) -> int | float:
    """A measured figure as stored: a number (not a bool), finite, 0 … ``MAX_FIGURE``; an int stays one."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"is {type(value).__name__}, not a number")
    if isinstance(value, float) and math.isnan(value):
        raise ValueError("is NaN, not a number")
    if value < 0:
        raise ValueError("is negative: no figure of a device over a window is")
    if value > MAX_FIGURE:
        raise ValueError(f"is larger than {MAX_FIGURE:g}, more than any device reads over a window")
    return value


# A measured figure: never negative, finite, an int where it was stored as one (a device's memory total).
Figure = Annotated[int | float, PlainValidator(_figure)]
Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]


class _SetFields(BaseModel):
    """Frozen, strict (no number from text or a bool, no infinity), unknown keys refused; dumped as the
    fields that were set (the module docstring), inside any document that holds it too."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    @model_serializer(mode="wrap")
    def _set_fields(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        dumped: dict[str, Any] = handler(self)
        return {k: v for k, v in dumped.items() if k in self.model_fields_set}


class StageWindow(_SetFields):
    """One device over one stage's window of a sweep: its power, energy and validity there (a sweep is
    priced at one stage, its J per unit that stage's)."""

    window_s: Figure | None = None
    mean_power_w: Figure | None = None
    peak_power_w: Figure | None = None
    energy_j: Figure | None = None
    energy_method: EnergyMethod | None = None
    energy_reason: str | None = None
    valid: bool | None = None
    validity_reason: str | None = None
    reasons: list[str] = Field(default_factory=list)
    mean_util_ratio: Figure | None = None
    peak_util_ratio: Figure | None = None


# The fields a stage's window keeps of the device's (``DeviceWindow.stage``).
STAGE_FIELDS: tuple[str, ...] = tuple(StageWindow.model_fields)


class DeviceWindow(_SetFields):
    """One device over the run's measured window (the module docstring). ``valid`` is False when
    ``reasons`` holds a code (``gpuledger.telemetry.energy.REASON_CODES``), ``validity_reason`` says it in
    words (``None``: not recorded); ``integrated_j`` and ``counter_j`` are the two energy figures the audit
    compared; ``assigned`` / ``assigned_by``: whether the run was assigned this device and what said so
    (``gpuledger.telemetry.assign``; ``None``: nothing did)."""

    device: str
    vendor: Vendor
    name: str = ""
    uuid: str | None = None
    index: Count | None = None
    mean_util_ratio: Figure | None = None
    peak_util_ratio: Figure | None = None
    peak_memory_bytes: Figure | None = None
    memory_total_bytes: Figure | None = None
    mean_power_w: Figure | None = None
    peak_power_w: Figure | None = None
    energy_j: Figure | None = None
    energy_method: EnergyMethod | None = None
    energy_reason: str | None = None
    valid: bool | None = None
    validity_reason: str | None = None
    reasons: list[str] = Field(default_factory=list)
    samples: Count | None = None
    interval_s: Figure | None = None
    window_s: Figure | None = None
    gap_limit_s: Figure | None = None
    integrated_j: Figure | None = None
    counter_j: Figure | None = None
    sources: list[str] = Field(default_factory=list)
    unavailable: dict[str, str] = Field(default_factory=dict)
    assigned: bool | None = None
    assigned_by: str | None = None
    stages: dict[str, StageWindow] | None = None

    @property
    def is_gpu(self) -> bool:
        return self.vendor in GPU_VENDORS

    def stage(self) -> StageWindow:
        """This window's figures as one stage's (``stages``)."""
        return StageWindow.model_validate({k: getattr(self, k) for k in STAGE_FIELDS})

    def with_assignment(self, assigned: bool | None, by: str | None) -> DeviceWindow:
        return self.model_copy(update={"assigned": assigned, "assigned_by": by})

    def with_stage(self, name: str, window: StageWindow) -> DeviceWindow:
        return self.model_copy(update={"stages": {**(self.stages or {}), name: window}})

    def to_dict(self) -> dict[str, Any]:
        return dump_window(self)


class TelemetryRecordError(ValueError):
    """A stored telemetry summary that cannot be read (the store reports it as an unreadable value)."""


def _vendor_of(device: object) -> Vendor | None:
    """The vendor a device key names: every source keys its devices ``<vendor>:<index>`` (``nvidia:0``,
    ``amd:1@node``) or ``cpu``."""
    if not isinstance(device, str):
        return None
    prefix = device.split(":", 1)[0]
    return next((v for v in (*GPU_VENDORS, "cpu") if v == prefix), None)


def upgrade(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The older spellings of the module docstring -> today's fields."""
    data = dict(doc)
    if "key" in data and "device" not in data:
        data["device"] = data.pop("key")
    if "vendor" not in data and (vendor := _vendor_of(data.get("device"))) is not None:
        data["vendor"] = vendor
    sources = data.get("sources")
    if isinstance(sources, Mapping) and all(isinstance(v, str) for v in sources.values()):
        data["sources"] = sorted(set(sources.values()))
    return data


def _where(loc: Iterable[int | str]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


def load_window(doc: Mapping[str, Any] | DeviceWindow, where: str = "telemetry_summary") -> DeviceWindow:
    """A stored (or given) device window -> the model; ``TelemetryRecordError`` naming the field."""
    if isinstance(doc, DeviceWindow):
        return doc
    if not isinstance(doc, Mapping):
        raise TelemetryRecordError(f"{where}: is {type(doc).__name__}, not an object")
    try:
        return DeviceWindow.model_validate(upgrade(doc))
    except ValidationError as exc:
        first = exc.errors()[0]
        more = f" (and {exc.error_count() - 1} more problems)" if exc.error_count() > 1 else ""
        msg = str(first["msg"]).removeprefix("Value error, ")
        raise TelemetryRecordError(f"{where}{_where(first['loc'])}: {msg}{more}") from exc


def load_telemetry_summary(docs: object) -> list[DeviceWindow]:
    """A stored telemetry summary (a list of device windows) -> the models; ``TelemetryRecordError``
    naming the first entry and field that cannot be read."""
    if not isinstance(docs, list | tuple):
        raise TelemetryRecordError(f"telemetry_summary: is {type(docs).__name__}, not a list")
    return [load_window(d, f"telemetry_summary[{i}]") for i, d in enumerate(docs)]


def dump_window(window: DeviceWindow) -> dict[str, Any]:
    """The window as JSON types: the fields that were set (absent stays absent)."""
    dumped: dict[str, Any] = window.model_dump(mode="json")
    return dumped


def dump_telemetry_summary(windows: Iterable[DeviceWindow]) -> list[dict[str, Any]]:
    return [dump_window(w) for w in windows]
