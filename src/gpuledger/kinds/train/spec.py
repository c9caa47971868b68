"""The spec of a training run (``TrainSpec``, engine ``torch-train``: ``bench --task train --engine torch``)
and the records of what the engine resolved: the memory it estimated (``TrainMemoryEstimate``), the ranks and
their devices (``RankDevice``), the model FLOPs per token and the peak FLOP/s MFU is measured against.

What was asked: ``model.spec`` (``dummy:NAME`` or a model folder), ``device`` and ``dtype`` (``auto`` until
the engine chooses; the weights stay fp32 and bf16/fp16 run under autocast, fp16 with a grad scaler),
``batch_size`` (sequences per micro-batch on each rank), ``seq_len``, ``grad_accum`` (micro-batches per
optimizer step), ``steps`` (measured), ``warmup_steps`` (run first, not measured), ``optimizer``,
``learning_rate``, ``activation_checkpointing``, ``compile``, ``data`` (random token ids, or a text/JSONL
file tokenised with the model folder's tokenizer) and ``seed``. What the engine resolved when it opened:
the device, its name and build, the dtype, the planned model and its parameter counts, the world size and
every rank's device, the model FLOPs per token, one device's peak FLOP/s at the dtype (or why there is
none), the memory estimate and the CPU threads.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Self

from pydantic import Field, model_validator

from gpuledger.kinds.train.summary import summarize_training
from gpuledger.records.load import ConcurrencyStage, Stage
from gpuledger.records.spec import SpecModel, TokenIdDataset
from gpuledger.records.torchspec import TorchModelSpec, gib

if TYPE_CHECKING:
    from gpuledger.records.request import RequestRecord
    from gpuledger.records.summary import RunSummary

TRAIN_DTYPES: tuple[str, ...] = ("auto", "bf16", "fp16", "fp32")
OPTIMIZERS: tuple[str, ...] = ("adamw", "sgd")
DEFAULT_STEPS = 10
DEFAULT_WARMUP_STEPS = 2
DEFAULT_SEQ_LEN = 512
DEFAULT_LEARNING_RATE = 1e-4
STAGE = "train"
# Bounds of the flags (one line naming the bound when a value is outside).
BOUNDS: dict[str, tuple[str, int, int]] = {
    "batch_size": ("--batch-size", 1, 65_536),
    "seq_len": ("--seq-len", 2, 1_048_576),
    "grad_accum": ("--grad-accum", 1, 65_536),
    "steps": ("--steps", 1, 10_000_000),
    "warmup_steps": ("--warmup-steps", 0, 100_000),
    "seed": ("--seed", 0, 2**63 - 1),
}
MAX_LEARNING_RATE = 10.0


class TrainData(SpecModel):
    """Where the token ids come from: ``random`` (drawn from the vocabulary, seeded) or a ``file`` (plain
    text, or JSONL with a ``"text"`` field per line) tokenised with the model folder's tokenizer."""

    kind: Literal["random", "file"] = "random"
    path: str | None = None
    format: Literal["text", "jsonl"] | None = None
    sha256: str | None = None
    # resolved: tokens read from the file and what the run made of them
    tokens: int | None = None
    tokenizer: str | None = None
    epochs: float | None = None

    @model_validator(mode="after")
    def _path(self) -> Self:
        if self.kind == "file" and not self.path:
            raise ValueError("--data needs a file")
        if self.kind == "random" and self.path is not None:
            raise ValueError("random token ids take no --data file")
        return self

    def text(self) -> str:
        if self.kind == "random":
            return "random token ids (uniform over the vocabulary, fixed seed)"
        return (
            f"{self.path} ({self.format}, tokenised with {self.tokenizer or 'the model folder'}'s tokenizer)"
        )


class RankDevice(SpecModel):
    """One rank of the run and the device it trained on."""

    rank: int = Field(ge=0)
    local_rank: int = Field(ge=0)
    device: str = Field(max_length=32)
    name: str = Field(max_length=200)
    host: str = Field(default="", max_length=255)


