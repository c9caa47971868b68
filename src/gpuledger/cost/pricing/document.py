"""The typed document of a run's cost: ``RunCost.document()`` -> ``CostDocument``, whose dump is the
``cost --json`` document (its shape is pinned by tests/golden) and which the renderers read.

Money keys carry the currency (``usd_per_hour``, ``usd_per_1m_output_tokens``, ``output_tokens_per_usd``,
``labour_rate_usd_per_hour``): the models hold the figures as typed fields (``UnitPrice``: the unit, per how
many, the value) and ``MoneyKeys`` names every such key, in one place, when a document is dumped — and finds
it again when a stored one is read back (``CostDocument.read``). A workload kind's own figures (text
generation's input/output split and price at the SLOs, a training run's MFU block and job) are its
``PricingExtras``: the kind's ``pricing`` facet makes them and lists them in ``EXTRAS`` (so a stored document
is read back with its kind's extras).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, SerializeAsAny, ValidationError, model_serializer

from gpuledger.cost.pricing.model import HourlyCost
from gpuledger.cost.pricing.profile import Mode
from gpuledger.errors import InvalidInputError
from gpuledger.records import RunSummary, UnitInfo

DeviceKind = Literal["gpu", "cpu", "unknown"]
Scalar = float | int | str | bool | None
# How a price is qualified: the run's own, at the SLOs (only the requests that met them), or one of the
# parts a price is split into (text generation: input and output tokens priced separately).
Qualifier = Literal["", "at SLO", "priced separately"]
COMPONENTS = ("capex", "rental", "energy", "labour", "other")


class Doc(BaseModel):
    """A part of an output document: strict (no unknown key) and immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class MoneyKeys:
    """The keys of money figures in one currency (``USD`` -> ``usd``): every key of a cost document that
    names its currency is made here."""

    def __init__(self, currency: str) -> None:
        self.currency = currency
        self.prefix = currency.lower()

    @property
    def total(self) -> str:
        """``usd``: an amount (a training job's cost)."""
        return self.prefix

    def per_hour(self, component: str | None = None) -> str:
        """``usd_per_hour``, ``capex_usd_per_hour``."""
        return f"{component}_{self.prefix}_per_hour" if component else f"{self.prefix}_per_hour"

    def rate_per_hour(self, what: str) -> str:
        """``labour_rate_usd_per_hour``: a price per hour of something (not of the deployment)."""
        return f"{what}_rate_{self.prefix}_per_hour"

    @property
    def by_component(self) -> str:
        """``usd_by_component``."""
        return f"{self.prefix}_by_component"

    def price(self, price: UnitPrice) -> str:
        """``usd_per_1m_output_tokens``, ``usd_per_1k_images``, ``usd_per_request``, ``…_at_slo``."""
        return price.info.price_key(self.prefix) + ("_at_slo" if price.qualifier == "at SLO" else "")

    def units_per(self, y: UnitYield) -> str:
        """``output_tokens_per_usd``: how many units one currency unit buys."""
        return y.info.per_money_key(self.prefix)


def _take(data: dict[str, Any], key: str, what: str) -> Any:
    if key not in data:
        raise InvalidInputError(f"stored cost document: no {key!r} ({what})")
    return data.pop(key)


# ---- units of work --------------------------------------------------------------------------------
class UnitPrice(Doc):
    """What ``per`` of ``unit`` cost in the document's currency; None: the run did no such work, or the
    price cannot be made (the document says why)."""

    unit: str
    plural: str
    per: float
    short: str | None = None
    value: float | None
    qualifier: Qualifier = ""

    @classmethod
    def of(cls, unit: str, info: UnitInfo, value: float | None, qualifier: Qualifier = "") -> UnitPrice:
        return cls(unit=unit, plural=info.plural, per=info.price_per, short=info.short, value=value,
                   qualifier=qualifier)

    @property
    def info(self) -> UnitInfo:
        return UnitInfo(plural=self.plural, price_per=self.per, short=self.short)

    def label(self, currency: str) -> str:
        """``"USD per 1M output tokens"``, ``"USD per 1M output tokens at SLO"``."""
        text = f"{currency} {self.info.per_text()}"
        if self.qualifier == "at SLO":
            return f"{text} at SLO"
        if self.qualifier == "priced separately":
            return f"priced separately: {text}"
        return text


