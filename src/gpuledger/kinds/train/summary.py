"""Training: what one optimizer step measured (``TrainStep``, kept in the step's request record), and the
run's summary (``TrainingSummary``) with the pure function that makes it (``summarize_training``). The spec
of a training run is ``kinds/train/spec.py``; docs/train.md has the definitions. In short:

- a step is one optimizer update: ``grad_accum`` micro-batches of ``batch_size`` sequences of ``seq_len``
  tokens on each of ``world_size`` ranks (forward and backward each), then the optimizer; its time runs
  from its first forward to the end of the optimizer, the device synchronised at both ends and between
  the phases (forward, backward, optimizer);
- training tokens = sequences × sequence length, over every rank: the unit priced "per 1M training
  tokens"; a ``step`` is priced per 1,000 steps, a ``sample`` (one sequence) per 1,000;
- rates are over the measured window: the first measured step's start to the last one's end (the gaps
  between steps, where the run stores what it measured, are in it);
- MFU = model FLOPs per token × training tokens/s ÷ (peak dense FLOP/s of one device at the run's dtype ×
  devices), the model FLOPs per token of torchtitan's convention (``kinds.train.spec.flops_per_token``).

A request record of a training run is one step: ``t_send`` its start, ``t_end`` its end, ``index`` the step
number (from 0), and its ``TrainStep`` under ``server_timings["train"]``; its token fields stay empty.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

from pydantic import Field

from gpuledger.quantity import Quantity
from gpuledger.records.itemstats import (
    Latency,
    item_counts,
    latency_of,
    per_window,
    percentile_figures,
    timing_in,
    window_of,
)
from gpuledger.records.request import RequestRecord
from gpuledger.records.summary import EMPTY_WINDOW, WINDOW, RunSummary, Strict, measured
from gpuledger.records.units import Work, register_unit

register_unit("training_token", "training tokens", 1e6, short="training tok")
register_unit("step", "steps", 1e3)
register_unit("sample", "samples", 1e3)

TIMING_KEY = "train"
# The loss curve a summary keeps: every step up to this many, else an even sample of them (the first and
# the last always in it); the step records keep every one.
MAX_CURVE_POINTS = 2000


class TrainStep(Strict):
    """What one optimizer step measured (seconds; ``loss`` None when it was not a finite number, said by
    ``nonfinite``). ``tokens`` and ``samples`` count every rank's micro-batches of the step."""

    step: int = Field(ge=0)
    forward_s: float = Field(ge=0, allow_inf_nan=False)
    backward_s: float = Field(ge=0, allow_inf_nan=False)
    optimizer_s: float = Field(ge=0, allow_inf_nan=False)
    step_s: float = Field(ge=0, allow_inf_nan=False)
    loss: float | None = Field(default=None, allow_inf_nan=False)
    nonfinite: bool = False
    tokens: int = Field(ge=0)
    samples: int = Field(ge=0)
    micro_batches: int = Field(ge=1)
    world_size: int = Field(default=1, ge=1)
    # fp16 with a grad scaler: the scaler skipped this step's update (inf/NaN gradients), lowered its scale.
    skipped: bool = False
    grad_scale: float | None = Field(default=None, allow_inf_nan=False)


def step_of(record: RequestRecord) -> TrainStep | None:
    """The step's timing, or None when the record has none (or a malformed one)."""
    return timing_in(record, TIMING_KEY, TrainStep)


class LossPoint(Strict):
    """One step of the stored curve: its number, loss (None: not finite) and time."""

    step: int = Field(ge=0)
    loss: float | None = None
    step_s: float = Field(ge=0)


