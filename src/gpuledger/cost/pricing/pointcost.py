"""The price of a throughput nobody measured here (a roofline point, a published point interpolated): the
profile's hourly cost for the devices (hardware or rental, energy at the catalog TDP, setup labour from the
caller) over the tokens they serve — the cost model's own formula (``cost/pricing/model.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuledger.catalog import GpuSpec
from gpuledger.cost.pricing.model import SECONDS_PER_HOUR, HourlyCost, hourly_cost, money_prefix, unit_price
from gpuledger.cost.pricing.power import PowerResolution, with_host_and_idle
from gpuledger.cost.pricing.profile import CostProfile
from gpuledger.errors import InvalidInputError


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

    def to_dict(self) -> dict[str, Any]:
        p = money_prefix(self.profile.currency)
        origin = "estimate" if self.rate_origin == "estimate" else f"{self.rate_origin} rate, priced here"
        return {
            "currency": self.profile.currency,
            "profile": {"name": self.profile.name, "mode": self.profile.mode,
                        "description": self.profile.description},
            f"{p}_per_1m_output_tokens": {"value": self.per_1m_output, "origin": origin},
            f"{p}_per_1m_tokens": {"value": self.per_1m_total, "origin": origin},
            "hourly": self.hourly.to_dict(),
            "utilisation": {"value": self.profile.utilisation,
                            "source": self.profile.source_of("utilisation")},
            "setup_hours": {"value": self.setup_hours, "source": self.setup_source},
            "labour_rate_per_hour": {"value": self.profile.labour_rate_per_hour,
                                     "source": self.profile.source_of("labour_rate_per_hour")},
            "price_source": self.profile.source_of(
                "rental_per_gpu_hour" if self.profile.mode == "rental" else "gpu_price"),
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
