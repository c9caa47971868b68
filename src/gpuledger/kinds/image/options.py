"""``gpuledger bench --task image``'s options as one typed model (``ImageOptions``), and the spec they make
(``kinds.image.spec.ImageSpec``); ``image_spec`` for library callers (``gpuledger run --task image``, the
benchmarks, tests).

Engines: ``diffusers`` (in-process: ``--model dummy:NAME`` or a diffusers folder, ``--device``, ``--dtype``,
``--scheduler``), ``comfyui`` (``--base-url``, ``--workflow FILE.json``, ``--set NODE.INPUT=VALUE``) and
``openai-images`` (``--base-url``, ``--model``). All take ``--steps``, ``--height``/``--width``,
``--batch-size``, ``--guidance``, ``--num-images``, ``--seed``, ``--prompt``, ``--warmup``; the servers also
``--concurrency`` (requests in flight). A text-generation option (``--dataset``, ``--input-len``, ``--rate``,
...) is refused with one line, like an option another image engine takes; every number is bounded as the
spec's field is, the sentence naming the option.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Self

from pydantic import Field, field_validator, model_validator

from gpuledger.bench.bounds import BOUNDS
from gpuledger.bench.options import (
    MAX_NAME,
    MAX_TEXT,
    TaskOptions,
    bound_problem,
    first,
    positive_seconds,
    warmup_sentence,
)
from gpuledger.engines import EngineKind, engine_kind
from gpuledger.errors import UsageError
from gpuledger.kinds.image.spec import ImageSpec, NodeOverride
from gpuledger.records import BenchSpec
from gpuledger.records.spec import checked, settled
from gpuledger.urls import parse_server_url

DEFAULT_NUM_IMAGES = 8
# What each spec field may be (ImageSpec's own bounds), by option.
RANGES: dict[str, tuple[str, float, float]] = {
    "steps": ("--steps", 1, 10_000),
    "height": ("--height", 8, 16_384),
    "width": ("--width", 8, 16_384),
    "batch_size": ("--batch-size", 1, 1024),
    "num_images": ("--num-images", 1, 1_000_000),
    "num_requests": ("--num-requests", 1, 1_000_000),
    "concurrency": ("--concurrency", 1, 1024),
    "warmup": ("--warmup", 0, 1000),
    "seed": ("--seed", 0, 2**63 - 1),
}
_TEXT_ONLY = ("endpoint", "dataset", "dataset_path", "input_len", "output_len", "range_ratio", "rate",
              "sweep", "duration", "slo", "server_metrics_interval")

FLAG_FIELDS: dict[type[BenchSpec], dict[str, tuple[str, ...]]] = {
    ImageSpec: {
        "model": ("model",),
        "workflow": ("workflow", "workflow_sha256"),
        "set": ("node_overrides",),
        "prompt": ("prompt",),
        "negative_prompt": ("negative_prompt",),
        "steps": ("steps",),
        "height": ("height",),
        "width": ("width",),
        "batch_size": ("batch_size",),
        "guidance": ("guidance",),
        "scheduler": ("scheduler",),
        "num_images": ("num_images",),
        "num_requests": ("num_images",),
        "concurrency": ("concurrency",),
        "warmup": ("warmup",),
        "seed": ("seed",),
        "request_timeout": ("request_timeout_s",),
    },
}
REPEAT_NEEDS: dict[type[BenchSpec], tuple[str, ...]] = {ImageSpec: ("num_images",)}


class ImageOptions(TaskOptions):
    """The options of ``gpuledger bench --task image`` (the module docstring says which engine takes
    which)."""

    TASK: ClassVar[str] = "image"
    REFUSED: ClassVar[dict[str, str]] = {
        **{k: f"--{k.replace('_', '-')} is for text generation, not --task image" for k in _TEXT_ONLY},
        "server_metrics": "--server-metrics is for text generation servers, not --task image",
    }

    engine: str = Field(default="diffusers", max_length=128)
    model: str | None = Field(default=None, max_length=MAX_NAME)
    base_url: str | None = Field(default=None, max_length=MAX_NAME)
    workflow: Path | None = None
    set: tuple[NodeOverride, ...] = ()
    prompt: str | None = Field(default=None, max_length=MAX_TEXT)
    negative_prompt: str | None = Field(default=None, max_length=MAX_TEXT)
    steps: int | None = None
    height: int | None = None
    width: int | None = None
    batch_size: int | None = None
    guidance: float | None = None
    scheduler: str | None = Field(default=None, max_length=128)
    num_images: int | None = None
    num_requests: int | None = None
    concurrency: int | None = None
    warmup: int = 1
    device: str | None = Field(default=None, max_length=32)
    dtype: str | None = Field(default=None, max_length=16)
    seed: int | None = None
    request_timeout: float = 300.0
    api_key_env: str = Field(default="OPENAI_API_KEY", max_length=256)

    @field_validator("set", mode="before")
    @classmethod
    def _overrides(cls, value: Any) -> Any:
        from gpuledger.engines.image.workflow import parse_override

        if value is None:
            return ()
        try:
            return tuple(parse_override(v) if isinstance(v, str) else v for v in value)
        except UsageError as exc:
            raise ValueError(exc.message) from None

    @model_validator(mode="after")
    def _options(self) -> Self:
        problem = first((
            warmup_sentence(self.warmup),
            engine_problem(self.engine, dtype=self.dtype, device=self.device, base_url=self.base_url,
                           workflow=self.workflow, overrides=self.set, scheduler=self.scheduler),
            *(_range(name, getattr(self, name)) for name in RANGES),
            _guidance(self.guidance),
            bound_problem(BOUNDS["--request-timeout"], self.request_timeout,
                          positive_seconds("--request-timeout")),
            self.telemetry_problem(),
            "give --height and --width together" if (self.height is None) != (self.width is None) else None,
        ))
        if problem:
            raise ValueError(problem)
        return self

    def document(self, kind: EngineKind) -> dict[str, Any]:
        batch = self.batch_size or 1
        num_images = self.num_images
        if num_images is None and self.num_requests is not None:
            num_images = self.num_requests * batch
        seed = self.seed
        if seed is None and kind.name == "comfyui":
            # ComfyUI reuses the outputs of a prompt it ran before: a fixed default seed would make a second
            # run of the same workflow do no work. A fresh seed per run, kept in the spec (--seed repeats it).
            seed = secrets.randbelow(2**31)
        elif seed is None and kind.name != "openai-images":
            seed = 0  # OpenAI itself refuses unknown fields: the diffusion servers' seed only when asked for
        return image_document(
            kind.name, model=self.model, base_url=self.base_url, workflow=self.workflow, overrides=self.set,
            prompt=self.prompt, negative_prompt=self.negative_prompt, steps=self.steps, height=self.height,
            width=self.width, batch_size=batch, guidance=self.guidance, scheduler=self.scheduler,
            num_images=num_images, concurrency=self.concurrency or 1, warmup=self.warmup, dtype=self.dtype,
            device=self.device, seed=seed, request_timeout_s=self.request_timeout,
            api_key_env=self.api_key_env, label=self.label, telemetry=self.telemetry,
            telemetry_interval_s=self.telemetry_interval,
        )


OPTIONS = ImageOptions


def _guidance(value: float | None) -> str | None:
    if value is None:
        return None
    if not (math.isfinite(value) and value >= 0):
        return f"--guidance must be a number ≥ 0, got {value}"
    return f"--guidance must be at most 100, got {value}" if value > 100 else None


def _range(name: str, value: float | None) -> str | None:
    flag, low, high = RANGES[name]
    if value is None or low <= value <= high:
        return None
    return f"{flag} must be between {low:,} and {high:,}, got {value}"


def engine_problem(
    engine: str,
    *,
    dtype: str | None,
    device: str | None,
    base_url: str | None,
    workflow: str | Path | None,
    overrides: Sequence[object],
    scheduler: str | None,
) -> str | None:
    """Why an image engine does not take these options (None: it does)."""
    try:
        kind = engine_kind(engine)
    except UsageError as exc:
        return exc.message
    if kind.spec is not ImageSpec:
        return f"--task image runs an image engine (diffusers, comfyui or openai-images), not {engine}"
    server = kind.name != "diffusers"
    if server and (dtype is not None or device is not None):
        return f"--device and --dtype are for --engine diffusers, not {kind.name} (the server chooses)"
    if not server and base_url is not None:
        return "--engine diffusers runs in-process: --base-url does not apply"
    if kind.name != "comfyui" and (workflow is not None or overrides):
        return "--workflow and --set are for --engine comfyui"
    if kind.name == "comfyui" and scheduler is not None:
        return (
            "--scheduler is for --engine diffusers: a ComfyUI workflow names its sampler and scheduler "
            "(set them with --set NODE.sampler_name=... / NODE.scheduler=...)"
        )
    return None


def image_document(
    engine: str,
    *,
    model: str | None = None,
    base_url: str | None = None,
    workflow: str | Path | None = None,
    overrides: Sequence[str | NodeOverride] = (),
    prompt: str | None = None,
    negative_prompt: str | None = None,
    steps: int | None = None,
    height: int | None = None,
    width: int | None = None,
    batch_size: int = 1,
    guidance: float | None = None,
    scheduler: str | None = None,
    num_images: int | None = None,
    concurrency: int = 1,
    warmup: int = 1,
    dtype: str | None = None,
    device: str | None = None,
    seed: int | None = 0,
    request_timeout_s: float = 600.0,
    api_key_env: str | None = None,
    label: str = "",
    telemetry: bool = True,
    telemetry_interval_s: float = 0.1,
    keep_images: bool = True,
) -> dict[str, Any]:
    """The document of an image run; ``UsageError`` with one line for an option the engine does not take."""
    from gpuledger.engines.image.workflow import load_workflow, parse_override

    problem = engine_problem(engine, dtype=dtype, device=device, base_url=base_url, workflow=workflow,
                             overrides=overrides, scheduler=scheduler)
    if problem:
        raise UsageError(problem)
    kind = engine_kind(engine)
    server = kind.name != "diffusers"
    if batch_size < 1:
        raise UsageError(f"--batch-size must be at least 1, got {batch_size}")
    if guidance is not None and not (math.isfinite(guidance) and guidance >= 0):
        raise UsageError(f"--guidance must be a number ≥ 0, got {guidance}")
    doc: dict[str, Any] = {
        "engine": kind.name,
        "label": label,
        "model": model or ("dummy:tiny-sd" if not server else None),
        "base_url": (base_url or kind.default_base_url) if server else None,
        "prompt": prompt,
        "negative_prompt": negative_prompt,
        "steps": steps,
        "height": height,
        "width": width,
        "batch_size": batch_size,
        "guidance": guidance,
        "scheduler": scheduler,
        "num_images": num_images or DEFAULT_NUM_IMAGES,
        "concurrency": concurrency,
        "warmup": warmup,
        "seed": seed,
        "request_timeout_s": request_timeout_s,
        "api_key_env": api_key_env if server else None,
        "keep_images": keep_images,
        "telemetry": {"enabled": telemetry, "interval_s": telemetry_interval_s},
    }
    if not server:
        doc.update(dtype=dtype or "auto", device=device or "auto")
    if workflow is not None:
        wf = load_workflow(Path(workflow).expanduser())  # checked now: a bad file is refused before the run
        doc.update(
            workflow=str(workflow),
            workflow_sha256=wf.sha256,
            node_overrides=[(parse_override(o) if isinstance(o, str) else o).model_dump() for o in overrides],
        )
    if (height is None) != (width is None):
        raise UsageError("give --height and --width together")
    return doc


def image_spec(engine: str = "diffusers", **values: Any) -> ImageSpec:
    """A complete, validated image spec (``image_document``'s arguments)."""
    spec = settled(checked(ImageSpec, image_document(engine, **values)))
    assert isinstance(spec, ImageSpec)
    return spec


def require(spec: BenchSpec) -> str | None:
    """What an image spec still lacks once ``--like`` filled it in, or a server URL that is not one."""
    if not isinstance(spec, ImageSpec):
        return None
    if spec.base_url is not None:
        try:
            parse_server_url(spec.base_url)
        except ValueError as exc:
            return f"--base-url {exc}"
    if spec.engine == "comfyui" and not spec.workflow:
        return "--engine comfyui needs --workflow FILE.json (a workflow in ComfyUI's API format)"
    return None


__all__ = [
    "DEFAULT_NUM_IMAGES",
    "FLAG_FIELDS",
    "OPTIONS",
    "REPEAT_NEEDS",
    "ImageOptions",
    "image_document",
    "image_spec",
    "require",
]
