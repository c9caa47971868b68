"""``gpuledger run --task image``: doctor → image bench → cost → report in one command.

The model is chosen by device: ``dummy:sdxl`` at 1024×1024, 20 steps when PyTorch sees a GPU whose free
memory holds it (the memory estimate of ``engines/image/pipelines.py``), else ``dummy:tiny-sd`` at 64×64,
4 steps, which finishes in well under two minutes on a 2-core CPU; ``--model`` chooses another. The bench
runs through the one run lifecycle (``bench.runner``), like ``gpuledger bench --task image``; the cost
and the report are those of any run.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape

from gpuledger.cli.common import console, print_json
from gpuledger.errors import EngineError, GpuledgerError, Interrupted
from gpuledger.records.image import ImageSpec, ImageSummary

if TYPE_CHECKING:
    from gpuledger.cost import CostProfile
    from gpuledger.records import RunInfo
    from gpuledger.store import Store

GPU_MODEL = "dummy:sdxl"
CPU_MODEL = "dummy:tiny-sd"


@dataclass(frozen=True, slots=True)
class ImageChoice:
    model: str
    device: str
    steps: int
    size: int
    num_images: int
    reason: str


def choose_image_run(device: str, model: str | None, quick: bool) -> ImageChoice:
    """The pipeline and sizes of ``run --task image`` (see the module docstring)."""
    from gpuledger.engines.image.catalog import dummy_pipeline, is_dummy
    from gpuledger.engines.image.pipelines import component_parameters, estimate_memory
    from gpuledger.engines.torch.device import resolve_dtype, select_device

    dev = select_device(device)
    if model is not None:
        d = dummy_pipeline(model).defaults if is_dummy(model) else None
        size = d.height if d is not None else 512
        steps = d.steps if d is not None else 20
        if dev.type == "cpu" and d is not None and model != CPU_MODEL:
            size, steps = min(size, 256), min(steps, 4)
        return ImageChoice(
            model, dev.torch_device, steps, size, 4 if dev.type != "cpu" else 2, f"--model {model}"
        )
    if dev.type == "cuda" and not quick:
        params = sum(component_parameters(dummy_pipeline(GPU_MODEL)).values())
        est = estimate_memory(
            params, resolve_dtype("auto", dev), 1, 1024, 1024, dev.free_memory_bytes, dev.memory_source
        )
        if est.fits:
            return ImageChoice(
                GPU_MODEL,
                dev.torch_device,
                20,
                1024,
                8,
                f"{dev.name} has room for {GPU_MODEL} at 1024×1024 ({est.text()})",
            )
        why = f"{GPU_MODEL} does not fit on {dev.name} ({est.text()})"
    elif dev.type == "cuda":
        why = "--quick"
    else:
        why = dev.fallback_reason or "no GPU: the CPU computes"
    return ImageChoice(CPU_MODEL, dev.torch_device, 4, 64, 8, f"{why}: the tiny built-in pipeline")


def run_image(
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
    """The whole evaluation of an image run (the module docstring says which)."""
    from gpuledger.bench.image_flags import image_spec
    from gpuledger.bench.runner import Hooks, run_bench_async
    from gpuledger.cli.common import environment_fingerprint
    from gpuledger.cli.run_cmd import _cost_step, _default_html_path, _doctor_step, _steps
    from gpuledger.cost import load_profile
    from gpuledger.store import open_store

    prof: CostProfile | None = load_profile(profile) if profile else None
    missing: list[str] = []
    store = open_store(db)
    try:
        with _steps() as steps:
            steps.phase("choosing the image pipeline")
            choice = choose_image_run(device, model, quick)
            steps.phase("doctor: collecting facts about the stack")
            doctor = _doctor_step(store, missing)
            spec = image_spec(
                "diffusers",
                model=choice.model,
                device=choice.device,
                dtype=dtype,
                steps=choice.steps,
                height=choice.size,
                width=choice.size,
                num_images=choice.num_images,
                warmup=1,
                label=label or "gpuledger run --task image",
            )
            hooks = Hooks(
                on_phase=steps.phase, on_progress=steps.advance, environment=environment_fingerprint
            )
            run = asyncio.run(run_bench_async(spec, store, hooks=hooks))
            stopped = run.summary.interrupted if run.summary is not None else None
            if stopped is not None:
                raise Interrupted(
                    f"{stopped.signal}: run {run.id} saved as incomplete with "
                    f"{stopped.finished_requests} finished requests"
                )
            if run.status == "failed":
                raise EngineError(
                    f"run {run.id}: every image request failed", hint=f"gpuledger runs show {run.id}"
                )
            steps.phase("cost")
            cost = _cost_step(store, run, prof, missing)
            steps.phase("report")
            html_path = _report(store, run, profile, html or _default_html_path(run.id), missing)
    finally:
        store.close()
    doc = _document(run, choice, doctor, cost.to_dict() if cost is not None else None, html_path, missing)
    if json_out:
        print_json(doc)
    else:
        _render(doc)


def _report(store: Store, run: RunInfo, profile: str | None, target: Path, missing: list[str]) -> str | None:
    from gpuledger.cli.files import write_output
    from gpuledger.report import build_report, render_html

    try:
        data = build_report(store, [run.id], {"*": profile} if profile else None)
        write_output(target, render_html(data))
    except GpuledgerError as exc:
        missing.append(f"report: not written — {exc.message}")
        return None
    return str(target)


def _document(
    run: RunInfo,
    choice: ImageChoice,
    doctor: dict[str, Any] | None,
    cost: dict[str, Any] | None,
    html: str | None,
    missing: list[str],
) -> dict[str, Any]:
    s = run.summary
    spec = run.config
    metrics: dict[str, Any] = {}
    if isinstance(s, ImageSummary):
        metrics = {
            "images": s.images_total,
            "images_per_min": s.images_per_min,
            "seconds_per_image_p50": s.seconds_per_image.p50,
            "seconds_per_image_p90": s.seconds_per_image.p90,
            "seconds_per_image_p99": s.seconds_per_image.p99,
            "denoise_steps_per_s": s.denoise_steps_per_s,
            "text_encode_s_mean": s.stage_times.text_encode_s.mean,
            "denoise_s_mean": s.stage_times.denoise_s.mean,
            "decode_s_mean": s.stage_times.decode_s.mean,
            "peak_device_memory_bytes": s.peak_memory_bytes,
            "window_s": s.window_s,
        }
    price = {k: v for k, v in (cost or {}).items() if isinstance(k, str) and "_per_" in k and "image" in k}
    return {
        "task": "image",
        "run_id": run.id,
        "status": run.status,
        "model": choice.model,
        "model_choice": {"reason": choice.reason},
        "device": spec.device if isinstance(spec, ImageSpec) else choice.device,
        "dtype": spec.dtype if isinstance(spec, ImageSpec) else None,
        "workload": run.workload,
        "doctor": doctor,
        "metrics": metrics,
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
        f"[bold]gpuledger run --task image[/bold] — {escape(doc['model'])} on {escape(str(doc['device']))} "
        f"({escape(str(doc['dtype']))}); {escape(doc['model_choice']['reason'])}",
        highlight=False,
    )
    c = doc["cost"]
    if c is not None:
        prices = ", ".join(f"{_n(v, '.4g')} {k}" for k, v in c.items() if k not in ("currency", "document"))
        console.print(f"  cost: {escape(prices)}", highlight=False)
    console.print(
        f"  {_n(m.get('images_per_min'), '.2f')} images/min, "
        f"{_n(m.get('seconds_per_image_p50'), '.3f')} s/image p50 "
        f"({_n(m.get('seconds_per_image_p99'), '.3f')} p99); per request: text encoding "
        f"{_n(m.get('text_encode_s_mean'), '.3f')} s, denoising {_n(m.get('denoise_s_mean'), '.3f')} s, VAE "
        f"decode {_n(m.get('decode_s_mean'), '.3f')} s",
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