class UnitYield(Doc):
    """How many of ``unit`` one currency unit buys."""

    unit: str
    plural: str
    value: float | None

    @classmethod
    def of(cls, unit: str, info: UnitInfo, value: float | None) -> UnitYield:
        return cls(unit=unit, plural=info.plural, value=value)

    @property
    def info(self) -> UnitInfo:
        return UnitInfo(plural=self.plural, price_per=1.0)


class UnitRate(Doc):
    """A rate of one unit, under the key the run's kind names it (``output_tokens_per_s``)."""

    unit: str
    key: str
    value: float | None


class UnitEnergy(Doc):
    """Joules per one of ``unit`` (``joules_per_output_token``)."""

    unit: str
    singular: str
    singular_key: str
    value: float | None

    @property
    def key(self) -> str:
        return f"joules_per_{self.singular_key}"


# ---- the parts of a cost ---------------------------------------------------------------------------
class GpuRef(Doc):
    """A catalog GPU: its key and name."""

    key: str
    name: str


class ProfileRef(Doc):
    name: str
    mode: Mode
    description: str


class Devices(Doc):
    kind: DeviceKind
    count: int
    names: list[str]
    idle_gpus: list[str]


class DevicePower(Doc):
    """The power one device is priced at, and where it comes from (``why``: why it is not measured)."""

    device: str
    name: str
    power_w: float
    power_source: str | None = None
    why: str | None = None

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        return {k: v for k, v in out.items() if v is not None or k == "power_w"}


class Power(Doc):
    """Serving, idle and average device power (None: not priced — a rental includes energy)."""

    serving_w: float | None
    idle_w: float | None
    average_w: float | None
    power_source: str
    estimate: bool
    per_device: list[DevicePower]


class HourlyShares(Doc):
    """A figure per hourly-cost component (currency per hour, a share, a difference)."""

    capex: float
    rental: float
    energy: float
    labour: float
    other: float

    def items(self) -> list[tuple[str, float]]:
        """(component, figure) in the order of ``COMPONENTS``."""
        return [(name, getattr(self, name)) for name in COMPONENTS]


class Hourly(Doc):
    """What one wall-clock hour costs, by component (``cost.pricing.model.HourlyCost``)."""

    currency: str
    mode: Mode
    total: float
    capex: float
    rental: float
    energy: float
    labour: float
    labour_setup: float
    labour_maintenance: float
    other: float
    shares: HourlyShares
    priced_power_w: float | None
    gpu_count: int

    def components(self) -> list[tuple[str, float]]:
        """(component, currency per hour): capex, rental, energy, labour, other."""
        return [(name, getattr(self, name)) for name in COMPONENTS]

    def share(self, component: str) -> float:
        value: float = getattr(self.shares, component)
        return value

    @model_serializer(mode="plain")
    def _dump(self) -> dict[str, Any]:
        m = MoneyKeys(self.currency)
        return {
            "currency": self.currency,
            "mode": self.mode,
            m.per_hour(): self.total,
            **{m.per_hour(k): getattr(self, k) for k in ("capex", "rental", "energy", "labour",
                                                          "labour_setup", "labour_maintenance", "other")},
            "shares": self.shares.model_dump(),
            "priced_power_w": self.priced_power_w,
            "gpu_count": self.gpu_count,
        }

    @classmethod
    def of(cls, h: HourlyCost, *, power_known: bool = True) -> Hourly:
        """The hourly cost as a document part (``power_known`` False: no power priced — a rental)."""
        return cls(
            currency=h.currency, mode=h.mode, total=h.total, capex=h.capex, rental=h.rental, energy=h.energy,
            labour=h.labour, labour_setup=h.labour_setup, labour_maintenance=h.labour_maintenance,
            other=h.other, shares=HourlyShares(**h.shares()),
            priced_power_w=h.power_w if power_known else None, gpu_count=h.gpu_count,
        )

    @classmethod
    def read(cls, data: Mapping[str, Any]) -> Hourly:
        d = dict(data)
        currency = str(_take(d, "currency", "hourly"))
        m = MoneyKeys(currency)
        fields: dict[str, Any] = {"currency": currency, "total": _take(d, m.per_hour(), "hourly total")}
        for k in ("capex", "rental", "energy", "labour", "labour_setup", "labour_maintenance", "other"):
            fields[k] = _take(d, m.per_hour(k), "hourly component")
        return cls.model_validate({**d, **fields})