class TrainMemoryEstimate(SpecModel):
    """Bytes a training step needs on one device, by part, against what the device has free (``fits``).
    ``activation_bytes`` is the run's (with or without activation checkpointing, as asked); the other mode's
    figure is kept beside it."""

    weights_bytes: int = Field(ge=0)
    gradient_bytes: int = Field(ge=0)
    optimizer_bytes: int = Field(ge=0)
    activation_bytes: int = Field(ge=0)
    activation_bytes_full: int = Field(ge=0)
    activation_bytes_checkpointed: int = Field(ge=0)
    overhead_bytes: int = Field(ge=0)
    checkpointing: bool
    available_bytes: int | None
    available_source: str
    dtype: str
    optimizer: str
    micro_batch: int
    seq_len: int
    total_bytes: int
    fits: bool
    method: str = ""

    @property
    def model_bytes(self) -> int:
        """Weights + gradients + optimizer states + activations: what the allocator holds at the peak."""
        return self.weights_bytes + self.gradient_bytes + self.optimizer_bytes + self.activation_bytes

    def total_with(self, checkpointing: bool) -> int:
        act = self.activation_bytes_checkpointed if checkpointing else self.activation_bytes_full
        return self.total_bytes - self.activation_bytes + act

    def text(self) -> str:
        act = "activations (checkpointed)" if self.checkpointing else "activations"
        parts = (
            f"weights {gib(self.weights_bytes)} + gradients {gib(self.gradient_bytes)} + optimizer states "
            f"{gib(self.optimizer_bytes)} ({self.optimizer}) + {act} {gib(self.activation_bytes)} + overhead "
            f"{gib(self.overhead_bytes)}"
        )
        free = "unknown" if self.available_bytes is None else gib(self.available_bytes)
        return f"needs ~{gib(self.total_bytes)} ({parts}); available {free} ({self.available_source})"


