"""The in-process engine's spec (``TorchSpec``) and the records of what it resolved: the model it built or
loaded (``TorchModel``, ``ModelShape``), the memory it estimated (``MemoryEstimate``), how it generated.

What was asked: ``model.spec`` (``dummy:NAME``, a folder or a Hugging Face id), ``device`` and ``dtype``
(``auto`` until the engine chooses), ``batch_size`` (the concurrency), ``input_tokens`` / ``output_tokens``,
``requests_planned`` (whole batches), ``warmup``, ``seed``, ``slo``, ``max_duration_s`` (no new batch past
it), ``memory_budget_bytes``. What the engine resolved when it opened: the chosen ``device``, its
``device_name`` and ``build``, the ``dtype``, the planned ``model``, ``num_parameters``,
``kv_bytes_per_token``, ``memory_estimate``, ``cpu_threads``, ``generation``.

Schema-1 torch specs (before the spec was typed) kept the lengths and the seed in the run's workload and the
SLOs in its summary only: ``upgrade_v1`` reads them from there, leaving the stored form as it was.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar, Literal, Self

from pydantic import ConfigDict, model_validator

from gpuledger.records.spec import (
    BatchStage,
    BenchSpec,
    DatasetSpec,
    SpecModel,
    Stage,
    TokenIdDataset,
    register_upgrade,
    slo_problem,
)
from gpuledger.records.textgen import TextGenerationSummary

# Bytes per element of the dtypes the engine computes in.
BYTES_PER_ELEMENT: dict[str, int] = {"fp32": 4, "bf16": 2, "fp16": 2}
GIB = 1024**3
WARMUP_OUTPUT_TOKENS = 2


def gib(n: float) -> str:
    """``31.2 GiB`` (sizes are binary, as the allocators count them)."""
    return f"{n / GIB:.1f} GiB"


class ModelShape(SpecModel):
    """What the memory estimate and the parameter arithmetic need (decoder-only transformer)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_positions: int | None
    tie_embeddings: bool
    qkv_bias: bool

    def kv_bytes_per_token(self, dtype: str) -> int:
        """KV cache bytes one token occupies: K and V, every layer, every KV head."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * BYTES_PER_ELEMENT[dtype]


class TorchModel(SpecModel):
    """The model asked for (``spec``) and, once planned, what it is and where its size comes from."""

    spec: str
    kind: Literal["dummy", "pretrained"] | None = None
    name: str | None = None
    params: int | None = None
    params_method: str | None = None
    source: str | None = None
    shape: ModelShape | None = None
    published_params: int | None = None
    params_source: str | None = None
    hf_id: str | None = None
    weights: str | None = None


class MemoryEstimate(SpecModel):
    """Bytes the run needs on its device, by part, against what the device has free (``fits``)."""

    weights_bytes: int
    kv_cache_bytes: int
    activation_bytes: int
    overhead_bytes: int
    available_bytes: int | None
    available_source: str
    dtype: str
    batch_size: int
    sequence_tokens: int
    total_bytes: int
    fits: bool

    @classmethod
    def of(cls, *, weights: int, kv: int, activations: int, overhead: int, available: int | None,
           source: str, dtype: str, batch_size: int, sequence_tokens: int) -> MemoryEstimate:
        total = weights + kv + activations + overhead
        return cls(
            weights_bytes=weights, kv_cache_bytes=kv, activation_bytes=activations, overhead_bytes=overhead,
            available_bytes=available, available_source=source, dtype=dtype, batch_size=batch_size,
            sequence_tokens=sequence_tokens, total_bytes=total, fits=available is None or total <= available,
        )

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def text(self) -> str:
        parts = (
            f"weights {gib(self.weights_bytes)} + KV cache {gib(self.kv_cache_bytes)} + activations "
            f"{gib(self.activation_bytes)} + overhead {gib(self.overhead_bytes)}"
        )
        free = "unknown" if self.available_bytes is None else gib(self.available_bytes)
        return f"needs ~{gib(self.total_bytes)} ({parts}); available {free} ({self.available_source})"


class GenerationSettings(SpecModel):
    """How the engine calls ``generate``: greedy, forced length, KV cache, where the times come from."""

    do_sample: bool
    num_beams: int
    min_new_tokens: int
    max_new_tokens: int
    use_cache: bool
    timestamps: str


class TorchModelSpec(BenchSpec):
    """What the specs of the in-process engines share (inference: ``TorchSpec``; training: ``TrainSpec`` in
    ``records/trainspec.py``): the model asked for, the device and the dtype (``auto`` until the engine
    chooses). A base only: it registers no kind."""

    model: TorchModel | None = None
    device: str | None = None
    dtype: str | None = None

    @property
    def model_spec(self) -> str:
        return self.model.spec if self.model is not None else ""

    def model_name(self) -> str | None:
        """The planned model's name, else the spec as asked (None: no model)."""
        return (self.model.name or self.model.spec) if self.model is not None else None

    def check_model(self) -> None:
        """``ValueError`` (a validator's one-line message) when the model asked for is blank."""
        if self.model is not None and not self.model.spec.strip():
            raise ValueError("--model must not be empty")

    def precision(self) -> str | None:
        return self.dtype if self.dtype != "auto" else None


