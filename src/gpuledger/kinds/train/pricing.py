"""The train kind's ``pricing`` facet: what only a training run's price has — the MFU and the devices beside
the price (every cost document of a training run, ``training``: ``cost_extras``, found by ``cost.runcost``
through the registry), and the cost of a whole job (``gpuledger cost RUN --train-tokens N``: ``job_cost``).

A job of ``N`` training tokens on the stack the run measured (``job_cost``):

- compute hours = N ÷ (training tokens/s × 3600): the devices busy training at the measured rate;
- hours = compute hours ÷ utilisation: the wall-clock hours paid for, the profile's utilisation being the
  share of them the hardware trains (the same utilisation every price of the run is divided by);
- cost = hours × the hourly cost (hardware or rental, energy, labour — setup amortised and maintenance —
  and other opex) = N × the price of a training token; by component, each hourly component × hours;
- device-hours = hours × the devices priced; steps = N ÷ tokens per step;
- energy (``job_energy``, an estimate: the measured window extrapolated to the job) = what the hourly price's
  energy is: (compute hours × serving W + idle hours × idle W) × PUE, idle hours = hours − compute hours,
  with the power the price uses (cost/pricing/power.py: measured, the profile's or a catalog TDP, the
  profile's ``host_power_w`` added; idle at the profile's ``idle_power_w``, else at serving power, an upper
  bound). Under an ownership profile energy_kwh × electricity price is the job's energy cost; a rental's
  price has its energy in it (figured only when the run measured power).
"""

from __future__ import annotations

import math
from typing import Any, Self

from gpuledger.cost.pricing.document import COMPONENTS, Doc, HourlyShares, MoneyKeys, PricingExtras
from gpuledger.cost.pricing.model import SECONDS_PER_HOUR
from gpuledger.cost.pricing.runcost import RunCost
from gpuledger.errors import InvalidInputError, UsageError
from gpuledger.kinds.train.summary import TrainingSummary

MAX_TRAIN_TOKENS = 1e18


class TrainingFigures(Doc):
    """The ``training`` block of a training run's cost document: its MFU and the devices beside the price."""

    mfu: float | None
    mfu_reason: str | None
    model_flops_per_token: float | None
    model_flops_method: str | None
    world_size: int
    gpus_priced: int | None
    tokens_per_step: float | None
    samples_per_step: float | None
    seq_len: int | None
    warnings: list[str]


class TrainingPricing(PricingExtras):
    """A training run's own figures in its cost document (``training``)."""

    training: TrainingFigures

    def items(self, money: MoneyKeys) -> dict[str, Any]:
        return {"training": self.training}

    @classmethod
    def read(cls, data: dict[str, Any], money: MoneyKeys) -> Self | None:
        block = data.pop("training", None)
        return None if block is None else cls(training=TrainingFigures.model_validate(block))


class JobEnergy(Doc):
    """A job's energy as its hourly price counts it: an estimate, the run's window extrapolated."""

    kwh: float
    training_kwh: float
    idle_kwh: float
    pue: float
    serving_w: float
    idle_w: float
    idle_hours: float
    estimate: bool
    assumes: list[str]
    priced: str
    method: str


class TrainingJob(PricingExtras):
    """``cost RUN --train-tokens N`` (``training_job``): the hours and money to train N tokens on the stack
    the run measured, the money by component, and the job's energy (None: no power known: its
    ``energy_reason``)."""

    train_tokens: float
    training_tokens_per_s: float
    steps: float | None
    compute_hours: float
    hours: float
    days: float
    utilisation: float
    device_hours: float | None
    devices: int | str  # the devices priced, or the run's kind ("cpu") when it priced none
    per_hour: float
    total: float
    by_component: HourlyShares  # currency per component over the job's hours
    energy_kwh: float | None
    energy_reason: str | None
    energy: JobEnergy | None
    currency: str
    method: str

    def items(self, money: MoneyKeys) -> dict[str, Any]:
        job = {
            "train_tokens": self.train_tokens,
            "training_tokens_per_s": self.training_tokens_per_s,
            "steps": self.steps,
            "compute_hours": self.compute_hours,
            "hours": self.hours,
            "days": self.days,
            "utilisation": self.utilisation,
            "device_hours": self.device_hours,
            "devices": self.devices,
            money.per_hour(): self.per_hour,
            money.total: self.total,
            money.by_component: self.by_component,
            "energy_kwh": self.energy_kwh,
            "energy_reason": self.energy_reason,
            "energy": self.energy,
            "currency": self.currency,
            "method": self.method,
        }
        return {"training_job": job}

    @classmethod
    def read(cls, data: dict[str, Any], money: MoneyKeys) -> Self | None:
        job = data.pop("training_job", None)
        if job is None:
            return None
        d = dict(job)
        fields = {"per_hour": d.pop(money.per_hour()), "total": d.pop(money.total),
                  "by_component": d.pop(money.by_component)}
        return cls.model_validate({**d, **fields})


