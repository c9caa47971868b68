"""What crosses an image engine: one request (a prompt, a seed, the sizes) and what the client measured for
it. Like the text engines, a per-request fault is a value (``ImageResult.error``), never an exception; only
"the engine cannot be used at all" raises ``EngineError`` (or ``ResourceError`` when it cannot fit).

Times are absolute ``time.perf_counter()`` seconds; :meth:`ImageResult.to_gen_result` hands them to the bench
runner like any engine's result, with the rest as the record's ``ImageTiming`` (``kinds.image.summary``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from gpuledger.engines.base import GenResult, ServerInfo
from gpuledger.kinds.image.summary import TIMING_KEY, ImageTiming, NodeTime, Thumbnail
from gpuledger.records import RequestRecord

WARMUP_SEED_OFFSET = 1_000_000_007
DEFAULT_PROMPT = "a photograph of an astronaut riding a horse on the moon, detailed, 35mm"
PROMPTS = (
    DEFAULT_PROMPT,
    "a watercolour painting of a lighthouse on a cliff at dawn",
    "a bowl of ramen on a wooden table, studio lighting",
    "an isometric illustration of a tiny city on a floating island",
)


@dataclass(slots=True)
class ImageRequest:
    """One request: ``batch_size`` images of ``width``×``height`` from ``prompt`` in ``steps`` steps, with
    ``seed`` (the i-th image of a batch uses ``seed + i`` where the engine takes one seed per image)."""

    index: int
    prompt: str
    seed: int
    steps: int | None = None
    height: int | None = None
    width: int | None = None
    batch_size: int = 1
    guidance: float | None = None
    negative_prompt: str | None = None
    stage: str = ""
    keep_thumbnail: bool = False


@dataclass(slots=True)
class ImageResult:
    """What the client measured for one request. ``step_end`` holds the end of every denoising step
    (``perf_counter`` seconds) where the engine sees them."""

    index: int
    t_send: float
    t_end: float
    engine: str
    images: int = 0
    width: int | None = None
    height: int | None = None
    steps: int | None = None
    step_end: list[float] = field(default_factory=list)
    text_encode_s: float | None = None
    denoise_s: float | None = None
    decode_s: float | None = None
    queue_wait_s: float | None = None
    execution_s: float | None = None
    peak_memory_bytes: int | None = None
    nodes: list[NodeTime] | None = None
    prompt_id: str | None = None
    outputs: list[str] | None = None
    output_bytes: int | None = None
    error_node: str | None = None
    thumbnails: list[Thumbnail] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    stage: str = ""

    def timing(self) -> ImageTiming:
        return ImageTiming(
            engine=self.engine,
            images=self.images,
            width=self.width,
            height=self.height,
            steps=self.steps,
            text_encode_s=self.text_encode_s,
            denoise_s=self.denoise_s,
            decode_s=self.decode_s,
            queue_wait_s=self.queue_wait_s,
            execution_s=self.execution_s,
            peak_memory_bytes=self.peak_memory_bytes,
            step_end_s=[max(t - self.t_send, 0.0) for t in self.step_end] or None,
            nodes=self.nodes,
            prompt_id=self.prompt_id,
            outputs=self.outputs,
            output_bytes=self.output_bytes,
            error_node=self.error_node,
            thumbnails=self.thumbnails or None,
            notes=self.notes or None,
        )

    def to_gen_result(self) -> GenResult:
        """The result as the bench runner handles every engine's: send and end times, the error, and this
        timing under ``server_timings["image"]`` (fields that were not measured left out); no token fields."""
        timing = self.timing().model_dump(mode="json", exclude_none=True)
        return GenResult(
            index=self.index,
            t_send=self.t_send,
            t_end=self.t_end,
            token_source="engine",
            error=self.error,
            stage=self.stage,
            server_timings={TIMING_KEY: timing},
        )

    def to_record(self, t0: float) -> RequestRecord:
        """The stored record, on the run's clock (``t0``: its start, ``perf_counter`` seconds)."""
        return self.to_gen_result().to_record(t0)


@runtime_checkable
class ImageEngine(Protocol):
    """An image-generation API. Lifecycle: ``open`` (probe, or build the pipeline; ``EngineError`` /
    ``ResourceError`` when it cannot be used) → ``generate_image`` many times (concurrently for a server)
    → ``after_run`` (what is worth recording about the engine) → ``close``. ``chunks_seen`` counts the
    denoising steps seen so far (progress display only)."""

    name: str
    chunks_seen: int

    async def open(self, concurrency: int | None) -> ServerInfo: ...

    async def generate_image(self, req: ImageRequest) -> ImageResult: ...

    async def after_run(self) -> dict[str, Any]: ...

    async def close(self) -> None: ...


def request_for(
    index: int,
    *,
    seed: int,
    steps: int | None,
    height: int | None,
    width: int | None,
    batch_size: int,
    guidance: float | None,
    prompt: str | None = None,
    negative_prompt: str | None = None,
    stage: str = "",
    keep_thumbnail: bool = False,
) -> ImageRequest:
    """The ``index``-th request of a run: its own seed (``seed + index × batch``; a warm-up request, of
    negative index, ``seed + WARMUP_SEED_OFFSET + |index| × batch``: never a measured request's, so a server
    that caches outputs by input, like ComfyUI, cannot serve a measured request from the warm-up) and,
    without a prompt given, the built-in prompts in turn."""
    return ImageRequest(
        index=index,
        prompt=prompt if prompt is not None else PROMPTS[index % len(PROMPTS)],
        seed=seed + (index * batch_size if index >= 0 else WARMUP_SEED_OFFSET - index * batch_size),
        steps=steps,
        height=height,
        width=width,
        batch_size=batch_size,
        guidance=guidance,
        negative_prompt=negative_prompt,
        stage=stage,
        keep_thumbnail=keep_thumbnail,
    )
