"""The typed run summary: what a run measured over its window, computed from its stored records.

``RunSummary`` holds what every kind of run has — the window, how many items (requests, steps, images)
were attempted, finished and failed, why the run stopped early — and ``work()``: the map from unit to
``Work`` that cost, compare, report and the monitor price. Each workload kind subclasses it in its
``summary`` facet (``TextGenerationSummary`` in ``kinds/text/summary.py``, ``ImageSummary`` and
``TrainingSummary`` in their kinds' packages: ``records/kinds.py``) and registers under ``KIND``; a
summary of a kind no workload kind stores can still be stored and priced as ``WorkSummary`` (``work``
given explicitly).

Stored form: ``dump_summary`` writes the model's fields that were set (so what was absent stays absent)
plus ``"kind"`` for every kind but text generation (the only kind that existed before), and the store
adds the schema marker (``SCHEMA_KEY``). ``load_summary`` reads any of them back, upgrading documents
without a marker (schema 1: written before the summary was typed — always text generation).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpuledger.quantity import Quantity
from gpuledger.records.origin import Origin
from gpuledger.records.units import UnitInfo, Work, unit_info
from gpuledger.records.validity import Verdict

SCHEMA_KEY = "$schema"
SCHEMA_VERSION = 2
DEFAULT_KIND = "text_generation"
# How a rate over the run's window is measured, and why it is missing when the window is empty.
WINDOW = "over the measured window"
EMPTY_WINDOW = "the window is empty"


def measured(value: float | None, unit: str, method: str, missing: str) -> Quantity:
    """A figure the run measured (source ``measured``, ``method`` saying over what), or, when ``value`` is
    None, missing with the reason ``missing``."""
    if value is None:
        return Quantity.missing(unit, "measured", missing)
    return Quantity(value, unit, "measured", method)


class Strict(BaseModel):
    """Base of stored models: unknown keys refused, no infinities."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class Interruption(Strict):
    signal: str
    finished_requests: int = Field(ge=0)
    cancelled_in_flight: int = Field(ge=0)


class ErrorExample(Strict):
    index: int
    error: str | None = None


_KINDS: dict[str, type[RunSummary]] = {}


