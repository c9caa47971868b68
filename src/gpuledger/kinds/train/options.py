"""``gpuledger bench --task train``'s options as one typed model (``TrainOptions``), and the spec they make
(``kinds.train.spec.TrainSpec``); ``train_spec`` for library callers (``gpuledger run --task train``, the
benchmarks, tests).

Options: ``--model`` (``dummy:NAME`` or a model folder), ``--device``, ``--dtype auto|bf16|fp16|fp32``,
``--batch-size`` (sequences per micro-batch on each rank), ``--seq-len``, ``--grad-accum``, ``--steps``
(measured), ``--warmup-steps``, ``--optimizer adamw|sgd``, ``--learning-rate``,
``--activation-checkpointing``, ``--compile``, ``--data FILE`` (text or JSONL, tokenised with the model
folder's tokenizer; default random token ids) and ``--seed``. An option of another workload (``--dataset``,
``--rate``, ``--num-requests``, ``--warmup``, ...) is refused with one line saying what to give instead; the
numbers are bounded by the spec's table (``kinds.train.spec.BOUNDS``), with its sentences.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, ClassVar, Self

from pydantic import Field, field_validator, model_validator

from gpuledger.bench.options import MAX_NAME, TaskOptions, first
from gpuledger.engines import EngineKind
from gpuledger.errors import UsageError
from gpuledger.kinds.train.spec import (
    BOUNDS,
    DEFAULT_LEARNING_RATE,
    DEFAULT_SEQ_LEN,
    DEFAULT_STEPS,
    DEFAULT_WARMUP_STEPS,
    MAX_LEARNING_RATE,
    OPTIMIZERS,
    TrainSpec,
)
from gpuledger.records import BenchSpec
from gpuledger.records.spec import checked, settled

ENGINE = "torch-train"
DEVICES = ("auto", "cpu", "cuda")
_DTYPES = {
    "auto": "auto",
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp16": "fp16",
    "float16": "fp16",
    "half": "fp16",
    "fp32": "fp32",
    "float32": "fp32",
    "float": "fp32",
}
# Options of the other workloads, and what a training run takes instead.
_NOT_FOR_TRAINING: dict[str, str] = {
    "base_url": "training runs in-process (several GPUs: torchrun, docs/train.md)",
    "endpoint": "training runs in-process",
    "dataset": "give --data FILE (text or JSONL) or leave it out for random token ids",
    "dataset_path": "give --data FILE",
    "input_len": "give --seq-len",
    "output_len": "give --seq-len",
    "range_ratio": "every sequence of a training run is --seq-len tokens",
    "concurrency": "give --batch-size (several devices: torchrun --nproc-per-node N)",
    "rate": "a training run takes one step after the other",
    "sweep": "a training run takes one step after the other",
    "num_requests": "give --steps",
    "duration": "give --steps",
    "slo": "a training run has no request latency",
    "server_metrics_interval": "training runs in-process",
    "request_timeout": "training runs in-process",
    "api_key_env": "training runs in-process",
}

# What each option sets in the stored spec (``bench --like`` copies them from a stored training run).
FLAG_FIELDS: dict[type[BenchSpec], dict[str, tuple[str, ...]]] = {
    TrainSpec: {
        "model": ("model.spec",),
        "batch_size": ("batch_size",),
        "seq_len": ("seq_len",),
        "grad_accum": ("grad_accum",),
        "steps": ("steps",),
        "warmup_steps": ("warmup_steps",),
        "optimizer": ("optimizer",),
        "learning_rate": ("learning_rate",),
        "activation_checkpointing": ("activation_checkpointing",),
        "compile": ("compile",),
        "data": ("data",),
        "seed": ("seed",),
    },
}
REPEAT_NEEDS: dict[type[BenchSpec], tuple[str, ...]] = {
    TrainSpec: ("model.spec", "batch_size", "seq_len", "steps"),
}


def dtype_name(value: str | None) -> str:
    """``bfloat16`` -> ``bf16``; ``ValueError`` naming the choices otherwise."""
    key = _DTYPES.get((value or "auto").strip().lower())
    if key is None:
        raise ValueError(f"--dtype must be one of auto, bf16, fp16, fp32 (got {value!r})")
    return key


class TrainOptions(TaskOptions):
    """The options of ``gpuledger bench --task train`` (the module docstring lists them)."""

    TASK: ClassVar[str] = "train"
    REFUSED: ClassVar[dict[str, str]] = {
        **{k: f"--{k.replace('_', '-')} is not for --task train: {why}"
           for k, why in _NOT_FOR_TRAINING.items()},
        "warmup": "--warmup counts requests: give --warmup-steps for --task train",
        "server_metrics": "--server-metrics is for text generation servers, not --task train",
    }

    engine: str = Field(default=ENGINE, max_length=128)
    model: str | None = Field(default=None, max_length=MAX_NAME)
    device: str = "auto"
    dtype: str = "auto"
    batch_size: int = 1
    seq_len: int = DEFAULT_SEQ_LEN
    grad_accum: int = 1
    steps: int = DEFAULT_STEPS
    warmup_steps: int = DEFAULT_WARMUP_STEPS
    optimizer: str = "adamw"
    learning_rate: float = DEFAULT_LEARNING_RATE
    activation_checkpointing: bool = False
    compile: bool = False
    data: Path | None = None
    seed: int = 0

    @field_validator("dtype", mode="before")
    @classmethod
    def _dtype(cls, value: Any) -> Any:
        return dtype_name(value) if isinstance(value, str) or value is None else value

    @field_validator("optimizer", mode="before")
    @classmethod
    def _optimizer(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _options(self) -> Self:
        lr = self.learning_rate
        problem = first((
            f"--device must be one of {', '.join(DEVICES)} (got {self.device!r})"
            if self.device not in DEVICES else None,
            *(f"{flag} must be between {low} and {high:,}, got {getattr(self, name)}"
              if not low <= getattr(self, name) <= high else None
              for name, (flag, low, high) in BOUNDS.items()),
            f"--optimizer must be {' or '.join(OPTIMIZERS)}, got {self.optimizer!r}"
            if self.optimizer not in OPTIMIZERS else None,
            f"--learning-rate must be a number in (0, {MAX_LEARNING_RATE:g}], got {lr}"
            if not (math.isfinite(lr) and 0 < lr <= MAX_LEARNING_RATE) else None,
            self.telemetry_problem(),
        ))
        if problem:
            raise ValueError(problem)
        return self

    def document(self, kind: EngineKind) -> dict[str, Any]:
        return train_document(
            self.model, device=self.device, dtype=self.dtype, batch_size=self.batch_size,
            seq_len=self.seq_len, grad_accum=self.grad_accum, steps=self.steps,
            warmup_steps=self.warmup_steps, optimizer=self.optimizer, learning_rate=self.learning_rate,
            activation_checkpointing=self.activation_checkpointing, compile_model=self.compile,
            data=self.data, seed=self.seed, label=self.label, telemetry=self.telemetry,
            telemetry_interval_s=self.telemetry_interval,
        )


OPTIONS = TrainOptions


def train_document(
    model: str | None,
    *,
    device: str = "auto",
    dtype: str = "auto",
    batch_size: int = 1,
    seq_len: int = DEFAULT_SEQ_LEN,
    grad_accum: int = 1,
    steps: int = DEFAULT_STEPS,
    warmup_steps: int = DEFAULT_WARMUP_STEPS,
    optimizer: str = "adamw",
    learning_rate: float = DEFAULT_LEARNING_RATE,
    activation_checkpointing: bool = False,
    compile_model: bool = False,
    data: str | Path | None = None,
    seed: int = 0,
    label: str = "",
    telemetry: bool = True,
    telemetry_interval_s: float = 0.1,
) -> dict[str, Any]:
    """The document of a training run (validated by ``train_spec`` / ``bench.options.spec_of``)."""
    return {
        "engine": ENGINE,
        "label": label,
        "model": {"spec": model.strip()} if model is not None else None,
        "device": device,
        "dtype": dtype_name(dtype),
        "batch_size": batch_size,
        "seq_len": seq_len,
        "grad_accum": grad_accum,
        "steps": steps,
        "warmup_steps": warmup_steps,
        "optimizer": optimizer.strip().lower(),
        "learning_rate": learning_rate,
        "activation_checkpointing": activation_checkpointing,
        "compile": compile_model,
        "data": {"kind": "file", "path": str(data)} if data is not None else {"kind": "random"},
        "seed": seed,
        "telemetry": {"enabled": telemetry, "interval_s": telemetry_interval_s},
    }


def train_spec(model: str | None, **values: Any) -> TrainSpec:
    """A complete, validated training spec (``train_document``'s arguments)."""
    try:
        document = train_document(model, **values)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    spec = settled(checked(TrainSpec, document))
    assert isinstance(spec, TrainSpec)
    return spec


def require(spec: BenchSpec) -> str | None:
    """What a training spec still lacks once ``--like`` filled it in (None: nothing)."""
    if isinstance(spec, TrainSpec) and spec.model is None:
        return "--task train needs --model (dummy:NAME or a model folder)"
    return None


__all__ = [
    "ENGINE",
    "FLAG_FIELDS",
    "OPTIONS",
    "REPEAT_NEEDS",
    "TrainOptions",
    "dtype_name",
    "require",
    "train_document",
    "train_spec",
]
