"""The spec of a training run (``kinds.train.spec.TrainSpec``) from ``gpuledger bench --task train``'s
values, and for library callers (``gpuledger run --task train``, the benchmarks, tests): ``train_spec``.

Flags: ``--model`` (``dummy:NAME`` or a model folder), ``--device``, ``--dtype auto|bf16|fp16|fp32``,
``--batch-size`` (sequences per micro-batch on each rank), ``--seq-len``, ``--grad-accum``, ``--steps``
(measured), ``--warmup-steps``, ``--optimizer adamw|sgd``, ``--learning-rate``,
``--activation-checkpointing``, ``--compile``, ``--data FILE`` (text or JSONL, tokenised with the model
folder's tokenizer; default random token ids) and ``--seed``. A flag of another workload (``--dataset``,
``--rate``, ``--num-requests``, ``--warmup``, ...) is refused with one line saying what to give instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpuledger.engines import EngineKind
from gpuledger.errors import UsageError
from gpuledger.kinds.train.spec import (
    DEFAULT_LEARNING_RATE,
    DEFAULT_SEQ_LEN,
    DEFAULT_STEPS,
    DEFAULT_WARMUP_STEPS,
    TrainSpec,
)
from gpuledger.records.spec import checked, settled

ENGINE = "torch-train"
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
# Flags of the other workloads, and what a training run takes instead.
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
}
# Flags whose default is not a value the user chose: refused only when given on the command line.
_GIVEN_ONLY = ("warmup", "server_metrics", "request_timeout", "api_key_env")

# What each flag sets in the stored spec (``bench --like`` copies them from a stored training run).
TRAIN_FLAG_FIELDS: dict[str, tuple[str, ...]] = {
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
}
TRAIN_REPEAT_NEEDS: tuple[str, ...] = ("model.spec", "batch_size", "seq_len", "steps")


def dtype_name(value: str | None) -> str:
    """``bfloat16`` -> ``bf16``; ``UsageError`` naming the choices otherwise."""
    key = _DTYPES.get((value or "auto").strip().lower())
    if key is None:
        raise UsageError(f"--dtype must be one of auto, bf16, fp16, fp32 (got {value!r})")
    return key


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
    """The document of a training run (validated by ``train_spec`` / ``bench.flags.spec_of``)."""
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
    spec = settled(checked(TrainSpec, train_document(model, **values)))
    assert isinstance(spec, TrainSpec)
    return spec


def train_from(kind: EngineKind, v: Mapping[str, Any]) -> dict[str, Any]:
    """``gpuledger bench``'s values -> the training document (``bench.flags.flags_document`` for
    TrainSpec)."""
    given = set(v.get("given") or ())
    for key, instead in _NOT_FOR_TRAINING.items():
        value = v.get(key)
        if key in given or (key not in _GIVEN_ONLY and value not in (None, (), [], "", 0.0)):
            raise UsageError(f"--{key.replace('_', '-')} is not for --task train: {instead}")
    if "warmup" in given:
        raise UsageError("--warmup counts requests: give --warmup-steps for --task train")
    if v.get("server_metrics"):
        raise UsageError("--server-metrics is for text generation servers, not --task train")
    if v.get("device") not in (None, "auto", "cpu", "cuda"):
        raise UsageError(f"--device must be one of auto, cpu, cuda (got {v.get('device')!r})")

    def given_or(key: str, default: Any) -> Any:
        value = v.get(key)
        return default if value is None else value

    return train_document(
        v.get("model"),
        device=v.get("device") or "auto",
        dtype=v.get("dtype") or "auto",
        batch_size=given_or("batch_size", 1),
        seq_len=given_or("seq_len", DEFAULT_SEQ_LEN),
        grad_accum=given_or("grad_accum", 1),
        steps=given_or("steps", DEFAULT_STEPS),
        warmup_steps=given_or("warmup_steps", DEFAULT_WARMUP_STEPS),
        optimizer=v.get("optimizer") or "adamw",
        learning_rate=given_or("learning_rate", DEFAULT_LEARNING_RATE),
        activation_checkpointing=bool(v.get("activation_checkpointing")),
        compile_model=bool(v.get("compile")),
        data=v.get("data"),
        seed=given_or("seed", 0),
        label=v.get("label") or "",
        telemetry=v.get("telemetry", True),
        telemetry_interval_s=given_or("telemetry_interval", 0.1),
    )