class TrainingSummary(RunSummary):
    """A training run over its measured window (``summarize_training``)."""

    KIND: ClassVar[str] = "training"
    HEADLINE: ClassVar[str] = "training_token"
    PRICE_UNITS: ClassVar[tuple[str, ...] | None] = ("training_token", "step", "sample")
    YIELD_UNITS: ClassVar[tuple[str, ...] | None] = ("training_token",)
    RATE_KEYS: ClassVar[dict[str, str]] = {
        "training_token": "training_tokens_per_s",
        "step": "steps_per_s",
        "sample": "samples_per_s",
    }
    # compare warns when a step is not the same size: another global batch or sequence length.
    SIZE_UNITS: ClassVar[tuple[tuple[str, str, str], ...]] = (
        ("training_token", "tokens per step", "tokens per step"),
        ("sample", "global batches", "sequences per step"),
    )

    steps_total: int = Field(default=0, ge=0)
    tokens_total: int = Field(default=0, ge=0)
    samples_total: int = Field(default=0, ge=0)
    training_tokens_per_s: float | None = None
    steps_per_s: float | None = None
    samples_per_s: float | None = None
    step_time_s: Latency = Field(default_factory=Latency)
    forward_s: Latency = Field(default_factory=Latency)
    backward_s: Latency = Field(default_factory=Latency)
    optimizer_s: Latency = Field(default_factory=Latency)
    tokens_per_step: float | None = None
    samples_per_step: float | None = None
    seq_len: int | None = None
    world_size: int = Field(default=1, ge=1)
    loss_first: float | None = None
    loss_last: float | None = None
    loss_min: float | None = None
    loss_curve: list[LossPoint] = Field(default_factory=list)
    loss_curve_stride: int = Field(default=1, ge=1)
    nonfinite_loss_steps: int = Field(default=0, ge=0)
    skipped_steps: int = Field(default=0, ge=0)
    model: str | None = None
    dtype: str | None = None
    optimizer: str | None = None
    model_flops_per_token: float | None = None
    model_flops_method: str | None = None
    model_flops_per_s: float | None = None
    peak_flops_per_s: float | None = None  # one device's, at the run's dtype
    peak_flops_source: str | None = None
    mfu: float | None = None
    mfu_reason: str | None = None
    notes: list[str] = Field(default_factory=list)

    def work(self) -> dict[str, Work]:
        return {
            "training_token": Work(count=self.tokens_total, per_s=self.training_tokens_per_s),
            "step": Work(count=self.steps_total, per_s=self.steps_per_s),
            "sample": Work(count=self.samples_total, per_s=self.samples_per_s),
        }

    def mfu_quantity(self) -> Quantity:
        """MFU in percent of the devices' peak, or "n/a" with the reason (never a zero)."""
        if self.mfu is not None:
            return Quantity(self.mfu * 100, "% of peak dense FLOP/s", self.peak_flops_source or "catalog",
                            self.model_flops_method or "model FLOPs per token × training tokens/s")
        return Quantity.missing("% of peak dense FLOP/s", "catalog", self.mfu_reason or "no peak FLOP/s")

    def key_figures(self) -> list[tuple[str, Quantity]]:
        out = super().key_figures()
        st = self.step_time_s
        out.extend(
            percentile_figures("step time", st, "s", f"{st.n} steps, device synchronised", "no step finished")
        )
        out.append(("samples/s", measured(self.samples_per_s, "samples/s", WINDOW, EMPTY_WINDOW)))
        loss = "cross-entropy, mean over the step's micro-batches"
        for label, value in (("loss, first step", self.loss_first), ("loss, last step", self.loss_last)):
            out.append((label, measured(value, "", loss, "no finite loss")))
        out.append(("MFU", self.mfu_quantity()))
        return out

    def fidelity_notes(self) -> list[str]:
        out = list(self.notes)
        if self.nonfinite_loss_steps:
            out.append(
                f"{self.nonfinite_loss_steps} step(s) had a loss that is not a finite number (NaN/inf)"
            )
        if self.skipped_steps:
            out.append(
                f"the fp16 grad scaler skipped {self.skipped_steps} optimizer update(s) (inf/NaN gradients)"
            )
        return out

    def compute_share(self) -> tuple[float | None, str]:
        return 1.0, (
            "training is compute-bound: every step runs the forward and backward of the whole model over "
            "every token (no memory-bound decode phase)"
        )

    def workload_text(self) -> str:
        """``"dummy:smollm2-135m, seq 64, 2 × 1 × 1 sequences per step, fp32, adamw"``."""
        parts = [p for p in (self.model,) if p]
        if self.seq_len is not None:
            parts.append(f"seq {self.seq_len}")
        if self.samples_per_step is not None:
            n = self.samples_per_step
            parts.append(f"{n:g} sequence{'' if n == 1 else 's'} per step")
        parts.extend(p for p in (self.dtype, self.optimizer) if p)
        if self.world_size > 1:
            parts.append(f"{self.world_size} ranks")
        return ", ".join(parts)

    def with_window(self, scale: float) -> TrainingSummary:
        return self.rates_scaled(
            scale, ("training_tokens_per_s", "steps_per_s", "samples_per_s", "model_flops_per_s", "mfu")
        )


