"""What a training run of a model needs, worked out before anything is built (pure arithmetic over the model's
shape; no torch): the model FLOPs per token MFU is measured with, the memory one device needs for a step,
and the peak FLOP/s of the device at the run's dtype from the GPU catalog. docs/train.md has the formulas.

Model FLOPs per token — torchtitan's convention (``torchtitan/models/utils.py``,
``get_dense_model_nparams_and_flops``): ``6 × N + 12 × L × H × S`` with ``N`` the parameters without the input
embedding (an untied LM head counts, a tied one does not: its matmul is left out as torchtitan leaves it
out), ``L`` layers, ``H`` the hidden size (heads × head dim), ``S`` the sequence length. 6 = 2 FLOPs per
multiply-add × (1 forward + 2 backward); 12·L·H·S is attention's score and value matmuls over the sequence,
the causal mask not discounted and activation recomputation not counted.

Memory of one device for one step (weights kept in fp32, bf16/fp16 under autocast):

- weights 4 B × params; gradients 4 B × params; optimizer states 8 B × params (AdamW: two moments) or
  4 B × params (SGD: momentum);
- activations, per token of a micro-batch (``a`` = 2 B under 16-bit autocast, 4 B in fp32): each layer keeps
  ``a × (9H + 4I) + 16H`` bytes (the matmul inputs and outputs at ``a``; the residual stream and the norms'
  inputs in fp32), the loss ``(a + 8) × V`` (the logits, their fp32 copy and log-softmax), embeddings and
  the final norm ``16H``. With activation checkpointing a layer keeps only its fp32 input (``4H``); the loss's
  tensors are freed before the first layer is recomputed, so the larger of the two is added. A fused
  attention kernel (PyTorch's SDPA, transformers' default) stores no S×S score matrix;
- overhead: 5 % of the above + 256 MiB (allocator slack, runtime).
"""

from __future__ import annotations

from gpuledger.catalog import peak_compute
from gpuledger.engines.torch.device import DeviceInfo
from gpuledger.engines.torch.models import param_count
from gpuledger.facts.naming import catalog_spec_for_name
from gpuledger.kinds.train.spec import TrainMemoryEstimate
from gpuledger.records.torchspec import ModelShape

FLOPS_METHOD = (
    "torchtitan convention: 6 × non-embedding parameters + 12 × layers × hidden size × sequence length "
    "per token (forward + backward; causal mask not discounted, recomputation not counted)"
)
OPTIMIZER_STATE_BYTES: dict[str, int] = {"adamw": 8, "sgd": 4}
MEMORY_METHOD = (
    "weights, gradients (fp32) and optimizer states from the parameter count; activations per token from "
    "the model's shape (docs/train.md); overhead 5 % + 256 MiB"
)
OVERHEAD_FIXED = 256 * 1024**2


def embedding_parameters(shape: ModelShape) -> int:
    """The input embedding matrix: vocab × hidden."""
    return shape.vocab_size * shape.hidden_size


def non_embedding_parameters(params: int, shape: ModelShape) -> int:
    """``params`` without the input embedding (a tied LM head shares it, so it goes too)."""
    return max(0, params - embedding_parameters(shape))


def flops_per_token(params: int, shape: ModelShape, seq_len: int) -> float:
    """Model FLOPs of one training token (forward + backward), torchtitan's convention (module docstring)."""
    n = non_embedding_parameters(params, shape)
    return 6.0 * n + 12.0 * shape.num_layers * shape.hidden_size * seq_len


def dummy_parameters(shape: ModelShape) -> int:
    """The parameter count of a built-in architecture (config arithmetic, ``models.param_count``)."""
    return param_count(shape)


def activation_bytes(
    shape: ModelShape, dtype: str, micro_batch: int, seq_len: int, checkpointing: bool
) -> int:
    """Activations one micro-batch keeps for the backward pass (module docstring)."""
    a = 4 if dtype == "fp32" else 2
    h, i, v = shape.hidden_size, shape.intermediate_size, shape.vocab_size
    layer = a * (9 * h + 4 * i) + 16 * h
    outside = (a + 8) * v + 16 * h
    if checkpointing:  # the layers' inputs, then one layer recomputed after the loss's tensors are gone
        return micro_batch * seq_len * (shape.num_layers * 4 * h + max(layer, outside))
    return micro_batch * seq_len * (shape.num_layers * layer + outside)


def estimate_training_memory(
    params: int,
    shape: ModelShape,
    *,
    dtype: str,
    optimizer: str,
    micro_batch: int,
    seq_len: int,
    checkpointing: bool,
    device: DeviceInfo,
) -> TrainMemoryEstimate:
    """The memory one device needs for a step, against its free memory (``fits``)."""
    weights = 4 * params
    grads = 4 * params
    states = OPTIMIZER_STATE_BYTES[optimizer] * params
    full = activation_bytes(shape, dtype, micro_batch, seq_len, False)
    ckpt = activation_bytes(shape, dtype, micro_batch, seq_len, True)
    act = ckpt if checkpointing else full
    model = weights + grads + states + act
    overhead = model // 20 + OVERHEAD_FIXED
    total = model + overhead
    free = device.free_memory_bytes
    return TrainMemoryEstimate(
        weights_bytes=weights,
        gradient_bytes=grads,
        optimizer_bytes=states,
        activation_bytes=act,
        activation_bytes_full=full,
        activation_bytes_checkpointed=ckpt,
        overhead_bytes=overhead,
        checkpointing=checkpointing,
        available_bytes=free,
        available_source=device.memory_source,
        dtype=dtype,
        optimizer=optimizer,
        micro_batch=micro_batch,
        seq_len=seq_len,
        total_bytes=total,
        fits=free is None or total <= free,
        method=MEMORY_METHOD,
    )


def peak_flops(device: DeviceInfo, dtype: str) -> tuple[float | None, str]:
    """One device's peak dense FLOP/s at ``dtype`` from the GPU catalog and where it comes from, or None and
    why there is none (a CPU, a GPU the catalog does not know, a dtype it has no figure for)."""
    if device.type == "cpu":
        return None, f"no peak FLOP/s for {device.name} (a CPU: the GPU catalog has no CPUs)"
    spec = catalog_spec_for_name(device.name)
    if spec is None:
        return None, (
            f"no peak FLOP/s for {device.name} (not in the GPU catalog: `gpuledger gpus` lists it; a user "
            "catalog file can add it)"
        )
    if dtype == "fp32":
        return None, (
            f"no peak FLOP/s for {spec.name} at fp32 (the catalog lists its FP16/BF16 and FP8 tensor "
            "figures; "
            "train in bf16 or fp16 for an MFU)"
        )
    fig, note = peak_compute(spec, dtype)
    if fig.value is None:
        return None, f"no peak FLOP/s for {spec.name}: {fig.reason}"
    return fig.value * 1e12, f"{spec.name}: {note} {fig.value:g} TFLOPS per device ({fig.provenance()})"