class TorchSpec(TorchModelSpec):
    """A run of the in-process PyTorch engine (``engine: torch``); see the module docstring."""

    KIND: ClassVar[str] = "torch"
    LEGACY_ENGINES: ClassVar[tuple[str, ...]] = ("torch",)
    OBSERVED: ClassVar[tuple[str, ...]] = (
        *BenchSpec.OBSERVED, "device_name", "build", "cpu_threads", "memory_estimate.available_bytes",
        "memory_estimate.available_source", "memory_estimate.fits",
    )

    batch_size: int | None = None
    concurrency: int | None = None  # = batch_size: every sequence of a batch is in flight together
    input_tokens: int | None = None
    output_tokens: int | None = None
    requests_planned: int | None = None
    warmup: bool | None = None
    seed: int | None = None
    slo: dict[str, float] | None = None
    max_duration_s: float | None = None
    memory_budget_bytes: int | None = None
    device_name: str | None = None
    build: str | None = None
    num_parameters: int | None = None
    kv_bytes_per_token: int | None = None
    cpu_threads: int | None = None
    memory_estimate: MemoryEstimate | None = None
    generation: GenerationSettings | None = None

    @model_validator(mode="after")
    def _flags(self) -> Self:
        counts = (("--batch/--concurrency", self.batch_size), ("--input-tokens", self.input_tokens),
                  ("--output-tokens", self.output_tokens), ("--num-requests", self.requests_planned))
        for flag, value in counts:
            if value is not None and value < 1:
                raise ValueError(f"{flag} must be at least 1 (got {value})")
        self.check_model()
        cap = self.max_duration_s
        if cap is not None and not (math.isfinite(cap) and cap > 0):
            raise ValueError(f"the time cap must be a positive number of seconds, got {self.max_duration_s}")
        if self.memory_budget_bytes is not None and self.memory_budget_bytes < 0:
            raise ValueError(f"--memory-budget must be 0 or more, got {self.memory_budget_bytes}")
        slo = slo_problem(self.slo)
        if slo:
            raise ValueError(slo)
        return self

    @classmethod
    def whole_batches(cls, requests: int | None, batch_size: int) -> int:
        """``requests`` (default: one batch) rounded up to whole batches; a count under 1 stays as it is
        (the validator refuses it with the number given)."""
        n = requests if requests is not None else batch_size
        return math.ceil(n / batch_size) * batch_size if n >= 1 and batch_size >= 1 else n

    def token_lengths(self) -> tuple[int, int]:
        """(input, output) tokens per request (128 each when the spec does not say)."""
        return self.input_tokens or 128, self.output_tokens or 128

    def dataset_spec(self) -> DatasetSpec | TokenIdDataset | None:
        inp, out = self.token_lengths()
        return TokenIdDataset(input_tokens=inp, output_tokens=out, count=self.requests_per_stage() or 1,
                              seed=self.workload_seed())

    def stages(self) -> list[Stage]:
        batch = self.fixed_concurrency() or 1
        return [BatchStage(stage="", batch_size=batch, time_cap_s=self.max_duration_s)]

    def requests_per_stage(self) -> int | None:
        return self.requests_planned or self.fixed_concurrency() or 1

    def warmup_requests(self) -> int:
        return (self.fixed_concurrency() or 1) if self.warmup is not False else 0

    def warmup_output_tokens(self) -> int | None:
        return min(self.token_lengths()[1], WARMUP_OUTPUT_TOKENS)

    def slo_limits(self) -> dict[str, float]:
        return dict(self.slo or {})

    def workload_seed(self) -> int:
        return self.seed or 0

    def parameter_count(self) -> int | None:
        if self.num_parameters is not None:
            return self.num_parameters
        return self.model.params if self.model is not None else None

    def fixed_concurrency(self) -> int | None:
        return self.batch_size or self.concurrency


def upgrade_v1(spec: BenchSpec, workload: Mapping[str, Any], summary: Any) -> BenchSpec:
    """A schema-1 torch spec with its lengths and seed from the run's workload and its SLOs from the
    summary; the fields filled are left unset, so the spec dumps as it was stored."""
    if not isinstance(spec, TorchSpec):
        return spec
    filled: dict[str, Any] = {}
    for key in ("input_tokens", "output_tokens", "seed"):
        value = workload.get(key)
        if getattr(spec, key) is None and type(value) is int:
            filled[key] = value
    if spec.slo is None and isinstance(summary, TextGenerationSummary) and summary.slo is not None:
        filled["slo"] = summary.slo.limits()
    if not filled:
        return spec
    whole = TorchSpec.model_validate({**spec.model_dump(exclude_unset=True), **filled})
    return TorchSpec.model_construct(_fields_set=set(spec.model_fields_set), **dict(whole))


register_upgrade(TorchSpec.KIND, upgrade_v1)

__all__ = [
    "BYTES_PER_ELEMENT",
    "GIB",
    "GenerationSettings",
    "MemoryEstimate",
    "ModelShape",
    "TorchModel",
    "TorchModelSpec",
    "TorchSpec",
    "gib",
    "upgrade_v1",
]
