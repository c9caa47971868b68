"""``gpuledger run --task train``: doctor → training bench → cost → report, its result typed
(``TrainRunResult``: its dump is ``gpuledger run --task train --json``'s document).

The model is chosen by device: ``dummy:qwen2.5-0.5b`` (bf16 autocast, 4 sequences of 1,024 tokens, 20 steps)
when PyTorch sees a GPU whose free memory holds the step (the estimate of ``engines/torch/trainplan.py``),
else ``dummy:smollm2-135m`` with 2 sequences of 64 tokens and 6 steps, which finishes in well under a minute
on a 2-core CPU; ``--model`` chooses another (a model folder too). The bench runs through the one run
lifecycle (``bench.runner``) like ``gpuledger bench --task train``; the cost and the report are those of
any run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import SerializerFunctionWrapHandler, model_serializer
from rich.markup import escape

from gpuledger.errors import UsageError
from gpuledger.kinds.pipeline import (
    Doc,
    PipelineHooks,
    RunOptions,
    TaskMetrics,
    TaskRunResult,
    evaluate_task,
    task_fields,
)
from gpuledger.kinds.train.spec import TrainMemoryEstimate, TrainSpec
from gpuledger.kinds.train.summary import TrainingSummary
from gpuledger.quantity import Quantity

if TYPE_CHECKING:
    from gpuledger.records import RunInfo

GPU_MODEL = "dummy:qwen2.5-0.5b"
CPU_MODEL = "dummy:smollm2-135m"
NA = "n/a"


@dataclass(frozen=True, slots=True)
class TrainChoice:
    model: str
    device: str
    batch_size: int
    seq_len: int
    steps: int
    reason: str


def choose_train_run(device: str, model: str | None, dtype: str, quick: bool) -> TrainChoice:
    """The model and sizes of ``run --task train`` (see the module docstring)."""
    from gpuledger.engines.torch.device import resolve_dtype, select_device
    from gpuledger.engines.torch.models import plan_model
    from gpuledger.engines.torch.trainplan import estimate_training_memory

    dev = select_device(device)
    steps = 3 if quick else None
    if model is not None:
        gpu = dev.type == "cuda"
        return TrainChoice(
            model,
            dev.torch_device,
            4 if gpu else 2,
            1024 if gpu else 64,
            steps or (20 if gpu else 6),
            f"--model {model}",
        )
    if dev.type == "cuda" and not quick:
        plan = plan_model(GPU_MODEL)
        est = estimate_training_memory(
            plan.params,
            plan.shape,
            dtype=resolve_dtype(dtype, dev),
            optimizer="adamw",
            micro_batch=4,
            seq_len=1024,
            checkpointing=False,
            device=dev,
        )
        if est.fits:
            return TrainChoice(
                GPU_MODEL,
                dev.torch_device,
                4,
                1024,
                20,
                f"{dev.name} has room for training {GPU_MODEL} ({est.text()})",
            )
        why = f"training {GPU_MODEL} does not fit on {dev.name} ({est.text()})"
    elif dev.type == "cuda":
        why = "--quick"
    else:
        why = dev.fallback_reason or "no GPU: the CPU computes"
    return TrainChoice(CPU_MODEL, dev.torch_device, 2, 64, steps or 6, f"{why}: the small built-in model")


def _n(value: float | None, fmt: str) -> str:
    return NA if value is None else f"{value:{fmt}}"


class TrainMetrics(TaskMetrics):
    """A training run's figures: steps, training tokens and samples per second, step time and its phases,
    the loss at the first and last step, the MFU or why there is none, the window (None: the run has no
    training summary)."""

    steps: int | None = None
    training_tokens_per_s: float | None = None
    samples_per_s: float | None = None
    step_time_s_p50: float | None = None
    step_time_s_p99: float | None = None
    forward_s_mean: float | None = None
    backward_s_mean: float | None = None
    optimizer_s_mean: float | None = None
    loss_first: float | None = None
    loss_last: float | None = None
    mfu: float | None = None
    mfu_reason: str | None = None
    window_s: float | None = None

    @classmethod
    def of(cls, s: object) -> TrainMetrics:
        if not isinstance(s, TrainingSummary):
            return cls()
        return cls(
            steps=s.steps_total,
            training_tokens_per_s=s.training_tokens_per_s,
            samples_per_s=s.samples_per_s,
            step_time_s_p50=s.step_time_s.p50,
            step_time_s_p99=s.step_time_s.p99,
            forward_s_mean=s.forward_s.mean,
            backward_s_mean=s.backward_s.mean,
            optimizer_s_mean=s.optimizer_s.mean,
            loss_first=s.loss_first,
            loss_last=s.loss_last,
            mfu=s.mfu,
            mfu_reason=s.mfu_reason,
            window_s=s.window_s,
        )

    def figures(self) -> str:
        """The terminal's line of the run's figures (console markup): rate, step time and its phases, loss,
        MFU."""
        mfu = f"{self.mfu:.2%}" if self.mfu is not None else f"n/a — {self.mfu_reason}"
        phases = ", ".join(f"{name} {_n(value, '.3f')}" for name, value in (
            ("forward", self.forward_s_mean), ("backward", self.backward_s_mean),
            ("optimizer", self.optimizer_s_mean)))
        return escape(
            f"{_n(self.training_tokens_per_s, ',.1f')} training tok/s, step "
            f"{_n(self.step_time_s_p50, '.3f')} s p50 ({phases} s); loss {_n(self.loss_first, '.4g')} → "
            f"{_n(self.loss_last, '.4g')}; MFU {mfu}"
        )


class TrainMemory(Doc):
    """The engine's memory estimate of a step (None: not recorded) and the allocator's peak over the run
    (None: not recorded)."""

    estimate: TrainMemoryEstimate | None
    peak: Quantity | None

    @classmethod
    def of(cls, run: RunInfo) -> TrainMemory:
        spec = run.config
        peak = (run.server.get("details") or {}).get("peak_memory")
        return cls(
            estimate=spec.memory_estimate if isinstance(spec, TrainSpec) else None,
            peak=Quantity(**peak) if isinstance(peak, dict) else None,
        )


class TrainRunResult(TaskRunResult):
    """``gpuledger run --task train``'s result: ``TaskRunResult``'s fields with the training figures and the
    memory."""

    metrics: TrainMetrics
    memory: TrainMemory

    @model_serializer(mode="wrap")
    def _memory_after_the_figures(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        keys = list(out)
        keys.insert(keys.index("metrics") + 1, keys.pop(keys.index("memory")))
        return {k: out[k] for k in keys}


def check(options: RunOptions) -> None:
    """``run --task train`` is one process (data parallel: torchrun ... bench --task train) and takes neither
    ``--memory-budget``, ``--telemetry-from`` nor ``--repeat``."""
    from gpuledger.engines.torch.distributed import dist_env

    options.text_only()
    if dist_env() is not None:
        raise UsageError(
            "run --task train is one process: train data-parallel with torchrun ... gpuledger bench --task "
            "train (docs/train.md, 'Several GPUs')"
        )


def evaluate(options: RunOptions, hooks: PipelineHooks) -> TrainRunResult:
    """The whole evaluation of a training run (the module docstring says which)."""
    from gpuledger.kinds.train.options import train_spec

    def spec_of(choice: TrainChoice) -> TrainSpec:
        return train_spec(
            choice.model,
            device=choice.device.split(":")[0],
            dtype=options.dtype,
            batch_size=choice.batch_size,
            seq_len=choice.seq_len,
            steps=choice.steps,
            warmup_steps=2,
            label=options.label or "gpuledger run --task train",
        )

    done = evaluate_task(
        options, hooks,
        choosing="choosing the model to train",
        choose=lambda: choose_train_run(options.device, options.model, options.dtype, options.quick),
        spec_of=spec_of,
        items="steps",
        failed="no training step finished",
    )
    return TrainRunResult(metrics=TrainMetrics.of(done.run.summary), memory=TrainMemory.of(done.run),
                          **task_fields("train", done, TrainSpec))


__all__ = ["TrainChoice", "TrainMetrics", "TrainRunResult", "check", "choose_train_run", "evaluate"]
