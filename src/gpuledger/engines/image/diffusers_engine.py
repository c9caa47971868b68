"""``--engine diffusers``: image generation in this process with a diffusers pipeline.

One request = one pipeline call of ``batch_size`` images. Around each call the engine times, with the
device synchronised at every boundary (``torch.cuda.synchronize``; nothing to wait for on the CPU):

- text encoding: the pipeline's ``encode_prompt`` (wrapped on the instance);
- each denoising step: its end, from ``callback_on_step_end`` (diffusers calls it after every step);
  denoising = end of text encoding → end of the last step (latent preparation included);
- VAE decode: ``vae.decode`` (wrapped on the instance); the rest (image post-processing) is in the
  request's total only.

Peak device memory is the allocator's peak during the call (``torch.cuda.max_memory_allocated``, reset
before it); on the CPU there is no device memory and the figure is left out with the reason. Before the
pipeline is built, the memory it needs is estimated from its parameter count (``pipelines.estimate_memory``)
and a run that cannot fit is refused (``ResourceError``, exit 8).

The call runs in a worker thread so that the event loop (signals, the store writer) stays responsive; a
cancelled request asks the pipeline to stop at its next step (``pipe._interrupt``) and is not recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from gpuledger.engines.base import ServerInfo
from gpuledger.engines.image.base import ImageRequest, ImageResult
from gpuledger.engines.image.catalog import dummy_pipeline, is_dummy
from gpuledger.engines.image.imports import diffusers_version, import_diffusers, import_torch
from gpuledger.engines.image.pipelines import (
    BuiltPipeline,
    build_dummy,
    component_parameters,
    estimate_memory,
    folder_parameters,
    load_folder,
)
from gpuledger.engines.image.thumbs import thumbnail_of
from gpuledger.engines.torch.device import (
    TORCH_DTYPE_NAMES,
    CpuThreads,
    DeviceInfo,
    device_warnings,
    fmt_params,
    resolve_dtype,
    select_device,
)
from gpuledger.errors import EngineError, ResourceError, UsageError
from gpuledger.kinds.image.spec import ImageSpec

SCHEDULERS: dict[str, str] = {
    "ddim": "DDIMScheduler",
    "pndm": "PNDMScheduler",
    "euler": "EulerDiscreteScheduler",
    "euler_a": "EulerAncestralDiscreteScheduler",
    "dpmpp_2m": "DPMSolverMultistepScheduler",
    "lms": "LMSDiscreteScheduler",
    "heun": "HeunDiscreteScheduler",
    "unipc": "UniPCMultistepScheduler",
    "flow_euler": "FlowMatchEulerDiscreteScheduler",
}
CPU_MEMORY_NOTE = (
    "peak device memory: not measured on the CPU (no device memory; the run's RSS is the client's)"
)


class _Recorder:
    """The boundaries of the call in progress (written by the wrappers and the step callback)."""

    def __init__(self) -> None:
        self.encode: list[tuple[float, float]] = []
        self.decode: list[tuple[float, float]] = []
        self.steps: list[float] = []


class DiffusersEngine:
    """See the module docstring. ``spec`` is the run's ``ImageSpec`` (model, device, dtype, sizes)."""

    name = "diffusers"

    def __init__(self, spec: ImageSpec, on_phase: Callable[[str], None] | None = None) -> None:
        self.spec = spec
        self.model = spec.model or "dummy:tiny-sd"
        self.on_phase = on_phase or (lambda _msg: None)
        self.chunks_seen = 0
        self.built: BuiltPipeline | None = None
        self.device: DeviceInfo | None = None
        self.dtype = "fp32"
        self.threads: CpuThreads | None = None
        self.attention: str | None = None
        self.memory_estimate: int | None = None
        self.scheduler_name: str | None = None
        self._rec: _Recorder | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._call_params: set[str] = set()
        self._defaults: dict[str, Any] = {}

    # -- lifecycle -------------------------------------------------------------------------------
    async def open(self, concurrency: int | None) -> ServerInfo:
        return await asyncio.to_thread(self._open)

    def _open(self) -> ServerInfo:
        torch = import_torch()
        import_diffusers()
        self.device = device = select_device(self.spec.device or "auto")
        self.dtype = resolve_dtype(self.spec.dtype or "auto", device)
        torch_dtype = getattr(torch, TORCH_DTYPE_NAMES[self.dtype])
        self.on_phase(f"estimating the memory {self.model} needs")
        params = self._parameters_before_loading()
        height, width = self._size()
        if params is not None:
            est = estimate_memory(
                params,
                self.dtype,
                self.spec.images_per_request(),
                height,
                width,
                device.free_memory_bytes,
                device.memory_source,
            )
            self.memory_estimate = est.total_bytes
            if not est.fits:
                where = "RAM" if device.type == "cpu" else "GPU memory"
                raise ResourceError(
                    f"{self.model} ({fmt_params(params)} params, {self.dtype}) at {width}×{height}, batch "
                    f"{self.spec.images_per_request()} does not fit in the {where} of {device.name}: "
                    f"{est.text()}",
                    hint="choose a smaller --model, --height/--width or --batch-size, a 16-bit --dtype on a "
                    "GPU, or a device with more memory",
                )
        self.threads = CpuThreads(device)
        self.on_phase(f"building {self.model} on {device.torch_device} ({self.dtype})")
        if is_dummy(self.model):
            self.built = build_dummy(dummy_pipeline(self.model), torch_dtype, device.torch_device)
        else:
            self.built = load_folder(Path(self.model).expanduser(), torch_dtype, device.torch_device)
        self._install_hooks()
        self._set_scheduler()
        self.scheduler_name = type(self.built.pipe.scheduler).__name__
        return ServerInfo(
            kind="diffusers",
            version=diffusers_version(),
            version_source="importlib.metadata",
            models=[self.model],
            details=self.details(),
            warnings=device_warnings(device, self.spec.device or "auto", self.threads),
        )

    def _parameters_before_loading(self) -> int | None:
        if is_dummy(self.model):
            return sum(component_parameters(dummy_pipeline(self.model)).values())
        counts = folder_parameters(Path(self.model).expanduser())
        return sum(counts.values()) if counts else None

    def _size(self) -> tuple[int, int]:
        if is_dummy(self.model):
            d = dummy_pipeline(self.model).defaults
            return self.spec.height or d.height, self.spec.width or d.width
        return self.spec.height or 512, self.spec.width or 512

    def details(self) -> dict[str, Any]:
        built, device = self.built, self.device
        out: dict[str, Any] = {"dtype": self.dtype}
        if device is not None:
            out["device"] = device.to_dict()
        if built is not None:
            out.update(
                pipeline=built.pipeline_class,
                parameters=built.parameters,
                components=built.components,
                scheduler=self.scheduler_name,
                attention=self.attention,
            )
        if self.memory_estimate is not None:
            out["memory_estimate_bytes"] = self.memory_estimate
        if device is not None and device.type != "cuda":
            out["peak_device_memory"] = CPU_MEMORY_NOTE
        return out

    def resolved(self, spec: ImageSpec) -> ImageSpec:
        """The run's spec with what the engine chose: device, dtype, pipeline, sizes, scheduler."""
        built = self._built()
        height, width = self._size()
        d = self._defaults
        return spec.model_copy(
            update={
                "device": self.device.torch_device if self.device else spec.device,
                "dtype": self.dtype,
                "pipeline": built.pipeline_class,
                "parameters": built.parameters,
                "components": built.components,
                "memory_estimate_bytes": self.memory_estimate,
                "memory_free_bytes": self.device.free_memory_bytes if self.device else None,
                "attention": self.attention,
                "scheduler": self.scheduler_name,
                "height": height,
                "width": width,
                "steps": spec.steps or d.get("steps"),
                "guidance": spec.guidance if spec.guidance is not None else d.get("guidance"),
            }
        )

    def client_note(self) -> str:
        return "the diffusers pipeline runs in this process: its CPU time is the model's computation"

    async def after_run(self) -> dict[str, Any]:
        return {"engine": self.details()}

    async def close(self) -> None:
        self._stop.set()
        if self.threads is not None:
            self.threads.restore()
        if self.built is not None:  # the weights go; what the run resolved stays for ``resolved``
            self.built = dataclasses.replace(self.built, pipe=None)

    # -- hooks -----------------------------------------------------------------------------------
    def _built(self) -> BuiltPipeline:
        if self.built is None:
            raise EngineError("the diffusers engine was used before open()")
        return self.built

    def _sync(self) -> None:
        if self.device is not None and self.device.type == "cuda":
            import_torch().cuda.synchronize(self.device.torch_device)

    def _install_hooks(self) -> None:
        pipe = self._built().pipe
        encode, decode = pipe.encode_prompt, pipe.vae.decode

        def timed(
            fn: Callable[..., Any], into: Callable[[_Recorder], list[tuple[float, float]]]
        ) -> Callable[..., Any]:
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                self._sync()
                t = time.perf_counter()
                out = fn(*args, **kwargs)
                self._sync()
                if self._rec is not None:
                    into(self._rec).append((t, time.perf_counter()))
                return out

            return wrapper

        pipe.encode_prompt = timed(encode, lambda r: r.encode)
        pipe.vae.decode = timed(decode, lambda r: r.decode)
        self._call_params = set(inspect.signature(pipe.__call__).parameters)
        denoiser = getattr(pipe, "transformer", None) or getattr(pipe, "unet", None)
        procs = getattr(denoiser, "attn_processors", None)
        if isinstance(procs, dict) and procs:
            self.attention = ", ".join(sorted({type(p).__name__ for p in procs.values()}))
        if is_dummy(self.model):
            d = dummy_pipeline(self.model).defaults
            self._defaults = {"steps": d.steps, "guidance": d.guidance}

    def _set_scheduler(self) -> None:
        name = self.spec.scheduler
        if not name:
            return
        pipe = self._built().pipe
        cls_name = SCHEDULERS.get(name.lower(), name)
        diffusers = import_diffusers()
        cls = getattr(diffusers, cls_name, None)
        if cls is None or not cls_name.endswith("Scheduler"):
            raise UsageError(
                f"--scheduler {name}: not a diffusers scheduler (choose {', '.join(SCHEDULERS)} "
                "or a diffusers class name)"
            )
        current = type(pipe.scheduler)
        allowed = {current.__name__} | {c.__name__ for c in getattr(pipe.scheduler, "compatibles", [])}
        if cls_name not in allowed:
            raise UsageError(f"--scheduler {name}: {type(pipe).__name__} takes " + ", ".join(sorted(allowed)))
        pipe.scheduler = cls.from_config(pipe.scheduler.config)

    # -- one request -----------------------------------------------------------------------------
    async def generate_image(self, req: ImageRequest) -> ImageResult:
        task = asyncio.ensure_future(asyncio.to_thread(self._generate, req))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            self._stop.set()  # the next step callback interrupts the pipeline
            with contextlib.suppress(BaseException):
                await task
            raise

    @contextlib.contextmanager
    def _recording(self) -> Iterator[_Recorder]:
        with self._lock:
            rec = _Recorder()
            self._rec = rec
            try:
                yield rec
            finally:
                self._rec = None

    def _call_kwargs(self, req: ImageRequest) -> dict[str, Any]:
        torch = import_torch()
        height, width = (req.height, req.width) if req.height and req.width else self._size()
        gen_device = "cpu" if self.device is None or self.device.type == "cpu" else self.device.torch_device
        kwargs: dict[str, Any] = {
            "prompt": req.prompt,
            "num_inference_steps": req.steps or self._defaults.get("steps", 30),
            "height": height,
            "width": width,
            "num_images_per_prompt": req.batch_size,
            "generator": [
                torch.Generator(gen_device).manual_seed(req.seed + i) for i in range(req.batch_size)
            ],
            "output_type": "pil",
        }
        guidance = req.guidance if req.guidance is not None else self._defaults.get("guidance")
        if guidance is not None:
            kwargs["guidance_scale"] = guidance
        if req.negative_prompt and "negative_prompt" in self._call_params:
            kwargs["negative_prompt"] = req.negative_prompt
        built = self._built()
        if built.max_sequence_length and "max_sequence_length" in self._call_params:
            kwargs["max_sequence_length"] = built.max_sequence_length
        return kwargs

    def _generate(self, req: ImageRequest) -> ImageResult:
        pipe = self._built().pipe
        kwargs = self._call_kwargs(req)
        torch = import_torch()
        cuda = self.device is not None and self.device.type == "cuda"

        def on_step(p: Any, step: int, timestep: Any, tensors: dict[str, Any]) -> dict[str, Any]:
            self._sync()
            if self._rec is not None:
                self._rec.steps.append(time.perf_counter())
            self.chunks_seen += 1
            if self._stop.is_set():
                p._interrupt = True
            return tensors

        with self._recording() as rec:
            if cuda:
                torch.cuda.reset_peak_memory_stats(self.device.torch_device if self.device else None)
            self._sync()
            t_send = time.perf_counter()
            error: str | None = None
            out: Any = None
            try:
                with torch.inference_mode():
                    out = pipe(**kwargs, callback_on_step_end=on_step)
            except (RuntimeError, ValueError, TypeError) as exc:
                error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:500]
            self._sync()
            t_end = time.perf_counter()
        result = ImageResult(
            index=req.index,
            t_send=t_send,
            t_end=t_end,
            engine=self.name,
            stage=req.stage,
            width=kwargs["width"],
            height=kwargs["height"],
            step_end=list(rec.steps),
            steps=len(rec.steps),
            error=error,
        )
        asked = int(kwargs["num_inference_steps"])
        if error is None and rec.steps and len(rec.steps) != asked:
            # PNDM's schedule, for one, has one step more than asked: the steps counted are those that ran.
            result.notes.append(
                f"{type(pipe.scheduler).__name__} ran {len(rec.steps)} denoising steps for "
                f"num_inference_steps={asked}: steps are counted as the pipeline ran them"
            )
        if rec.encode:
            result.text_encode_s = sum(b - a for a, b in rec.encode)
        if rec.steps:
            start = rec.encode[-1][1] if rec.encode else t_send
            result.denoise_s = rec.steps[-1] - start
        if rec.decode:
            result.decode_s = sum(b - a for a, b in rec.decode)
        if cuda and self.device is not None:
            result.peak_memory_bytes = int(torch.cuda.max_memory_allocated(self.device.torch_device))
        if error is None:
            images = list(getattr(out, "images", None) or [])
            result.images = len(images)
            if req.keep_thumbnail and images:
                thumb = thumbnail_of(images[0], req.index)
                if thumb is not None:
                    result.thumbnails.append(thumb)
        if self._stop.is_set() and error is None:
            result.error = "interrupted: the run was stopped during this request"
        return result
