"""What the in-process PyTorch engines' specs share (``TorchModelSpec``: inference's ``TorchSpec`` in
``kinds/text/spec.py``, training's ``TrainSpec`` in ``kinds/train/spec.py``) and the records of what they
resolved: the model built or loaded (``TorchModel``, ``ModelShape``), the memory estimated
(``MemoryEstimate``), how the inference engine generated (``GenerationSettings``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict

from gpuledger.records.spec import (
    BenchSpec,
    SpecModel,
)

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
    ``kinds/train/spec.py``): the model asked for, the device and the dtype (``auto`` until the engine
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


__all__ = [
    "BYTES_PER_ELEMENT",
    "GIB",
    "GenerationSettings",
    "MemoryEstimate",
    "ModelShape",
    "TorchModel",
    "TorchModelSpec",
    "gib",
]
