"""``gpuledger run --task image``: doctor → image bench → cost → report, its result typed (``ImageRunResult``:
its dump is ``gpuledger run --task image --json``'s document).

The model is chosen by device: ``dummy:sdxl`` at 1024×1024, 20 steps when PyTorch sees a GPU whose free
memory holds it (the memory estimate of ``engines/image/pipelines.py``), else ``dummy:tiny-sd`` at 64×64,
4 steps, which finishes in well under two minutes on a 2-core CPU; ``--model`` chooses another. The bench
runs through the one run lifecycle (``bench.runner``), like ``gpuledger bench --task image``; the cost
and the report are those of any run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.markup import escape

from gpuledger.kinds.image.summary import ImageSummary
from gpuledger.kinds.pipeline import (
    PipelineHooks,
    RunOptions,
    TaskMetrics,
    TaskRunResult,
    evaluate_task,
    task_fields,
)

if TYPE_CHECKING:
    from gpuledger.kinds.image.spec import ImageSpec

GPU_MODEL = "dummy:sdxl"
CPU_MODEL = "dummy:tiny-sd"
NA = "n/a"


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


def _n(value: float | None, fmt: str) -> str:
    return NA if value is None else f"{value:{fmt}}"


class ImageMetrics(TaskMetrics):
    """An image run's figures: images, rate, seconds per image, denoising steps per second, each stage's
    mean per request, the device's peak memory and the window (None: the run has no image summary)."""

    images: int | None = None
    images_per_min: float | None = None
    seconds_per_image_p50: float | None = None
    seconds_per_image_p90: float | None = None
    seconds_per_image_p99: float | None = None
    denoise_steps_per_s: float | None = None
    text_encode_s_mean: float | None = None
    denoise_s_mean: float | None = None
    decode_s_mean: float | None = None
    peak_device_memory_bytes: int | None = None
    window_s: float | None = None

    @classmethod
    def of(cls, s: object) -> ImageMetrics:
        if not isinstance(s, ImageSummary):
            return cls()
        return cls(
            images=s.images_total,
            images_per_min=s.images_per_min,
            seconds_per_image_p50=s.seconds_per_image.p50,
            seconds_per_image_p90=s.seconds_per_image.p90,
            seconds_per_image_p99=s.seconds_per_image.p99,
            denoise_steps_per_s=s.denoise_steps_per_s,
            text_encode_s_mean=s.stage_times.text_encode_s.mean,
            denoise_s_mean=s.stage_times.denoise_s.mean,
            decode_s_mean=s.stage_times.decode_s.mean,
            peak_device_memory_bytes=s.peak_memory_bytes,
            window_s=s.window_s,
        )

    def figures(self) -> str:
        """The terminal's line of the run's figures (console markup): rate, seconds per image, each stage."""
        return escape(
            f"{_n(self.images_per_min, '.2f')} images/min, "
            f"{_n(self.seconds_per_image_p50, '.3f')} s/image p50 ({_n(self.seconds_per_image_p99, '.3f')} "
            f"p99); per request: text encoding {_n(self.text_encode_s_mean, '.3f')} s, denoising "
            f"{_n(self.denoise_s_mean, '.3f')} s, VAE decode {_n(self.decode_s_mean, '.3f')} s"
        )


class ImageRunResult(TaskRunResult):
    """``gpuledger run --task image``'s result: ``TaskRunResult``'s fields with the image figures."""

    metrics: ImageMetrics


def check(options: RunOptions) -> None:
    """``run --task image`` takes neither ``--memory-budget``, ``--telemetry-from`` nor ``--repeat``."""
    options.text_only()


def evaluate(options: RunOptions, hooks: PipelineHooks) -> ImageRunResult:
    """The whole evaluation of an image run (the module docstring says which)."""
    from gpuledger.kinds.image.options import image_spec
    from gpuledger.kinds.image.spec import ImageSpec

    def spec_of(choice: ImageChoice) -> ImageSpec:
        return image_spec(
            "diffusers",
            model=choice.model,
            device=choice.device,
            dtype=options.dtype,
            steps=choice.steps,
            height=choice.size,
            width=choice.size,
            num_images=choice.num_images,
            warmup=1,
            label=options.label or "gpuledger run --task image",
        )

    done = evaluate_task(
        options, hooks,
        choosing="choosing the image pipeline",
        choose=lambda: choose_image_run(options.device, options.model, options.quick),
        spec_of=spec_of,
        items="requests",
        failed="every image request failed",
    )
    return ImageRunResult(metrics=ImageMetrics.of(done.run.summary), **task_fields("image", done, ImageSpec))


__all__ = ["ImageChoice", "ImageMetrics", "ImageRunResult", "check", "choose_image_run", "evaluate"]
