"""The spec of an image run (``kinds.image.spec.ImageSpec``) from ``gpuledger bench --task image``'s values,
and for library callers (``gpuledger run --task image``, the benchmarks, tests): ``image_spec``.

Engines: ``diffusers`` (in-process: ``--model dummy:NAME`` or a diffusers folder, ``--device``, ``--dtype``,
``--scheduler``), ``comfyui`` (``--base-url``, ``--workflow FILE.json``, ``--set NODE.INPUT=VALUE``) and
``openai-images`` (``--base-url``, ``--model``). All take ``--steps``, ``--height``/``--width``,
``--batch-size``, ``--guidance``, ``--num-images``, ``--seed``, ``--prompt``, ``--warmup``; the servers also
``--concurrency`` (requests in flight). A text-generation flag (``--dataset``, ``--input-len``, ``--rate``,
...) is refused with one line, like a flag another image engine takes.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuledger.engines import EngineKind, engine_kind
from gpuledger.errors import UsageError
from gpuledger.kinds.image.spec import ImageSpec
from gpuledger.records.spec import checked, settled

DEFAULT_NUM_IMAGES = 8
_TEXT_ONLY = (
    "endpoint",
    "dataset",
    "dataset_path",
    "input_len",
    "output_len",
    "rate",
    "sweep",
    "duration",
    "slo",
    "server_metrics_interval",
)


def image_document(
    engine: str,
    *,
    model: str | None = None,
    base_url: str | None = None,
    workflow: str | Path | None = None,
    overrides: Sequence[str] = (),
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
    """The document of an image run; ``UsageError`` with one line for a flag the engine does not take."""
    from gpuledger.engines.image.workflow import load_workflow, parse_override

    kind = engine_kind(engine)
    if kind.spec is not ImageSpec:
        raise UsageError(
            f"--task image runs an image engine (diffusers, comfyui or openai-images), not {engine}"
        )
    server = kind.name != "diffusers"
    if server and (dtype is not None or device is not None):
        raise UsageError(
            f"--device and --dtype are for --engine diffusers, not {kind.name} (the server chooses)"
        )
    if not server and base_url is not None:
        raise UsageError("--engine diffusers runs in-process: --base-url does not apply")
    if kind.name != "comfyui" and (workflow is not None or overrides):
        raise UsageError("--workflow and --set are for --engine comfyui")
    if kind.name == "comfyui" and scheduler is not None:
        raise UsageError(
            "--scheduler is for --engine diffusers: a ComfyUI workflow names its sampler and scheduler "
            "(set them with --set NODE.sampler_name=... / NODE.scheduler=...)"
        )
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
            node_overrides=[parse_override(o).model_dump() for o in overrides],
        )
    if (height is None) != (width is None):
        raise UsageError("give --height and --width together")
    return doc


def image_spec(engine: str = "diffusers", **values: Any) -> ImageSpec:
    """A complete, validated image spec (``image_document``'s arguments)."""
    spec = settled(checked(ImageSpec, image_document(engine, **values)))
    assert isinstance(spec, ImageSpec)
    return spec


def image_from(kind: EngineKind, v: Mapping[str, Any]) -> dict[str, Any]:
    """``gpuledger bench``'s values -> the image document (``bench.flags.flags_document`` for ImageSpec)."""
    for key in _TEXT_ONLY:
        if v.get(key) not in (None, (), [], "") and not (key == "sweep" and not v.get(key)):
            raise UsageError(f"--{key.replace('_', '-')} is for text generation, not --task image")
    if v.get("server_metrics"):
        raise UsageError("--server-metrics is for text generation servers, not --task image")
    if v.get("warmup", 0) < 0:
        raise UsageError(f"--warmup must be 0 or more, got {v['warmup']}")
    given = v.get("given") or set()
    num_images = v.get("num_images")
    batch = v.get("batch_size") or 1
    if num_images is None and v.get("num_requests") is not None:
        num_images = v["num_requests"] * batch
    seed = v.get("seed", 0)
    if kind.name == "openai-images" and "seed" not in given:
        seed = None  # OpenAI itself refuses unknown fields: the diffusion servers' seed only when asked for
    if kind.name == "comfyui" and "seed" not in given:
        # ComfyUI reuses the outputs of a prompt it ran before: a fixed default seed would make a second run
        # of the same workflow do no work. A fresh seed per run, kept in the spec (--seed repeats it).
        seed = secrets.randbelow(2**31)
    return image_document(
        kind.name,
        model=v.get("model"),
        base_url=v.get("base_url"),
        workflow=v.get("workflow"),
        overrides=tuple(v.get("set") or ()),
        prompt=v.get("prompt"),
        negative_prompt=v.get("negative_prompt"),
        steps=v.get("steps"),
        height=v.get("height"),
        width=v.get("width"),
        batch_size=batch,
        guidance=v.get("guidance"),
        scheduler=v.get("scheduler"),
        num_images=num_images,
        concurrency=v.get("concurrency") or 1,
        warmup=v.get("warmup", 1),
        dtype=v.get("dtype"),
        device=v.get("device"),
        seed=seed,
        request_timeout_s=v.get("request_timeout") or 600.0,
        api_key_env=v.get("api_key_env") or "OPENAI_API_KEY",
        label=v.get("label") or "",
        telemetry=v.get("telemetry", True),
        telemetry_interval_s=v.get("telemetry_interval") or 0.1,
    )
