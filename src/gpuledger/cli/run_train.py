"""``gpuledger run --task train``: doctor → training bench → cost → report in one command.

The model is chosen by device: ``dummy:qwen2.5-0.5b`` (bf16 autocast, 4 sequences of 1,024 tokens, 20 steps)
when PyTorch sees a GPU whose free memory holds the step (the estimate of ``engines/torch/trainplan.py``),
else ``dummy:smollm2-135m`` with 2 sequences of 64 tokens and 6 steps, which finishes in well under a minute
on a 2-core CPU; ``--model`` chooses another (a model folder too). The bench runs through the one run
lifecycle (``bench.runner``) like ``gpuledger bench --task train``; the cost and the report are those of
any run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.markup import escape

from gpuledger.cli.common import print_json
from gpuledger.cli.run_steps import TaskRun, evaluate_task, num, render_task, task_document
from gpuledger.errors import UsageError
from gpuledger.kinds.train.spec import TrainSpec
from gpuledger.kinds.train.summary import TrainingSummary

GPU_MODEL = "dummy:qwen2.5-0.5b"
CPU_MODEL = "dummy:smollm2-135m"


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


def run_train(
    *,
    device: str,
    model: str | None,
    dtype: str,
    profile: str | None,
    html: Path | None,
    label: str,
    quick: bool,
    db: str | None,
    json_out: bool,
) -> None:
    """The whole evaluation of a training run (the module docstring says which)."""
    from gpuledger.bench.train_flags import train_spec
    from gpuledger.engines.torch.distributed import dist_env

    if dist_env() is not None:
        raise UsageError(
            "run --task train is one process: train data-parallel with torchrun ... gpuledger bench --task "
            "train (docs/train.md, 'Several GPUs')"
        )

    def spec_of(choice: TrainChoice) -> TrainSpec:
        return train_spec(
            choice.model,
            device=choice.device.split(":")[0],
            dtype=dtype,
            batch_size=choice.batch_size,
            seq_len=choice.seq_len,
            steps=choice.steps,
            warmup_steps=2,
            label=label or "gpuledger run --task train",
        )

    done = evaluate_task(
        choosing="choosing the model to train",
        choose=lambda: choose_train_run(device, model, dtype, quick),
        spec_of=spec_of,
        items="steps",
        failed="no training step finished",
        profile=profile,
        html=html,
        db=db,
    )
    doc = _document(done)
    if json_out:
        print_json(doc)
    else:
        render_task(doc, _figures(doc["metrics"]))


def _document(done: TaskRun[TrainChoice]) -> dict[str, Any]:
    run = done.run
    s, spec = run.summary, run.config
    metrics: dict[str, Any] = {}
    if isinstance(s, TrainingSummary):
        metrics = {
            "steps": s.steps_total,
            "training_tokens_per_s": s.training_tokens_per_s,
            "samples_per_s": s.samples_per_s,
            "step_time_s_p50": s.step_time_s.p50,
            "step_time_s_p99": s.step_time_s.p99,
            "forward_s_mean": s.forward_s.mean,
            "backward_s_mean": s.backward_s.mean,
            "optimizer_s_mean": s.optimizer_s.mean,
            "loss_first": s.loss_first,
            "loss_last": s.loss_last,
            "mfu": s.mfu,
            "mfu_reason": s.mfu_reason,
            "window_s": s.window_s,
        }
    memory = {
        "estimate": spec.memory_estimate.model_dump(mode="json")
        if isinstance(spec, TrainSpec) and spec.memory_estimate is not None
        else None,
        "peak": (run.server.get("details") or {}).get("peak_memory"),
    }
    return task_document("train", done, TrainSpec, metrics, {"memory": memory})


def _figures(m: dict[str, Any]) -> str:
    """The terminal's line of a training run's figures: rate, step time and its phases, loss, MFU."""
    mfu = f"{m['mfu']:.2%}" if isinstance(m.get("mfu"), float) else f"n/a — {m.get('mfu_reason')}"
    phases = ", ".join(
        f"{k} {num(m.get(f'{k}_s_mean'), '.3f')}" for k in ("forward", "backward", "optimizer")
    )
    return (
        f"{num(m.get('training_tokens_per_s'), ',.1f')} training tok/s, step "
        f"{num(m.get('step_time_s_p50'), '.3f')} s p50 ({phases} s); loss "
        f"{num(m.get('loss_first'), '.4g')} → {num(m.get('loss_last'), '.4g')}; MFU {escape(mfu)}"
    )
