"""``gpuledger run --task train``: doctor → training bench → cost → report in one command.

The model is chosen by device: ``dummy:qwen2.5-0.5b`` (bf16 autocast, 4 sequences of 1,024 tokens, 20 steps)
when PyTorch sees a GPU whose free memory holds the step (the estimate of ``engines/torch/trainplan.py``),
else ``dummy:smollm2-135m`` with 2 sequences of 64 tokens and 6 steps, which finishes in well under a minute
on a 2-core CPU; ``--model`` chooses another (a model folder too). The bench runs through the one run
lifecycle (``bench.runner``) like ``gpuledger bench --task train``; the cost and the report are those of
any run.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape

from gpuledger.cli.common import console, print_json
from gpuledger.errors import EngineError, Interrupted, UsageError
from gpuledger.records.training import TrainingSummary
from gpuledger.records.trainspec import TrainSpec

if TYPE_CHECKING:
    from gpuledger.cost import CostProfile
    from gpuledger.records import RunInfo

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
    from gpuledger.bench.runner import Hooks, run_bench_async
    from gpuledger.bench.train_flags import train_spec
    from gpuledger.cli.common import environment_fingerprint
    from gpuledger.cli.run_cmd import _cost_step, _doctor_step, _report_step, _steps
    from gpuledger.cost import load_profile
    from gpuledger.engines.torch.distributed import dist_env
    from gpuledger.store import open_store

    if dist_env() is not None:
        raise UsageError(
            "run --task train is one process: train data-parallel with torchrun ... gpuledger bench --task "
            "train (docs/train.md, 'Several GPUs')"
        )
    prof: CostProfile | None = load_profile(profile) if profile else None
    missing: list[str] = []
    store = open_store(db)
    try:
        with _steps() as steps:
            steps.phase("choosing the model to train")
            choice = choose_train_run(device, model, dtype, quick)
            steps.phase("doctor: collecting facts about the stack")
            doctor = _doctor_step(store, missing)
            spec = train_spec(
                choice.model,
                device=choice.device.split(":")[0],
                dtype=dtype,
                batch_size=choice.batch_size,
                seq_len=choice.seq_len,
                steps=choice.steps,
                warmup_steps=2,
                label=label or "gpuledger run --task train",
            )
            hooks = Hooks(
                on_phase=steps.phase, on_progress=steps.advance, environment=environment_fingerprint
            )
            run = asyncio.run(run_bench_async(spec, store, hooks=hooks))
            stopped = run.summary.interrupted if run.summary is not None else None
            if stopped is not None:
                raise Interrupted(
                    f"{stopped.signal}: run {run.id} saved as incomplete with "
                    f"{stopped.finished_requests} finished steps"
                )
            if run.status == "failed":
                raise EngineError(f"run {run.id}: no training step finished", hint=f"gpuledger show {run.id}")
            steps.phase("cost")
            cost = _cost_step(store, run, prof, missing)
            steps.phase("report")
            html_path = _report_step(store, run, profile, html, missing, steps.phase)
    finally:
        store.close()
    doc = _document(run, choice, doctor, cost.to_dict() if cost is not None else None, html_path, missing)
    if json_out:
        print_json(doc)
    else:
        _render(doc)


def _document(
    run: RunInfo,
    choice: TrainChoice,
    doctor: dict[str, Any] | None,
    cost: dict[str, Any] | None,
    html: str | None,
    missing: list[str],
) -> dict[str, Any]:
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
    price = {k: v for k, v in (cost or {}).items() if isinstance(k, str) and "_per_" in k and "training" in k}
    return {
        "task": "train",
        "run_id": run.id,
        "status": run.status,
        "model": choice.model,
        "model_choice": {"reason": choice.reason},
        "device": spec.device if isinstance(spec, TrainSpec) else choice.device,
        "dtype": spec.dtype if isinstance(spec, TrainSpec) else None,
        "workload": run.workload,
        "doctor": doctor,
        "metrics": metrics,
        "memory": {
            "estimate": spec.memory_estimate.model_dump(mode="json")
            if isinstance(spec, TrainSpec) and spec.memory_estimate is not None
            else None,
            "peak": (run.server.get("details") or {}).get("peak_memory"),
        },
        "cost": {"currency": (cost or {}).get("currency"), **price, "document": cost}
        if cost is not None
        else None,
        "report_html": html,
        "missing": missing,
    }


def _n(value: Any, fmt: str) -> str:
    return "n/a" if not isinstance(value, int | float) else f"{value:{fmt}}"


def _render(doc: dict[str, Any]) -> None:
    m = doc["metrics"]
    console.print(
        f"[bold]gpuledger run --task train[/bold] — {escape(doc['model'])} on {escape(str(doc['device']))} "
        f"({escape(str(doc['dtype']))}); {escape(doc['model_choice']['reason'])}",
        highlight=False,
    )
    c = doc["cost"]
    if c is not None:
        prices = ", ".join(f"{_n(v, '.4g')} {k}" for k, v in c.items() if k not in ("currency", "document"))
        console.print(f"  cost: {escape(prices)}", highlight=False)
    mfu = f"{m['mfu']:.2%}" if isinstance(m.get("mfu"), float) else f"n/a — {m.get('mfu_reason')}"
    phases = ", ".join(f"{k} {_n(m.get(f'{k}_s_mean'), '.3f')}" for k in ("forward", "backward", "optimizer"))
    console.print(
        f"  {_n(m.get('training_tokens_per_s'), ',.1f')} training tok/s, step "
        f"{_n(m.get('step_time_s_p50'), '.3f')} s p50 ({phases} s); loss {_n(m.get('loss_first'), '.4g')} → "
        f"{_n(m.get('loss_last'), '.4g')}; MFU {escape(mfu)}",
        highlight=False,
    )
    d = doc["doctor"]
    if d is not None:
        console.print(f"  doctor: {d['errors']} errors, {d['warnings']} warnings", highlight=False)
    console.print(
        f"  run id: {escape(doc['run_id'])} ({escape(doc['status'])}) — gpuledger report "
        f"{escape(doc['run_id'])}",
        highlight=False,
    )
    console.print(f"report: {escape(doc['report_html'] or 'n/a')}", highlight=False)
    for line in doc["missing"]:
        console.print(f"  [yellow]missing:[/yellow] {escape(line)}", highlight=False)