def cost_extras(cost: RunCost) -> TrainingPricing | None:
    """The ``training`` block of a training run's cost document."""
    s = cost.summary
    if not isinstance(s, TrainingSummary):
        return None
    priced = cost.inputs.gpu_count if cost.kind == "gpu" else None
    warnings = []
    if priced is not None and priced < s.world_size:
        warnings.append(
            f"the run trained on {s.world_size} ranks but {priced} GPU(s) are priced (telemetry saw only "
            f"this node's): pass --gpus {s.world_size}"
        )
    return TrainingPricing(training=TrainingFigures(
        mfu=s.mfu,
        mfu_reason=s.mfu_reason,
        model_flops_per_token=s.model_flops_per_token,
        model_flops_method=s.model_flops_method,
        world_size=s.world_size,
        gpus_priced=priced,
        tokens_per_step=s.tokens_per_step,
        samples_per_step=s.samples_per_step,
        seq_len=s.seq_len,
        warnings=warnings,
    ))


def check_train_tokens(value: float) -> float:
    """``--train-tokens``: a positive, finite count up to 1e18 (``UsageError`` naming the bound)."""
    if not (math.isfinite(value) and 0 < value <= MAX_TRAIN_TOKENS):
        raise UsageError(
            f"--train-tokens must be a number of tokens in (0, {MAX_TRAIN_TOKENS:g}], got {value}"
        )
    return value


def job_cost(cost: RunCost, train_tokens: float) -> TrainingJob:
    """The hours and money to train ``train_tokens`` on the run's stack (the module docstring says how);
    ``InvalidInputError`` for a run that is not a training run."""
    s = cost.summary
    if not isinstance(s, TrainingSummary):
        raise InvalidInputError(
            f"--train-tokens prices a training job: run {cost.run.id} is a {s.kind} run (bench --task train)"
        )
    check_train_tokens(train_tokens)
    rate = cost.inputs.rate("training_token") or 0.0
    if rate <= 0:
        raise InvalidInputError(f"run {cost.run.id} measured no training tokens per second: no job to price")
    util = cost.inputs.utilisation
    compute_h = train_tokens / rate / SECONDS_PER_HOUR
    hours = compute_h / util
    hourly = cost.evaluation.hourly
    devices = cost.inputs.gpu_count if cost.kind == "gpu" else None
    energy = job_energy(cost, compute_h, hours)
    per_step = s.tokens_per_step
    components = hourly.components()
    return TrainingJob(
        train_tokens=train_tokens,
        training_tokens_per_s=rate,
        steps=train_tokens / per_step if per_step else None,
        compute_hours=compute_h,
        hours=hours,
        days=hours / 24,
        utilisation=util,
        device_hours=hours * devices if devices else None,
        devices=devices if devices else cost.kind,
        per_hour=hourly.total,
        total=hours * hourly.total,
        by_component=HourlyShares(**{k: components[k] * hours for k in COMPONENTS}),
        energy_kwh=energy.kwh if energy else None,
        energy_reason=None if energy else cost.energy.reason or "no power known to the price",
        energy=energy,
        currency=cost.currency,
        method=(
            "hours = tokens ÷ (training tokens/s × 3600) ÷ utilisation; cost = hours × hourly cost "
            f"(hardware/rental, energy, labour, other opex; profile {cost.profile.name})"
        ),
    )


def job_energy(cost: RunCost, compute_h: float, hours: float) -> JobEnergy | None:
    """The job's energy as its hourly price counts it (the module docstring says how), or None when no
    power is known (a rental profile and a run that measured none: its energy is in the rental)."""
    if not cost.power.known:
        return None
    inp, prof = cost.inputs, cost.profile
    idle_h = max(hours - compute_h, 0.0)
    training_kwh = compute_h * inp.power_serving_w / 1000.0
    idle_kwh = idle_h * inp.power_idle_w / 1000.0
    kwh = (training_kwh + idle_kwh) * prof.pue
    if prof.idle_power_w is not None and inp.power_idle_w != inp.power_serving_w:
        idle_from = f"the profile's idle_power_w ({prof.idle_power_w:g} W per device)"
    else:
        idle_from = "the serving power (no idle_power_w in the profile): an upper bound"
    host = f", the profile's host_power_w {prof.host_power_w:g} W included" if prof.host_power_w else ""
    assumes = [
        f"the run's rate and power hold for the whole job: {compute_h:,.4g} compute hours at "
        f"{inp.power_serving_w:,.1f} W ({cost.power.source}{host})",
        f"{idle_h:,.4g} idle hours (the {1.0 - inp.utilisation:.0%} of {hours:,.4g} paid hours the profile's "
        f"utilisation of {inp.utilisation:.0%} leaves idle) at {inp.power_idle_w:,.1f} W, {idle_from}",
        f"PUE {prof.pue:g} (the profile's facility overhead) on both",
    ]
    priced = (
        f"priced in the energy component at {prof.electricity_per_kwh:g} {prof.currency}/kWh"
        if prof.mode == "ownership" and prof.electricity_per_kwh
        else "not priced on its own: the rental price includes energy" if prof.mode == "rental"
        else "not priced: the profile has no electricity price"
    )
    return JobEnergy(
        kwh=kwh,
        training_kwh=training_kwh,
        idle_kwh=idle_kwh,
        pue=prof.pue,
        serving_w=inp.power_serving_w,
        idle_w=inp.power_idle_w,
        idle_hours=idle_h,
        estimate=True,
        assumes=assumes,
        priced=priced,
        method="energy = (compute hours × serving W + idle hours × idle W) × PUE ÷ 1000, as the hourly "
               "price's energy (average W = utilisation × serving W + (1 − utilisation) × idle W)",
    )


# What this kind adds to a cost document, to read a stored one back (``CostDocument.read``).
EXTRAS: tuple[type[PricingExtras], ...] = (TrainingPricing, TrainingJob)