def _curve(steps: Sequence[TrainStep]) -> tuple[list[LossPoint], int]:
    stride = max(1, math.ceil(len(steps) / MAX_CURVE_POINTS))
    chosen = list(steps[::stride])
    if steps and chosen[-1] is not steps[-1]:
        chosen.append(steps[-1])
    return [LossPoint(step=s.step, loss=s.loss, step_s=s.step_s) for s in chosen], stride


def summarize_training(
    records: Sequence[RequestRecord],
    *,
    model: str | None = None,
    dtype: str | None = None,
    optimizer: str | None = None,
    seq_len: int | None = None,
    world_size: int = 1,
    flops_per_token: float | None = None,
    flops_method: str | None = None,
    peak_flops_per_s: float | None = None,
    peak_source: str | None = None,
    mfu_reason: str | None = None,
) -> TrainingSummary:
    """The summary of a training run's steps (pure: the same records give the same summary).
    ``peak_flops_per_s`` is one device's at the run's dtype (None: ``mfu_reason`` says why there is none)."""
    base: dict[str, Any] = dict(
        model=model,
        dtype=dtype,
        optimizer=optimizer,
        seq_len=seq_len,
        world_size=world_size,
        model_flops_per_token=flops_per_token,
        model_flops_method=flops_method,
        peak_flops_per_s=peak_flops_per_s,
        peak_flops_source=peak_source,
    )
    if not records:
        return TrainingSummary(**base, mfu_reason=mfu_reason or "no step was measured")
    window = window_of(records)
    steps = sorted((s for r in records if r.ok and (s := step_of(r)) is not None), key=lambda s: s.step)
    unreadable = sum(1 for r in records if r.ok and step_of(r) is None)
    tokens = sum(s.tokens for s in steps)
    samples = sum(s.samples for s in steps)
    finite = [s.loss for s in steps if s.loss is not None]
    tokens_per_s = per_window(tokens, window)
    achieved = tokens_per_s * flops_per_token if tokens_per_s is not None and flops_per_token else None
    mfu: float | None = None
    reason = mfu_reason
    if achieved is not None and peak_flops_per_s:
        mfu = achieved / (peak_flops_per_s * world_size)
    elif reason is None:
        reason = "no step was measured" if not steps else "the run recorded no peak FLOP/s"
    curve, stride = _curve(steps)
    notes = [f"{unreadable} step record(s) without their timing were left out"] if unreadable else []
    return TrainingSummary(
        **base,
        **item_counts(records, window),
        steps_total=len(steps),
        tokens_total=tokens,
        samples_total=samples,
        training_tokens_per_s=tokens_per_s,
        steps_per_s=per_window(len(steps), window),
        samples_per_s=per_window(samples, window),
        step_time_s=latency_of([s.step_s for s in steps]),
        forward_s=latency_of([s.forward_s for s in steps]),
        backward_s=latency_of([s.backward_s for s in steps]),
        optimizer_s=latency_of([s.optimizer_s for s in steps]),
        tokens_per_step=tokens / len(steps) if steps else None,
        samples_per_step=samples / len(steps) if steps else None,
        loss_first=finite[0] if finite else None,
        loss_last=finite[-1] if finite else None,
        loss_min=min(finite) if finite else None,
        loss_curve=curve,
        loss_curve_stride=stride,
        nonfinite_loss_steps=sum(1 for s in steps if s.nonfinite),
        skipped_steps=sum(1 for s in steps if s.skipped),
        model_flops_per_s=achieved,
        mfu=mfu,
        mfu_reason=None if mfu is not None else reason,
        notes=notes,
    )


TrainingSummary.model_rebuild()
