"""Image generation: the run's spec (``ImageSpec``), what one request measured (``ImageTiming``, kept in the
request record), and the run's summary (``ImageSummary``) with the pure function that makes it
(``summarize_images``). docs/image.md has the definitions; in short:

- a request is one pipeline call (diffusers), one queued prompt (ComfyUI) or one HTTP request (OpenAI
  images API); it yields ``images`` pictures (its batch);
- seconds per image: the request's latency (end − sent) ÷ its images; p50/p90/p99 over the requests;
- images per minute: images of the successful requests ÷ the measured window × 60;
- denoising steps per second: Σ (steps × images) ÷ window — one step of one image is a ``denoise_step``,
  the unit priced "per 1M denoising steps" — and, per request, steps ÷ denoising time (the "it/s" a
  progress bar shows, a batch's images denoised together);
- stage times (text encoding, denoising, VAE decode; queue wait and execution for a server) per request,
  with the end of every denoising step (``ImageTiming.step_end_s``, seconds after the request was sent).

A request record of an image run keeps its ``ImageTiming`` under ``server_timings["image"]``; its token
fields stay empty. A few downscaled thumbnails (PNG, base64) ride on the first requests' records and are
copied into the summary, so that a report (``--no-images`` to leave them out) shows the run made pictures.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import ClassVar, Literal

from pydantic import Field

from gpuledger.quantity import Quantity
from gpuledger.records.itemstats import (
    MAX_EXAMPLES,
    Latency,
    item_counts,
    latency_of,
    per_window,
    percentile_figures,
    timing_in,
    window_of,
)
from gpuledger.records.request import RequestRecord
from gpuledger.records.summary import EMPTY_WINDOW, WINDOW, RunSummary, Strict, measured
from gpuledger.records.units import Work, register_unit

register_unit("image", "images", 1e3)
register_unit("denoise_step", "denoising steps", 1e6, short="steps")
register_unit("request", "requests", 1)

TIMING_KEY = "image"
# Thumbnails kept per run (on the first requests' records), and their longest side in pixels.
MAX_THUMBNAILS = 4
THUMBNAIL_PX = 96
# A thumbnail larger than this (base64 characters) is not kept: a hostile server's "PNG" stays out.
MAX_THUMBNAIL_CHARS = 64_000

ImageEngineName = Literal["diffusers", "comfyui", "openai-images"]


class Thumbnail(Strict):
    """A downscaled PNG of one generated image, base64 (``data:image/png;base64,`` + ``png_base64``)."""

    request: int
    width: int = Field(ge=1, le=THUMBNAIL_PX)
    height: int = Field(ge=1, le=THUMBNAIL_PX)
    source_width: int | None = Field(default=None, ge=1)
    source_height: int | None = Field(default=None, ge=1)
    png_base64: str = Field(min_length=8, max_length=MAX_THUMBNAIL_CHARS, pattern=r"^[A-Za-z0-9+/=]+$")


class NodeTime(Strict):
    """One ComfyUI node's execution in one request: its id, class and seconds (None: it ran from cache)."""

    node: str = Field(max_length=64)
    class_type: str | None = Field(default=None, max_length=128)
    seconds: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    cached: bool = False


class ImageTiming(Strict):
    """What one request measured beyond its send and end times (seconds; None: not measured, with the
    reason in ``notes``). ``step_end_s``: when each denoising step ended, seconds after the send."""

    engine: str = Field(max_length=32)
    images: int = Field(ge=0, le=100_000)
    width: int | None = Field(default=None, ge=1)
    height: int | None = Field(default=None, ge=1)
    steps: int | None = Field(default=None, ge=0)
    text_encode_s: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    denoise_s: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    decode_s: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    queue_wait_s: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    execution_s: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    peak_memory_bytes: int | None = Field(default=None, ge=0)
    step_end_s: list[float] | None = Field(default=None, max_length=100_000)
    nodes: list[NodeTime] | None = None
    prompt_id: str | None = Field(default=None, max_length=128)
    outputs: list[str] | None = None  # output files a server reported (ComfyUI's filenames)
    output_bytes: int | None = Field(default=None, ge=0)
    error_node: str | None = Field(default=None, max_length=200)
    thumbnails: list[Thumbnail] | None = None
    notes: list[str] | None = None


