"""The price of a throughput nobody measured here (a roofline point, a published point interpolated): the
profile's hourly cost for the devices (hardware or rental, energy at the catalog TDP, setup labour from the
caller) over the tokens they serve — the cost model's own formula (``cost/pricing/model.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import model_serializer

from gpuledger.catalog import GpuSpec
from gpuledger.cost.pricing.document import Doc, Hourly, MoneyKeys, ProfileRef, SourcedValue, UnitPrice
from gpuledger.cost.pricing.model import SECONDS_PER_HOUR, HourlyCost, hourly_cost, unit_price
from gpuledger.cost.pricing.power import PowerResolution, with_host_and_idle
from gpuledger.cost.pricing.profile import CostProfile
from gpuledger.errors import InvalidInputError
from gpuledger.records import unit_info

OUTPUT, TOTAL = "output_token", "token"  # what a point's price is quoted per


@dataclass(frozen=True, slots=True)
class PointCost:
    profile: CostProfile
    hourly: HourlyCost
    devices: int
    output_tokens_per_s: float
    total_tokens_per_s: float
    setup_hours: float
    setup_source: str
    power_source: str
    rate_origin: str  # "estimate" | "published" | "measured"

    @property
    def per_1m_output(self) -> float:
        served = self.output_tokens_per_s * SECONDS_PER_HOUR * self.profile.utilisation
        return unit_price(self.hourly.total, served, 1e6)

    @property
    def per_1m_total(self) -> float:
        served = self.total_tokens_per_s * SECONDS_PER_HOUR * self.profile.utilisation
        return unit_price(self.hourly.total, served, 1e6)

    def document(self) -> PointCostDoc:
        prof = self.profile
        origin = "estimate" if self.rate_origin == "estimate" else f"{self.rate_origin} rate, priced here"
        return PointCostDoc(
            currency=prof.currency,
            profile=ProfileRef(name=prof.name, mode=prof.mode, description=prof.description),
            prices=[
                OriginPrice(price=UnitPrice.of(OUTPUT, unit_info(OUTPUT), self.per_1m_output), origin=origin),
                OriginPrice(price=UnitPrice.of(TOTAL, unit_info(TOTAL), self.per_1m_total), origin=origin),
            ],
            hourly=Hourly.of(self.hourly),
            utilisation=SourcedValue(value=prof.utilisation, source=prof.source_of("utilisation")),
            setup_hours=SourcedValue(value=self.setup_hours, source=self.setup_source),
            labour_rate_per_hour=SourcedValue(value=prof.labour_rate_per_hour,
                                              source=prof.source_of("labour_rate_per_hour")),
            price_source=prof.source_of("rental_per_gpu_hour" if prof.mode == "rental" else "gpu_price"),
            power_source=self.power_source,
        )


class OriginPrice(Doc):
    """A price and the origin of the rate it divides by (``estimate``, ``published rate, priced here``)."""

    price: UnitPrice
    origin: str


class PointCostDoc(Doc):
    """The price of a point nobody measured here (``estimate MODEL``, ``advise``): per 1M output and per 1M
    tokens, the hourly cost, and every input with its source."""

    currency: str
    profile: ProfileRef
    prices: list[OriginPrice]
    hourly: Hourly
    utilisation: SourcedValue
    setup_hours: SourcedValue
    labour_rate_per_hour: SourcedValue
    price_source: str
    power_source: str

    def price(self, unit: str) -> OriginPrice | None:
        return next((p for p in self.prices if p.price.unit == unit), None)

    @model_serializer(mode="plain")
    def _dump(self) -> dict[str, Any]:
        m = MoneyKeys(self.currency)
        out: dict[str, Any] = {"currency": self.currency, "profile": self.profile}
        out |= {m.price(p.price): {"value": p.price.value, "origin": p.origin} for p in self.prices}
        return out | {
            "hourly": self.hourly, "utilisation": self.utilisation, "setup_hours": self.setup_hours,
            "labour_rate_per_hour": self.labour_rate_per_hour, "price_source": self.price_source,
            "power_source": self.power_source,
        }


def price_point(
    profile: CostProfile,
    spec: GpuSpec,
    devices: int,
    output_tokens_per_s: float,
    total_tokens_per_s: float,
    *,
    setup_hours: float,
    setup_source: str,
    rate_origin: str,
) -> PointCost:
    """Price ``devices`` x ``spec`` serving these rates under ``profile``. Power (ownership only: a rental
    includes it) is the profile's ``power_w``, else the catalog TDP of every device (an estimate)."""
    if output_tokens_per_s <= 0:
        raise InvalidInputError("nothing to price: the throughput is zero")
    if profile.mode == "rental":
        hourly = hourly_cost(profile, 0.0, gpu_count=devices, setup_hours=setup_hours)
        return PointCost(profile, hourly, devices, output_tokens_per_s, total_tokens_per_s, setup_hours,
                         setup_source, "not needed: the rental price includes energy", rate_origin)
    if profile.power_w is not None:
        res = PowerResolution(profile.power_w, profile.power_w, profile.source_of("power_w"), False, False)
    else:
        tdp = spec.device_figure("tdp_w")
        if tdp.value is None:
            raise InvalidInputError(f"{spec.name} has no TDP in the catalog ({tdp.reason})",
                                    hint="set power_w in the cost profile")
        how = f"estimate: catalog TDP {tdp.value:g} W x {devices} device(s), serving at full power"
        res = PowerResolution(tdp.value * devices, tdp.value * devices, how, True, False)
    # The same host and idle power as a measured run's price (cost.power.resolve_power).
    res = with_host_and_idle(res, profile, devices)
    average = profile.utilisation * res.serving_w + (1.0 - profile.utilisation) * res.idle_w
    hourly = hourly_cost(profile, average, gpu_count=devices, setup_hours=setup_hours)
    how = "; ".join([res.source, *res.notes])
    return PointCost(profile, hourly, devices, output_tokens_per_s, total_tokens_per_s, setup_hours,
                     setup_source, how, rate_origin)