class TrainSpec(TorchModelSpec):
    """A training run of the in-process PyTorch engine; see the module docstring."""

    KIND: ClassVar[str] = "training"
    LEGACY_ENGINES: ClassVar[tuple[str, ...]] = ()
    OBSERVED: ClassVar[tuple[str, ...]] = (
        *TorchModelSpec.OBSERVED, "device_name", "build", "cpu_threads", "ranks", "peak_flops_per_s",
        "peak_flops_source", "mfu_unavailable", "memory_estimate.available_bytes",
        "memory_estimate.available_source", "memory_estimate.fits",
    )

    batch_size: int | None = None
    seq_len: int | None = None
    grad_accum: int | None = None
    steps: int | None = None
    warmup_steps: int | None = None
    optimizer: str | None = None
    learning_rate: float | None = None
    activation_checkpointing: bool | None = None
    compile: bool | None = None
    data: TrainData | None = None
    seed: int | None = None
    # what the engine resolved
    device_name: str | None = None
    build: str | None = None
    cpu_threads: int | None = None
    num_parameters: int | None = None
    non_embedding_parameters: int | None = None
    flops_per_token: float | None = None
    flops_method: str | None = None
    world_size: int | None = None
    ranks: list[RankDevice] | None = None
    dist_backend: str | None = None
    peak_flops_per_s: float | None = None
    peak_flops_source: str | None = None
    mfu_unavailable: str | None = None
    grad_scaler: bool | None = None
    attention: str | None = None
    memory_estimate: TrainMemoryEstimate | None = None

    @model_validator(mode="after")
    def _flags(self) -> Self:
        for field, (flag, low, high) in BOUNDS.items():
            value = getattr(self, field)
            if value is not None and not low <= value <= high:
                raise ValueError(f"{flag} must be between {low} and {high:,}, got {value}")
        self.check_model()
        if self.dtype is not None and self.dtype not in TRAIN_DTYPES:
            raise ValueError(f"--dtype must be one of {', '.join(TRAIN_DTYPES)}, got {self.dtype!r}")
        if self.optimizer is not None and self.optimizer not in OPTIMIZERS:
            raise ValueError(f"--optimizer must be {' or '.join(OPTIMIZERS)}, got {self.optimizer!r}")
        lr = self.learning_rate
        if lr is not None and not (math.isfinite(lr) and 0 < lr <= MAX_LEARNING_RATE):
            raise ValueError(f"--learning-rate must be a number in (0, {MAX_LEARNING_RATE:g}], got {lr}")
        if self.world_size is not None and self.world_size < 1:
            raise ValueError(f"the world size must be at least 1, got {self.world_size}")
        return self

    def micro_batch(self) -> int:
        return self.batch_size or 1

    def sequence_length(self) -> int:
        return self.seq_len or DEFAULT_SEQ_LEN

    def accumulation(self) -> int:
        return self.grad_accum or 1

    def ranks_count(self) -> int:
        return self.world_size or 1

    def samples_per_step(self) -> int:
        """Sequences one optimizer step trains on, every rank counted (the global batch)."""
        return self.micro_batch() * self.accumulation() * self.ranks_count()

    def tokens_per_step(self) -> int:
        return self.samples_per_step() * self.sequence_length()

    # -- what the run does (the runner reads these) ---------------------------------------------------
    def dataset_spec(self) -> TokenIdDataset:
        """The runner's prompts: one per step, carrying only the sequence length (the engine draws or reads
        the token ids itself)."""
        return TokenIdDataset(
            input_tokens=self.sequence_length(),
            output_tokens=1,
            count=self.requests_per_stage(),
            seed=self.workload_seed(),
        )

    def stages(self) -> list[Stage]:
        """One stage: one step at a time."""
        return [ConcurrencyStage(stage=STAGE, concurrency=1)]

    def requests_per_stage(self) -> int:
        return self.steps or DEFAULT_STEPS

    def warmup_requests(self) -> int:
        return DEFAULT_WARMUP_STEPS if self.warmup_steps is None else self.warmup_steps

    def workload_seed(self) -> int:
        return self.seed or 0

    def workload_record(self, meta: Mapping[str, Any], warmup: Mapping[str, Any]) -> dict[str, Any]:
        """What was trained on, as compare weighs it: model, sequence length, global batch, dtype, ..."""
        data = self.data or TrainData()
        out: dict[str, Any] = {
            "task": "train",
            "model": self.model_name(),
            "seq_len": self.sequence_length(),
            "batch_size": self.micro_batch(),
            "grad_accum": self.accumulation(),
            "world_size": self.ranks_count(),
            "global_batch": self.samples_per_step(),
            "tokens_per_step": self.tokens_per_step(),
            "dtype": self.dtype,
            "optimizer": self.optimizer,
            "learning_rate": self.learning_rate,
            "activation_checkpointing": bool(self.activation_checkpointing),
            "compile": bool(self.compile),
            "data": "random-token-ids" if data.kind == "random" else data.path,
            "steps": self.requests_per_stage(),
            "seed": self.workload_seed(),
        }
        if data.sha256 is not None:
            out["sha256"] = data.sha256
        if warmup:
            out["warmup"] = {"steps": warmup.get("requests", 0), **dict(warmup)}
        return out

    def summarize(self, records: Sequence[RequestRecord]) -> RunSummary | None:
        return summarize_training(
            records,
            model=self.model_name(),
            dtype=self.dtype,
            optimizer=self.optimizer,
            seq_len=self.seq_len,
            world_size=self.ranks_count(),
            flops_per_token=self.flops_per_token,
            flops_method=self.flops_method,
            peak_flops_per_s=self.peak_flops_per_s,
            peak_source=self.peak_flops_source,
            mfu_reason=self.mfu_unavailable,
        )

    # -- what the run was (cost and reports read these) -----------------------------------------------
    def parameter_count(self) -> int | None:
        if self.num_parameters is not None:
            return self.num_parameters
        return self.model.params if self.model is not None else None


__all__ = [
    "BOUNDS",
    "DEFAULT_LEARNING_RATE",
    "DEFAULT_SEQ_LEN",
    "DEFAULT_STEPS",
    "DEFAULT_WARMUP_STEPS",
    "OPTIMIZERS",
    "STAGE",
    "TRAIN_DTYPES",
    "RankDevice",
    "TrainData",
    "TrainMemoryEstimate",
    "TrainSpec",
]