class RunSummary(Strict):
    """What every run has. Subclasses add their own figures and say what work they did."""

    KIND: ClassVar[str] = ""
    # The unit a price of this run is quoted in first ("USD per 1M output tokens").
    HEADLINE: ClassVar[str] = ""
    # The units whose price a cost document lists at its top level (None: every unit of ``work()``), and
    # those it also gives "per currency unit" and "joules per" figures for (None: every unit).
    PRICE_UNITS: ClassVar[tuple[str, ...] | None] = None
    YIELD_UNITS: ClassVar[tuple[str, ...] | None] = None
    # The name of each unit's rate in this summary's own fields (default ``<plural key>_per_s``).
    RATE_KEYS: ClassVar[dict[str, str]] = {}
    # Units that measure the size of one item, compared between runs: (unit, what, per what), e.g.
    # ("output_token", "output lengths", "tokens per request").
    SIZE_UNITS: ClassVar[tuple[tuple[str, str, str], ...]] = ()

    window_s: float = 0.0
    num_requests: int = Field(default=0, ge=0)
    num_ok: int = Field(default=0, ge=0)
    num_failed: int = Field(default=0, ge=0)
    error_rate: float | None = None
    errors: dict[str, int] | None = None
    error_examples: list[ErrorExample] | None = None
    interrupted: Interruption | None = None
    aborted: str | None = None
    # How far the figures can be trusted (``bench.validity.verdict``), stored by the run writer at finish.
    verdict: Verdict | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        kind = cls.__dict__.get("KIND")
        if kind:
            _KINDS[kind] = cls

    # -- what the run did ---------------------------------------------------------------------------
    def work(self) -> dict[str, Work]:
        """Unit name -> work over the window. A subclass says what its figures mean in units."""
        return {}

    def headline(self) -> str:
        """The unit priced first: the class's ``HEADLINE`` when the run did such work, else the first."""
        w = self.work()
        if self.HEADLINE in w:
            return self.HEADLINE
        return next(iter(w), "")

    def unit(self, name: str) -> UnitInfo:
        w = self.work().get(name)
        return unit_info(name, w.unit if w is not None else None)

    def rate(self, name: str) -> float | None:
        w = self.work().get(name)
        return None if w is None else w.per_s

    def rate_key(self, name: str) -> str:
        """The JSON key of the unit's rate: ``output_tokens_per_s``, ``images_per_s``."""
        return self.RATE_KEYS.get(name) or f"{self.unit(name).key}_per_s"

    def rate_keys(self) -> list[tuple[str, str]]:
        """(unit, rate key) for every rate this kind of run reports, measured or not."""
        units = list(self.RATE_KEYS) or list(self.work())
        return [(u, self.rate_key(u)) for u in units]

    def price_units(self) -> list[str]:
        return list(self.PRICE_UNITS) if self.PRICE_UNITS is not None else list(self.work())

    def yield_units(self) -> list[str]:
        return list(self.YIELD_UNITS) if self.YIELD_UNITS is not None else list(self.work())

    def key_figures(self) -> list[tuple[str, Quantity]]:
        """The few measured figures that describe the run at a glance (label, figure), headline rate
        first. A kind of workload adds its own (latency percentiles, seconds per image, ...)."""
        head = self.headline()
        if not head:
            return []
        info = self.unit(head)
        return [(info.plural, measured(self.rate(head), info.rate_text, WINDOW, EMPTY_WINDOW))]

    def origin(self) -> Origin | None:
        """Where the figures come from when the run did not measure them itself (a published point:
        ``kinds/text/published.py``); None for a run gpuledger measured."""
        return None

    def fidelity_notes(self) -> list[str]:
        """Ways the run did not do the work it was asked for (e.g. other output lengths than requested)."""
        return []

    def compute_share(self) -> tuple[float | None, str]:
        """Share of the run's time bound by compute rather than memory bandwidth (what ``estimate`` scales by
        peak FLOP/s), with how it was found; None when this kind of run does not say."""
        return None, f"a {self.kind} run does not say how much of its time is compute-bound"

    def slo_attainment(self) -> float | None:
        """Share of the items that met every SLO the run was given (None: no SLOs)."""
        return None

    def slo_text(self) -> str:
        """The SLO limits as text (``"ttft_ms ≤ 500, tpot_ms ≤ 50"``), "" when none were given."""
        return ""

    def stage_summaries(self) -> list[RunSummary]:
        """The stages of a sweep (each a summary of the same kind, with its load parameters), else []."""
        return []

    def stage_name(self) -> str:
        return ""

    def stage_window(self) -> tuple[float, float] | None:
        """A stage's (start, end) on the run's clock, when recorded; None otherwise."""
        return None

    def stage_params(self) -> dict[str, Any]:
        """The load a stage ran at (``{"concurrency": 4}``), for a stage summary; else {}."""
        return {}

    def without_stages(self) -> RunSummary:
        return self

    @property
    def kind(self) -> str:
        return self.KIND or DEFAULT_KIND

    def amended(self, **fields: Any) -> Self:
        """A copy with ``fields`` set, validated (``interrupted``, ``aborted`` from the run writer)."""
        current = {name: getattr(self, name) for name in self.model_fields_set}
        return self.model_validate({**current, **fields})

    def to_dict(self) -> dict[str, Any]:
        """The summary's JSON document (``dump_summary``)."""
        return dump_summary(self)

    def with_window(self, scale: float) -> RunSummary:
        """The same work done ``scale`` times faster (a what-if): rates x scale, window ÷ scale."""
        return self.rates_scaled(scale, ())

    def rates_scaled(self, scale: float, rates: Iterable[str]) -> Self:
        """A copy with the window ÷ ``scale`` and each field named in ``rates`` (a per-second figure, or one
        in proportion to it) × ``scale``; a rate that is None stays None."""
        update: dict[str, Any] = {"window_s": self.window_s / scale}
        for key in rates:
            value = getattr(self, key)
            update[key] = None if value is None else value * scale
        return self.model_copy(update=update)


