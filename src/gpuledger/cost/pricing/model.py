"""The cost model: what an hour of a deployment costs, and what a unit of its work costs. Pure functions.

hourly cost  = hardware amortisation + energy + labour amortisation + other opex     (ownership)
             = rental + labour amortisation + other opex                             (rental)
hardware     = (gpu_price x gpus + host_price) / (amortisation_months x 730 h)
energy       = average W / 1000 x PUE x electricity_per_kwh
average W    = utilisation x serving W + (1 - utilisation) x idle W
labour       = setup_hours x labour_rate / (amortisation_months x 730 h)
               + maintenance_hours_per_month x labour_rate / 730 h
other        = (hosting_per_month + software_per_month) / 730 h
cost per N units = hourly cost / (units/s x 3600 x utilisation) x N

A unit is whatever the run measured (output tokens, training tokens, images, steps, ...): ``CostInputs``
carries the rate of every unit and which one is the headline; nothing here knows what a unit means.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from gpuledger.cost.pricing.profile import HOURS_PER_MONTH, CostProfile, Mode
from gpuledger.errors import InvalidInputError
from gpuledger.records import UnitInfo, unit_info

SECONDS_PER_HOUR = 3600.0


def unit_price(money: float, units: float, per: float) -> float:
    """What ``per`` units cost when ``units`` of them cost ``money``: the one cost-per-unit formula (the
    run evaluation prices an hour's work with it, the monitor the work of its sliding window)."""
    return money / units * per


def money_prefix(currency: str) -> str:
    """JSON key prefix for money: ``"USD"`` -> ``"usd"`` (``usd_per_hour``), ``"CNY"`` -> ``"cny"``."""
    return currency.lower()


@dataclass(frozen=True, slots=True)
class HourlyCost:
    """What one wall-clock hour of the deployment costs, by component, in ``currency``."""

    currency: str
    mode: Mode
    capex: float
    energy: float
    labour_setup: float
    labour_maintenance: float
    other: float
    rental: float
    power_w: float
    gpu_count: int

    @property
    def labour(self) -> float:
        return self.labour_setup + self.labour_maintenance

    @property
    def total(self) -> float:
        return self.capex + self.rental + self.energy + self.labour + self.other

    def components(self) -> dict[str, float]:
        return {
            "capex": self.capex,
            "rental": self.rental,
            "energy": self.energy,
            "labour": self.labour,
            "other": self.other,
        }

    def shares(self) -> dict[str, float]:
        total = self.total
        return {k: (v / total if total > 0 else 0.0) for k, v in self.components().items()}


def hourly_cost(
    profile: CostProfile, power_w: float, *, gpu_count: int | None = None, setup_hours: float | None = None
) -> HourlyCost:
    """Hourly cost of the deployment drawing ``power_w`` (device watts, before PUE) right now.

    For live accrual (the monitor) pass the measured instantaneous power: cost per second = ``.total / 3600``.
    ``gpu_count`` defaults to the profile's (else 1); ``setup_hours`` to the profile's ``setup_hours``.
    """
    if power_w < 0:
        raise InvalidInputError(f"power_w must be >= 0 (got {power_w})")
    n = gpu_count if gpu_count is not None else (profile.gpu_count or 1)
    if n < 0:
        raise InvalidInputError(f"gpu_count must be >= 0 (got {n})")
    life_h = profile.amortisation_months * HOURS_PER_MONTH
    setup = profile.setup_hours if setup_hours is None else setup_hours
    labour_setup = setup * profile.labour_rate_per_hour / life_h
    labour_maint = profile.maintenance_hours_per_month * profile.labour_rate_per_hour / HOURS_PER_MONTH
    other = (profile.hosting_per_month + profile.software_per_month) / HOURS_PER_MONTH
    capex = energy = rental = 0.0
    if profile.mode == "rental":
        if profile.rental_per_gpu_hour is not None:
            rental = profile.rental_per_gpu_hour * n
        else:
            rental = profile.rental_per_hour or 0.0
    else:
        capex = ((profile.gpu_price or 0.0) * n + profile.host_price) / life_h
        energy = power_w / 1000.0 * profile.pue * (profile.electricity_per_kwh or 0.0)
    return HourlyCost(
        profile.currency, profile.mode, capex, energy, labour_setup, labour_maint, other, rental, power_w, n
    )


@dataclass(frozen=True, slots=True)
class CostInputs:
    """Every number the cost of a run depends on, resolved (recomputation = ``evaluate(replace(...))``).

    ``rates``: units of work per second of the priced window, per unit name; ``headline``: the unit a
    price is quoted in first; ``units``: how each unit is named and per how many a price is quoted."""

    profile: CostProfile
    gpu_count: int
    power_serving_w: float
    power_idle_w: float
    rates: Mapping[str, float]
    headline: str
    units: Mapping[str, UnitInfo] = field(default_factory=dict)
    setup_hours: float = 0.0

    @property
    def utilisation(self) -> float:
        return self.profile.utilisation

    @property
    def average_power_w(self) -> float:
        u = self.utilisation
        return u * self.power_serving_w + (1.0 - u) * self.power_idle_w

    @property
    def headline_rate(self) -> float:
        return self.rates[self.headline]

    def rate(self, unit: str) -> float | None:
        return self.rates.get(unit)

    def unit(self, unit: str) -> UnitInfo:
        return unit_info(unit, self.units.get(unit))

    def scaled(self, factor: float) -> CostInputs:
        """Every rate times ``factor`` (the same work done faster or slower)."""
        return replace(self, rates={k: v * factor for k, v in self.rates.items()})


@dataclass(frozen=True, slots=True)
class Evaluation:
    inputs: CostInputs
    hourly: HourlyCost

    def per_hour(self, unit: str | None = None) -> float | None:
        """Units actually done per wall-clock hour: units/s x 3600 x utilisation (None: not measured)."""
        rate = self.inputs.rate(unit or self.inputs.headline)
        return None if rate is None else rate * SECONDS_PER_HOUR * self.inputs.utilisation

    def cost_per(self, unit: str | None = None, per: float | None = None) -> float | None:
        """What ``per`` units cost (default: the unit's own quantum, e.g. 1M tokens, 1,000 images);
        None when the run did no such work."""
        name = unit or self.inputs.headline
        done = self.per_hour(name)
        if not done:
            return None
        quantum = per if per is not None else self.inputs.unit(name).price_per
        return unit_price(self.hourly.total, done, quantum)

    def per_money(self, unit: str | None = None) -> float | None:
        """Units one currency unit buys."""
        done = self.per_hour(unit)
        return None if done is None else done / self.hourly.total

    def headline_cost(self) -> float:
        value = self.cost_per()
        if value is None:  # evaluate() refuses a zero headline rate
            raise InvalidInputError(f"no {self.inputs.unit(self.inputs.headline).plural} to price")
        return value


def evaluate(inputs: CostInputs) -> Evaluation:
    """The hourly cost at the inputs' average power, with the run's rates attached."""
    head = inputs.rates.get(inputs.headline)
    if head is None or head <= 0:
        raise InvalidInputError(
            f"{inputs.unit(inputs.headline).plural}/s must be > 0 (got {head}): nothing to price"
        )
    for name, rate in inputs.rates.items():
        if rate < 0:
            raise InvalidInputError(f"{inputs.unit(name).plural}/s must be >= 0 (got {rate})")
    hourly = hourly_cost(
        inputs.profile, inputs.average_power_w, gpu_count=inputs.gpu_count, setup_hours=inputs.setup_hours
    )
    if hourly.total <= 0:
        raise InvalidInputError(
            f"profile {inputs.profile.name!r} gives a zero hourly cost: nothing to divide"
        )
    return Evaluation(inputs, hourly)