def timing_of(record: RequestRecord) -> ImageTiming | None:
    """The request's image timing, or None when the record has none (or a malformed one)."""
    return timing_in(record, TIMING_KEY, ImageTiming)


class StageTimes(Strict):
    """Per-request seconds of each stage (Latency blocks in seconds, not milliseconds)."""

    text_encode_s: Latency = Field(default_factory=Latency)
    denoise_s: Latency = Field(default_factory=Latency)
    decode_s: Latency = Field(default_factory=Latency)
    queue_wait_s: Latency = Field(default_factory=Latency)
    execution_s: Latency = Field(default_factory=Latency)


class NodeClassTime(Strict):
    """A ComfyUI node class over the run: how often it ran, its mean seconds, how often it was cached."""

    class_type: str
    runs: int = 0
    cached: int = 0
    mean_s: float | None = None
    total_s: float = 0.0


class ImageSummary(RunSummary):
    """An image-generation run over its measured window (``summarize_images``)."""

    KIND: ClassVar[str] = "image_generation"
    HEADLINE: ClassVar[str] = "image"
    PRICE_UNITS: ClassVar[tuple[str, ...] | None] = ("image", "denoise_step", "request")
    YIELD_UNITS: ClassVar[tuple[str, ...] | None] = ("image",)
    RATE_KEYS: ClassVar[dict[str, str]] = {
        "image": "images_per_s",
        "denoise_step": "denoise_steps_per_s",
        "request": "requests_per_s",
    }
    # Steps, resolution and scheduler are compared through the workload (``ImageSpec.workload_record``).
    SIZE_UNITS: ClassVar[tuple[tuple[str, str, str], ...]] = ()

    images_total: int = Field(default=0, ge=0)
    steps_total: int = Field(default=0, ge=0)
    images_per_s: float | None = None
    images_per_min: float | None = None
    denoise_steps_per_s: float | None = None
    requests_per_s: float | None = None
    seconds_per_image: Latency = Field(default_factory=Latency)
    request_s: Latency = Field(default_factory=Latency)
    step_it_per_s: Latency = Field(default_factory=Latency)
    stage_times: StageTimes = Field(default_factory=StageTimes)
    peak_memory_bytes: int | None = None
    engine: str | None = None
    model: str | None = None
    resolution: str | None = None
    steps_per_image: float | None = None
    scheduler: str | None = None
    resolutions: dict[str, int] = Field(default_factory=dict)
    step_counts: dict[str, int] = Field(default_factory=dict)
    node_classes: list[NodeClassTime] | None = None
    thumbnails: list[Thumbnail] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)

    def work(self) -> dict[str, Work]:
        out = {
            "image": Work(count=self.images_total, per_s=self.images_per_s),
            "request": Work(count=self.num_ok, per_s=self.requests_per_s),
        }
        if self.steps_total:
            out["denoise_step"] = Work(count=self.steps_total, per_s=self.denoise_steps_per_s)
        return out

    def key_figures(self) -> list[tuple[str, Quantity]]:
        out = super().key_figures()
        out.append(("images per minute", measured(self.images_per_min, "images/min", WINDOW, EMPTY_WINDOW)))
        spi, it = self.seconds_per_image, self.step_it_per_s
        out.extend(percentile_figures("s/image", spi, "s", f"{spi.n} requests", "no request finished"))
        per_request = f"{it.n} requests, per request"
        steps_missing = "the engine does not report steps"
        out.append(("denoising it/s p50", measured(it.get("p50"), "steps/s", per_request, steps_missing)))
        return out

    def fidelity_notes(self) -> list[str]:
        out = list(self.notes)
        if len(self.resolutions) > 1:
            out.append(
                "the images came at more than one resolution: "
                + ", ".join(f"{k} ({v})" for k, v in sorted(self.resolutions.items()))
            )
        if len(self.step_counts) > 1:
            out.append(
                "the requests ran different numbers of denoising steps: "
                + ", ".join(f"{k} ({v})" for k, v in sorted(self.step_counts.items()))
            )
        return out

    def compute_share(self) -> tuple[float | None, str]:
        return 1.0, (
            "image generation is compute-bound: every denoising step runs the whole network over the latent "
            "(no memory-bound decode phase)"
        )

    def workload_text(self) -> str:
        """``"dummy:sdxl 1024×1024, 20 steps, euler"``: what one image was (compare warns when it differs)."""
        parts = [p for p in (self.model, self.resolution) if p]
        if self.steps_per_image is not None:
            parts.append(f"{self.steps_per_image:g} steps")
        if self.scheduler:
            parts.append(self.scheduler)
        return ", ".join(parts)

    def with_window(self, scale: float) -> ImageSummary:
        return self.rates_scaled(
            scale, ("images_per_s", "images_per_min", "denoise_steps_per_s", "requests_per_s")
        )


