"""What only a training run's price has: the MFU and the devices beside the price (every cost document of a
training run, ``training``), and the cost of a whole job (``gpuledger cost RUN --train-tokens N``).

A job of ``N`` training tokens on the stack the run measured (``job_cost``):

- compute hours = N ÷ (training tokens/s × 3600): the devices busy training at the measured rate;
- hours = compute hours ÷ utilisation: the wall-clock hours paid for, the profile's utilisation being the
  share of them the hardware trains (the same utilisation every price of the run is divided by);
- cost = hours × the hourly cost (hardware or rental, energy, labour — setup amortised and maintenance —
  and other opex) = N × the price of a training token; by component, each hourly component × hours;
- device-hours = hours × the devices priced; steps = N ÷ tokens per step; energy = N × J per training
  token when the run measured it.
"""

from __future__ import annotations

import math
from typing import Any

from gpuledger.cost.model import SECONDS_PER_HOUR, money_prefix
from gpuledger.cost.runcost import RunCost, register_pricing
from gpuledger.errors import InvalidInputError, UsageError
from gpuledger.records.training import TrainingSummary

MAX_TRAIN_TOKENS = 1e18


def _extras(cost: RunCost) -> dict[str, Any]:
    s = cost.summary
    if not isinstance(s, TrainingSummary):
        return {}
    priced = cost.inputs.gpu_count if cost.kind == "gpu" else None
    out: dict[str, Any] = {
        "mfu": s.mfu,
        "mfu_reason": s.mfu_reason,
        "model_flops_per_token": s.model_flops_per_token,
        "model_flops_method": s.model_flops_method,
        "world_size": s.world_size,
        "gpus_priced": priced,
        "tokens_per_step": s.tokens_per_step,
        "samples_per_step": s.samples_per_step,
        "seq_len": s.seq_len,
        "warnings": [],
    }
    if priced is not None and priced < s.world_size:
        out["warnings"].append(
            f"the run trained on {s.world_size} ranks but {priced} GPU(s) are priced (telemetry saw only "
            f"this node's): pass --gpus {s.world_size}"
        )
    return {"training": out}


def check_train_tokens(value: float) -> float:
    """``--train-tokens``: a positive, finite count up to 1e18 (``UsageError`` naming the bound)."""
    if not (math.isfinite(value) and 0 < value <= MAX_TRAIN_TOKENS):
        raise UsageError(
            f"--train-tokens must be a number of tokens in (0, {MAX_TRAIN_TOKENS:g}], got {value}"
        )
    return value


def job_cost(cost: RunCost, train_tokens: float) -> dict[str, Any]:
    """The hours and money to train ``train_tokens`` on the run's stack (the module docstring says how);
    ``InvalidInputError`` for a run that is not a training run."""
    s = cost.summary
    if not isinstance(s, TrainingSummary):
        raise InvalidInputError(
            f"--train-tokens prices a training job: run {cost.run.id} is a {s.kind} run (bench --task train)"
        )
    check_train_tokens(train_tokens)
    p = money_prefix(cost.currency)
    rate = cost.inputs.rate("training_token") or 0.0
    if rate <= 0:
        raise InvalidInputError(f"run {cost.run.id} measured no training tokens per second: no job to price")
    util = cost.inputs.utilisation
    compute_h = train_tokens / rate / SECONDS_PER_HOUR
    hours = compute_h / util
    hourly = cost.evaluation.hourly
    devices = cost.inputs.gpu_count if cost.kind == "gpu" else None
    joules = cost.energy.get("joules_per_training_token")
    energy_kwh = train_tokens * joules / 3.6e6 if isinstance(joules, int | float) else None
    per_step = s.tokens_per_step
    return {
        "train_tokens": train_tokens,
        "training_tokens_per_s": rate,
        "steps": train_tokens / per_step if per_step else None,
        "compute_hours": compute_h,
        "hours": hours,
        "days": hours / 24,
        "utilisation": util,
        "device_hours": hours * devices if devices else None,
        "devices": devices if devices else cost.kind,
        f"{p}_per_hour": hourly.total,
        p: hours * hourly.total,
        f"{p}_by_component": {k: v * hours for k, v in hourly.components().items()},
        "energy_kwh": energy_kwh,
        "energy_reason": None
        if energy_kwh is not None
        else cost.energy.get("reason") or "no energy measured",
        "currency": cost.currency,
        "method": (
            "hours = tokens ÷ (training tokens/s × 3600) ÷ utilisation; cost = hours × hourly cost "
            f"(hardware/rental, energy, labour, other opex; profile {cost.profile.name})"
        ),
    }


register_pricing(TrainingSummary, _extras)
