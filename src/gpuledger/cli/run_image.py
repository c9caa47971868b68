"""``gpuledger run --task image``: doctor → image bench → cost → report in one command.

The model is chosen by device: ``dummy:sdxl`` at 1024×1024, 20 steps when PyTorch sees a GPU whose free
memory holds it (the memory estimate of ``engines/image/pipelines.py``), else ``dummy:tiny-sd`` at 64×64,
4 steps, which finishes in well under two minutes on a 2-core CPU; ``--model`` chooses another. The bench
runs through the one run lifecycle (``bench.runner``), like ``gpuledger bench --task image``; the cost
and the report are those of any run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuledger.cli.common import print_json
from gpuledger.cli.run_steps import TaskRun, evaluate_task, num, render_task, task_document
from gpuledger.kinds.image.spec import ImageSpec
from gpuledger.kinds.image.summary import ImageSummary

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

    def spec_of(choice: ImageChoice) -> ImageSpec:
        return image_spec(
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

    done = evaluate_task(
        choosing="choosing the image pipeline",
        choose=lambda: choose_image_run(device, model, quick),
        spec_of=spec_of,
        items="requests",
        failed="every image request failed",
        profile=profile,
        html=html,
        db=db,
    )
    doc = _document(done)
    if json_out:
        print_json(doc)
    else:
        render_task(doc, _figures(doc["metrics"]))


def _document(done: TaskRun[ImageChoice]) -> dict[str, Any]:
    s = done.run.summary
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
    return task_document("image", done, ImageSpec, metrics)


def _figures(m: dict[str, Any]) -> str:
    """The terminal's line of an image run's figures: rate, seconds per image, each stage's mean."""
    return (
        f"{num(m.get('images_per_min'), '.2f')} images/min, "
        f"{num(m.get('seconds_per_image_p50'), '.3f')} s/image p50 "
        f"({num(m.get('seconds_per_image_p99'), '.3f')} p99); per request: text encoding "
        f"{num(m.get('text_encode_s_mean'), '.3f')} s, denoising "
        f"{num(m.get('denoise_s_mean'), '.3f')} s, VAE decode {num(m.get('decode_s_mean'), '.3f')} s"
    )