def summarize_images(
    records: Sequence[RequestRecord], *, model: str | None = None, scheduler: str | None = None
) -> ImageSummary:
    """The summary of an image run's requests (pure: the same records give the same summary).

    The window runs from the first request sent to the last one finished (failed ones included: they
    held the engine too); rates count the successful requests' images and steps."""
    if not records:
        return ImageSummary(model=model, scheduler=scheduler)
    window = window_of(records)
    ok = [r for r in records if r.ok]
    timings = {r.index: timing_of(r) for r in records}

    images = 0
    steps = 0
    per_image: list[float] = []
    latency: list[float] = []
    it_per_s: list[float] = []
    stage_values: dict[str, list[float]] = {k: [] for k in StageTimes.model_fields}
    resolutions: Counter[str] = Counter()
    step_counts: Counter[str] = Counter()
    peak: int | None = None
    engine: str | None = None
    node_runs: dict[str, NodeClassTime] = {}
    thumbs: list[Thumbnail] = []
    notes: list[str] = []
    for r in ok:
        t = timings.get(r.index)
        n_images = t.images if t is not None else 0
        images += n_images
        end_r = r.t_end if r.t_end is not None else r.t_send
        lat = max(end_r - r.t_send, 0.0)
        latency.append(lat)
        if n_images:
            per_image.append(lat / n_images)
        if t is None:
            continue
        engine = engine or t.engine
        if t.steps is not None:
            steps += t.steps * n_images
            step_counts[str(t.steps)] += 1
            if t.denoise_s and t.steps:
                it_per_s.append(t.steps / t.denoise_s)
        if t.width and t.height:
            resolutions[f"{t.width}×{t.height}"] += n_images
        for key, values in stage_values.items():
            value = getattr(t, key)
            if value is not None:
                values.append(value)
        if t.peak_memory_bytes is not None:
            peak = max(peak or 0, t.peak_memory_bytes)
        for node in t.nodes or []:
            entry = node_runs.setdefault(
                node.class_type or "?", NodeClassTime(class_type=node.class_type or "?")
            )
            entry.runs += 1
            if node.cached:
                entry.cached += 1
            elif node.seconds is not None:
                entry.total_s += node.seconds
        for th in t.thumbnails or []:
            if len(thumbs) < MAX_THUMBNAILS:
                thumbs.append(th)
        for note in t.notes or []:
            if note not in notes and len(notes) < MAX_EXAMPLES:
                notes.append(note)
    for entry in node_runs.values():
        timed = entry.runs - entry.cached
        entry.mean_s = entry.total_s / timed if timed else None

    top_resolution = resolutions.most_common(1)[0][0] if resolutions else None
    steps_per_image: float | None = None
    if step_counts:
        weighted = sum(int(k) * v for k, v in step_counts.items())
        steps_per_image = weighted / sum(step_counts.values())

    images_per_s = per_window(images, window)
    return ImageSummary(
        **item_counts(records, window),
        images_total=images,
        steps_total=steps,
        images_per_s=images_per_s,
        images_per_min=None if images_per_s is None else images_per_s * 60,
        denoise_steps_per_s=per_window(steps, window) if steps else None,
        requests_per_s=per_window(len(ok), window),
        seconds_per_image=latency_of(per_image),
        request_s=latency_of(latency),
        step_it_per_s=latency_of(it_per_s),
        stage_times=StageTimes(**{k: latency_of(v) for k, v in stage_values.items()}),
        peak_memory_bytes=peak,
        engine=engine,
        model=model,
        resolution=top_resolution,
        steps_per_image=steps_per_image,
        scheduler=scheduler,
        resolutions=dict(resolutions),
        step_counts=dict(step_counts),
        node_classes=sorted(node_runs.values(), key=lambda e: -e.total_s) or None,
        thumbnails=thumbs,
        notes=notes,
    )


ImageSummary.model_rebuild()