class Throughput(Doc):
    """The rate of every unit the run's kind reports, the headline units served per hour, and where the
    rates come from."""

    rates: list[UnitRate]
    served_per_hour: UnitRate
    source: str

    def rate(self, unit: str) -> float | None:
        return next((r.value for r in self.rates if r.unit == unit), None)

    @model_serializer(mode="plain")
    def _dump(self) -> dict[str, Any]:
        return {**{r.key: r.value for r in self.rates}, self.served_per_hour.key: self.served_per_hour.value,
                "source": self.source}


class Energy(Doc):
    """Energy over the priced window and per unit of work; ``joules`` None with the ``reason``."""

    joules: float | None
    method: str | None = None
    reason: str | None = None
    estimate: bool | None = None
    basis: Literal["published"] | None = None
    excludes: str | None = None
    per_unit: list[UnitEnergy] = []

    def per(self, unit: str) -> float | None:
        """Joules per one of ``unit`` (None: not known)."""
        return next((e.value for e in self.per_unit if e.unit == unit), None)

    @property
    def measured(self) -> bool:
        """Known and measured (not an estimate, not the publisher's)."""
        return self.joules is not None and not self.estimate and self.basis is None

    def how(self) -> str:
        """``"measured"``, ``"estimate"`` or ``"published"``: what the figure is."""
        return self.basis or ("estimate" if self.estimate else "measured")

    @model_serializer(mode="plain")
    def _dump(self) -> dict[str, Any]:
        out: dict[str, Any] = {"joules": self.joules}
        for name in ("method", "reason", "estimate", "basis", "excludes"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out | {e.key: e.value for e in self.per_unit}


class Labour(Doc):
    setup_hours: float
    setup_hours_source: str
    maintenance_hours_per_month: float
    labour_rate_per_hour: float
    currency: str

    @model_serializer(mode="plain")
    def _dump(self) -> dict[str, Any]:
        return {
            "setup_hours": self.setup_hours,
            "setup_hours_source": self.setup_hours_source,
            "maintenance_hours_per_month": self.maintenance_hours_per_month,
            MoneyKeys(self.currency).rate_per_hour("labour"): self.labour_rate_per_hour,
        }


class StageRow(Doc):
    """One stage of a sweep: its load, its headline rate, its SLO attainment and what it would cost per
    headline unit under the same hourly cost."""

    stage: str
    params: dict[str, Scalar]
    rate: UnitRate
    slo_met_ratio: float | None
    num_ok: int
    price: UnitPrice
    currency: str

    @model_serializer(mode="plain")
    def _dump(self) -> dict[str, Any]:
        return {"stage": self.stage, **self.params, self.rate.key: self.rate.value,
                "slo_met_ratio": self.slo_met_ratio, "num_ok": self.num_ok,
                MoneyKeys(self.currency).price(self.price): self.price.value}


class OperatingPointDoc(Doc):
    """The stage of a sweep that is priced, the rule that chose it, and every stage."""

    stage: str
    rule: str
    stages: list[StageRow]


class SourcedValue(Doc):
    """A figure and where it comes from."""

    value: float
    source: str


class InputRow(Doc):
    value: float | int | str | None
    unit: str
    source: str


class EfficiencyDoc(Doc):
    """MBU, MFU and prefill MFU with their inputs (``cost.pricing.efficiency.Efficiency``)."""

    origin: str | None
    label: str
    mbu: float | None
    mfu: float | None
    prefill_mfu: float | None
    prefill_mfu_lower_bound: bool
    reasons: dict[str, str]
    applies: bool
    gpu: str | None
    devices: int | None
    model: str | None
    dtype: str | None
    basis: dict[str, Scalar]
    assumptions: list[str]
    premises: list[str] | None = None
    provenance: str | None = None
    method: str

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        for name in ("premises", "provenance"):
            if out.get(name) is None:
                out.pop(name, None)
        return out


class PriceSplit(Doc):
    """A price divided between parts of the work by a rule (text generation: the hourly cost between input
    and output tokens), each part's price; ``share`` is the first part's share of the cost (dumped under
    ``share_key``). ``rule`` None: no split can be made (``reason`` says why; every part's price None)."""

    rule: str | None
    reason: str | None = None
    share: float | None = None
    share_key: str
    parts: list[UnitPrice]

    def entries(self, money: MoneyKeys) -> dict[str, Any]:
        out: dict[str, Any] = {"rule": self.rule}
        if self.reason is not None:
            out["reason"] = self.reason
        if self.share is not None:
            out[self.share_key] = self.share
        return out | {money.price(p): p.value for p in self.parts}

    @classmethod
    def read(cls, data: Mapping[str, Any], money: MoneyKeys, parts: Sequence[UnitPrice],
             share_key: str) -> PriceSplit:
        d = dict(data)
        found = [p.model_copy(update={"value": _take(d, money.price(p), "a part's price")}) for p in parts]
        share = d.pop(share_key, None)
        return cls.model_validate({**d, "share": share, "share_key": share_key, "parts": found})


class PricingExtras(Doc, ABC):
    """What a workload kind adds to its runs' cost documents. ``items`` are the top-level entries of the
    dumped document; ``prices`` the prices a renderer lists beside the run's own (labelled); ``notes`` the
    lines that say how they were made. ``read`` takes its entries back out of a stored document (None: the
    document has none)."""

    @abstractmethod
    def items(self, money: MoneyKeys) -> dict[str, Any]:
        """The entries this adds to the dumped document (its money keys named by ``money``)."""

    def prices(self) -> list[UnitPrice]:
        return []

    def notes(self) -> list[tuple[str, str]]:
        return []

    def split(self) -> PriceSplit | None:
        """The price divided between parts of the work, when the kind divides it."""
        return None

    @classmethod
    @abstractmethod
    def read(cls, data: dict[str, Any], money: MoneyKeys) -> Self | None:
        """Its entries taken out of a stored document's ``data`` (None: it has none)."""


class CostDocument(Doc):
    """``gpuledger cost RUN --json``: the run priced under one profile, every input with its source."""

    run_id: str
    label: str
    model: str
    engine: str
    status: str
    currency: str
    profile: ProfileRef
    devices: Devices
    utilisation: float
    power: Power
    hourly: Hourly
    throughput: Throughput
    efficiency: EfficiencyDoc | None = None  # None: not computable (stored before MBU/MFU: absent)
    prices: list[UnitPrice]
    yields: list[UnitYield]
    extras: list[SerializeAsAny[PricingExtras]] = []
    energy: Energy
    labour: Labour
    operating_point: OperatingPointDoc | None = None
    inputs: dict[str, InputRow]
    assumptions: list[str]
    warnings: list[str]

    def price(self, unit: str) -> float | None:
        """The price of ``unit`` (per its own quantum), None when the run did no such work."""
        return next((p.value for p in self.prices if p.unit == unit), None)

    def extra(self, kind: type[PricingExtras]) -> PricingExtras | None:
        return next((e for e in self.extras if isinstance(e, kind)), None)

    def with_extra(self, extra: PricingExtras) -> CostDocument:
        """The document with one more of its kind's figures (``cost --train-tokens``: the job)."""
        return self.model_copy(update={"extras": [*self.extras, extra]})

    @model_serializer(mode="plain")
    def _dump(self) -> dict[str, Any]:
        m = MoneyKeys(self.currency)
        out: dict[str, Any] = {
            "run_id": self.run_id, "label": self.label, "model": self.model, "engine": self.engine,
            "status": self.status, "currency": self.currency, "profile": self.profile,
            "devices": self.devices, "utilisation": self.utilisation, "power": self.power,
            "hourly": self.hourly, "throughput": self.throughput, "efficiency": self.efficiency,
            m.per_hour(): self.hourly.total,
        }
        out |= {m.price(p): p.value for p in self.prices}
        out |= {m.units_per(y): y.value for y in self.yields}
        for extra in self.extras:
            out |= extra.items(m)
        out |= {"energy": self.energy, "labour": self.labour}
        if self.operating_point is not None:
            out["operating_point"] = self.operating_point
        return out | {"inputs": self.inputs, "assumptions": self.assumptions, "warnings": self.warnings}

    @classmethod
    def read(cls, stored: Mapping[str, Any], summary: RunSummary,
             extras: Sequence[type[PricingExtras]] = ()) -> CostDocument:
        """A stored ``cost --json`` document (``store.save_cost_evaluation``) read back: the money keys are
        found by the units of ``summary`` (the priced run's), a kind's entries by its ``extras`` classes.
        ``InvalidInputError`` when the document is not one (or not of this run's units)."""
        try:
            return cls._read(dict(stored), summary, extras)
        except (ValidationError, TypeError, ValueError) as exc:
            raise InvalidInputError(f"stored cost document not readable: {exc}") from exc

    @classmethod
    def _read(cls, d: dict[str, Any], summary: RunSummary,
              extras: Sequence[type[PricingExtras]]) -> CostDocument:
        currency = str(_take(d, "currency", "its currency"))
        m = MoneyKeys(currency)
        _take(d, m.per_hour(), "the hourly cost")
        units = {u: summary.unit(u) for u in summary.work()}
        units |= {u: summary.unit(u) for u in [*summary.price_units(), *summary.yield_units()]}
        prices, yields = [], []
        for u in summary.price_units():
            price = UnitPrice.of(u, units[u], None)
            if m.price(price) in d:
                prices.append(price.model_copy(update={"value": d.pop(m.price(price))}))
        for u in summary.yield_units():
            y = UnitYield.of(u, units[u], None)
            if m.units_per(y) in d:
                yields.append(y.model_copy(update={"value": d.pop(m.units_per(y))}))
        found = [e for e in (kind.read(d, m) for kind in extras) if e is not None]
        throughput = dict(_take(d, "throughput", "the rates"))
        rates = [UnitRate(unit=u, key=k, value=throughput.pop(k))
                 for u, k in summary.rate_keys() if k in throughput]
        source = throughput.pop("source")
        (served_key, served), *rest = throughput.items() or [("", None)]
        if rest or not served_key:
            raise InvalidInputError(f"stored cost document: unknown rates {sorted(throughput)}")
        head = summary.headline()
        energy = dict(_take(d, "energy", "the energy"))
        per_unit = []
        for u in summary.yield_units():
            info = units[u]
            e = UnitEnergy(unit=u, singular=info.singular, singular_key=info.singular_key, value=None)
            if e.key in energy:
                per_unit.append(e.model_copy(update={"value": energy.pop(e.key)}))
        labour = dict(_take(d, "labour", "the labour"))
        labour_rate = _take(labour, m.rate_per_hour("labour"), "the labour rate")
        op = d.pop("operating_point", None)
        return cls.model_validate({
            **d,
            "currency": currency,
            "hourly": Hourly.read(_take(d, "hourly", "the hourly cost")),
            "throughput": {"rates": rates, "source": source,
                           "served_per_hour": UnitRate(unit=head, key=served_key, value=served)},
            "prices": prices,
            "yields": yields,
            "extras": found,
            "energy": {**energy, "per_unit": per_unit},
            "labour": {**labour, "labour_rate_per_hour": labour_rate, "currency": currency},
            "operating_point": None if op is None else _read_operating_point(op, summary, m),
        })


def _read_operating_point(op: Mapping[str, Any], summary: RunSummary, m: MoneyKeys) -> dict[str, Any]:
    head = summary.headline()
    info = summary.unit(head)
    rate_key = summary.rate_key(head)
    price = UnitPrice.of(head, info, None)
    rows = []
    for stage in op["stages"]:
        row = dict(stage)
        fixed = {
            "stage": row.pop("stage"),
            "rate": UnitRate(unit=head, key=rate_key, value=row.pop(rate_key, None)),
            "slo_met_ratio": row.pop("slo_met_ratio", None),
            "num_ok": row.pop("num_ok"),
            "price": price.model_copy(update={"value": row.pop(m.price(price), None)}),
            "currency": m.currency,
        }
        rows.append({**fixed, "params": row})
    return {"stage": op["stage"], "rule": op["rule"], "stages": rows}


__all__ = [
    "CostDocument",
    "DevicePower",
    "Devices",
    "Doc",
    "EfficiencyDoc",
    "Energy",
    "GpuRef",
    "Hourly",
    "HourlyShares",
    "InputRow",
    "Labour",
    "MoneyKeys",
    "OperatingPointDoc",
    "Power",
    "PriceSplit",
    "PricingExtras",
    "ProfileRef",
    "SourcedValue",
    "StageRow",
    "Throughput",
    "UnitEnergy",
    "UnitPrice",
    "UnitRate",
    "UnitYield",
]