class WorkSummary(RunSummary):
    """A run of a kind this module does not know, described by its work alone (``work`` given)."""

    KIND: ClassVar[str] = "work"

    kind_name: str = Field(default="work", alias="kind", min_length=1, max_length=64)
    headline_unit: str = Field(default="", alias="headline", max_length=64)
    work_done: dict[str, Work] = Field(default_factory=dict, alias="work")

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, populate_by_name=True)

    def work(self) -> dict[str, Work]:
        return dict(self.work_done)

    def headline(self) -> str:
        if self.headline_unit in self.work_done:
            return self.headline_unit
        return next(iter(self.work_done), "")

    @property
    def kind(self) -> str:
        return self.kind_name

    def with_window(self, scale: float) -> RunSummary:
        scaled = {
            k: w.model_copy(update={"per_s": None if w.per_s is None else w.per_s * scale})
            for k, w in self.work_done.items()
        }
        return self.model_copy(update={"window_s": self.window_s / scale, "work_done": scaled})


class SummaryError(ValueError):
    """A stored summary that cannot be read (the store maps it to StoreError / InvalidInputError)."""


def summary_class(kind: str) -> type[RunSummary] | None:
    """The summary class stored under ``kind``: the workload kind that stores it has its ``summary`` facet
    imported (``records.kinds``); None when no kind stores it (read as ``WorkSummary``)."""
    if kind not in _KINDS:
        from gpuledger.records.kinds import kind_of_summary

        owner = kind_of_summary(kind)
        if owner is not None:
            owner.facet("summary")
    return _KINDS.get(kind)


def summary_kinds() -> dict[str, type[RunSummary]]:
    """Every summary class of every registered workload kind, by its ``KIND``."""
    from gpuledger.records.kinds import load_facet

    load_facet("summary")
    return dict(_KINDS)


def upgrade_v1(doc: Mapping[str, Any]) -> dict[str, Any]:
    """Schema 1 (before the summary was typed) -> 2. Schema-1 summaries were written by
    ``bench.metrics.summarize`` for text generation, plus ``interrupted``/``aborted`` from the run writer;
    their fields mean the same in schema 2, so the upgrade only states the kind."""
    return {"kind": DEFAULT_KIND, **doc}


def load_summary(doc: Mapping[str, Any] | None) -> RunSummary | None:
    """A stored (or exported) summary document -> the typed summary; ``None`` for an empty document
    (a run that has not been summarised). ``SummaryError`` saying what is wrong otherwise."""
    if not doc:
        return None
    data = dict(doc)
    version = data.pop(SCHEMA_KEY, 1)
    if version == 1:
        data = upgrade_v1(data)
    elif version != SCHEMA_VERSION:
        raise SummaryError(
            f"summary schema {version!r} is not one this gpuledger reads (1..{SCHEMA_VERSION})"
        )
    kind = data.get("kind", DEFAULT_KIND)
    cls = summary_class(kind) if isinstance(kind, str) else None
    if cls is None:
        cls = WorkSummary
    elif cls is not WorkSummary:
        data.pop("kind", None)
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "summary"
        raise SummaryError(f"summary ({kind}): {where}: {first['msg']}") from exc


def dump_summary(summary: RunSummary | None, *, stored: bool = False) -> dict[str, Any]:
    """The summary as JSON types: the fields that were set, ``kind`` for kinds other than text
    generation, and (``stored=True``) the schema marker the store keeps."""
    if summary is None:
        return {}
    out = summary.model_dump(mode="json", exclude_unset=True, by_alias=True)
    if summary.KIND and summary.KIND != DEFAULT_KIND and not isinstance(summary, WorkSummary):
        out = {"kind": summary.KIND, **out}
    elif isinstance(summary, WorkSummary):
        out = {"kind": summary.kind_name, **out}
    if stored:
        out[SCHEMA_KEY] = SCHEMA_VERSION
    return out
