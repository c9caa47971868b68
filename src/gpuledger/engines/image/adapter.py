"""The image engines behind the bench runner's engine protocol (``engines.base.Engine``), so that an image run
goes through the one run lifecycle of ``bench/runner.py`` (window, telemetry, store writer, interruption,
failure) like every other engine; and their factories, which the registry (``engines/registry.py``) calls.

A runner request (``GenRequest``) becomes the ``index``-th image request of the spec: its prompt
(``--prompt``, else the run's prompt of that index), its own seed (``seed + index × batch``), the spec's
steps, size and guidance, and a batch of ``batch_size`` images (the last request of ``--num-images`` may
be smaller). The first ``MAX_THUMBNAILS`` measured requests keep a thumbnail for the report (not with
``keep_images=False``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuledger.engines.base import Engine, GenRequest, GenResult, ServerInfo
from gpuledger.engines.image.base import ImageEngine, request_for
from gpuledger.errors import UsageError
from gpuledger.kinds.image.spec import ImageSpec
from gpuledger.kinds.image.summary import MAX_THUMBNAILS
from gpuledger.records import BenchSpec
from gpuledger.tokenizer import Tokenizer


class ImageEngineAdapter:
    """An image engine as a runner engine (see the module docstring)."""

    def __init__(self, inner: ImageEngine, spec: ImageSpec) -> None:
        self.inner = inner
        self.spec = spec
        self.name = inner.name

    @property
    def chunks_seen(self) -> int:
        """Denoising steps seen so far (the progress display's live rate)."""
        return self.inner.chunks_seen

    @chunks_seen.setter
    def chunks_seen(self, value: int) -> None:
        self.inner.chunks_seen = value

    @property
    def model(self) -> str | None:
        value = getattr(self.inner, "model", None)
        return str(value) if value else self.spec.model

    @property
    def display_url(self) -> str | None:
        value = getattr(self.inner, "display_url", None)
        return str(value) if value else None

    @property
    def tokenizer(self) -> Tokenizer | None:
        return None

    async def open(self, concurrency: int | None) -> ServerInfo:
        return await self.inner.open(concurrency)

    def batch_of(self, index: int) -> int:
        """Images of the ``index``-th request: ``batch_size``, the last one what ``--num-images`` leaves."""
        per = self.spec.images_per_request()
        if index < 0 or self.spec.num_images is None:
            return per
        return max(1, min(per, self.spec.num_images - index * per))

    async def generate(self, req: GenRequest) -> GenResult:
        s = self.spec
        image_req = request_for(
            req.index,
            seed=s.workload_seed(),
            steps=s.steps,
            height=s.height,
            width=s.width,
            batch_size=self.batch_of(req.index),
            guidance=s.guidance,
            prompt=s.prompt or req.as_prompt() or None,
            negative_prompt=s.negative_prompt,
            stage=req.stage,
            keep_thumbnail=0 <= req.index < MAX_THUMBNAILS and s.keep_images is not False,
        )
        result = await self.inner.generate_image(image_req)
        return result.to_gen_result()

    async def after_run(self) -> dict[str, Any]:
        return await self.inner.after_run()

    async def close(self) -> None:
        await self.inner.close()


class InProcessImageAdapter(ImageEngineAdapter):
    """The in-process diffusers engine: the runner also asks it what it resolved and what its CPU use means.
    Its requests run one at a time (a batch is one pipeline call of ``batch_size`` images)."""

    def resolved(self, spec: BenchSpec) -> BenchSpec:
        resolve = getattr(self.inner, "resolved", None)
        return resolve(spec) if callable(resolve) and isinstance(spec, ImageSpec) else spec

    def client_note(self) -> str:
        note = getattr(self.inner, "client_note", None)
        return str(note()) if callable(note) else "the image pipeline runs in this process"

    async def generate_batch(self, reqs: list[GenRequest]) -> list[GenResult]:
        return [await self.generate(r) for r in reqs]


Options = Any  # engines.registry.EngineOptions (api_key, on_phase); the registry imports this module
Factory = Callable[[BenchSpec, Options], Engine]


def _image_spec(spec: BenchSpec) -> ImageSpec:
    if not isinstance(spec, ImageSpec):
        raise UsageError(f"an image engine needs an image spec, not {spec.kind or 'this one'}")
    return spec


def _api_key(spec: ImageSpec, options: Options) -> str | None:
    key = getattr(options, "api_key", None)
    if key:
        return str(key)
    return (os.environ.get(spec.api_key_env) or None) if spec.api_key_env else None


def diffusers_factory() -> Factory:
    from gpuledger.engines.image.diffusers_engine import DiffusersEngine

    def make(spec: BenchSpec, options: Options) -> Engine:
        s = _image_spec(spec)
        if (s.concurrency or 1) > 1:
            raise UsageError(
                "--engine diffusers runs one pipeline call at a time: give --batch-size for "
                "several images per call, not --concurrency"
            )
        return InProcessImageAdapter(DiffusersEngine(s, on_phase=getattr(options, "on_phase", None)), s)

    return make


def comfyui_factory() -> Factory:
    from gpuledger.engines.image.comfyui import ComfyUIEngine
    from gpuledger.engines.image.workflow import load_workflow

    def make(spec: BenchSpec, options: Options) -> Engine:
        s = _image_spec(spec)
        if not s.workflow:
            raise UsageError(
                "--engine comfyui needs --workflow FILE.json (a workflow in ComfyUI's API format)"
            )
        workflow = load_workflow(Path(s.workflow).expanduser())
        if s.workflow_sha256 and workflow.sha256 != s.workflow_sha256:
            raise UsageError(
                f"--workflow {s.workflow} is not the workflow the run asked for (sha256 "
                f"{workflow.sha256[:12]}… here, {s.workflow_sha256[:12]}… in the spec): give the same file, "
                "or --workflow to use this one"
            )
        engine = ComfyUIEngine(
            s, workflow, request_timeout_s=s.request_timeout_s or 600.0, api_key=_api_key(s, options)
        )
        return ImageEngineAdapter(engine, s)

    return make


def openai_images_factory() -> Factory:
    from gpuledger.engines.image.openai_images import OpenAIImagesEngine

    def make(spec: BenchSpec, options: Options) -> Engine:
        s = _image_spec(spec)
        engine = OpenAIImagesEngine(
            s, api_key=_api_key(s, options), request_timeout_s=s.request_timeout_s or 600.0
        )
        return ImageEngineAdapter(engine, s)

    return make
