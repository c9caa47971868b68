"""The engines, registered by name: what each one is called on the command line, the spec kind its runs
store (``records.spec``), its endpoints and default server URL, and how to make one.

The CLI's ``--engine`` choices and help, the runner and ``bench --like`` read this registry; nothing else
lists engines. An engine's module is imported only when the engine is made: the HTTP engines load aiohttp
and orjson (~0.25 s), the in-process engine torch and transformers (seconds), which the other commands
need not pay.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from gpuledger.engines.base import Engine, GenRequest, GenResult
from gpuledger.errors import UsageError
from gpuledger.kinds.image.spec import ImageSpec
from gpuledger.kinds.text.spec import ServerSpec, TorchSpec
from gpuledger.kinds.train.spec import TrainSpec
from gpuledger.records import BenchSpec


@dataclass(frozen=True, slots=True)
class EngineOptions:
    """What making an engine needs beyond its spec: the API key (read from the variable the spec names,
    never stored) and where an engine reports its phases (loading a model takes a while)."""

    api_key: str | None = None
    on_phase: Callable[[str], None] | None = None


Factory = Callable[[BenchSpec, EngineOptions], Engine]


@dataclass(frozen=True, slots=True)
class EngineKind:
    """One engine. ``endpoints`` maps each endpoint to the request shape it takes (``prompt`` or
    ``chat``), the default first; ``factory`` imports the engine's module and makes the engine."""

    name: str
    about: str
    spec: type[BenchSpec]
    factory: Callable[[], Factory]
    endpoints: dict[str, str] = field(default_factory=dict)
    default_base_url: str | None = None

    @property
    def default_endpoint(self) -> str | None:
        return next(iter(self.endpoints), None)

    def endpoint_for(self, shape: str) -> str | None:
        """This engine's endpoint for requests of ``shape`` (``chat``, ``prompt``), if it has one."""
        return next((e for e, s in self.endpoints.items() if s == shape), None)

    def is_chat(self, endpoint: str | None) -> bool:
        return self.endpoints.get(endpoint or self.default_endpoint or "") == "chat"


ENGINE_KINDS: dict[str, EngineKind] = {}


def register_engine(kind: EngineKind) -> None:
    ENGINE_KINDS[kind.name] = kind


def engine_names(of: type[BenchSpec] | None = None) -> tuple[str, ...]:
    """The registered names (of the engines whose runs store specs of kind ``of``)."""
    return tuple(n for n, k in ENGINE_KINDS.items() if of is None or k.spec is of)


def either(names: tuple[str, ...]) -> str:
    """``openai, ollama or torch``."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def engine_kind(name: str | None) -> EngineKind:
    """The engine called ``name``; ``UsageError`` naming the registered ones otherwise."""
    kind = ENGINE_KINDS.get(name or "")
    if kind is None:
        raise UsageError(f"--engine must be {either(engine_names())}, got {name!r}")
    return kind


def make_engine(spec: BenchSpec, options: EngineOptions | None = None) -> Engine:
    """The engine ``spec`` names, made from the spec (its module imported now)."""
    kind = engine_kind(spec.engine)
    if not isinstance(spec, kind.spec):
        raise UsageError(f"engine {kind.name} runs {kind.spec.KIND} specs, not {spec.kind or 'this one'}")
    return kind.factory()(spec, options or EngineOptions())


@runtime_checkable
class BatchEngine(Engine, Protocol):
    """An engine that generates a batch of requests together, every sequence of the batch in flight at
    once (the in-process engine); each result keeps its own per-token times."""

    async def generate_batch(self, reqs: list[GenRequest]) -> list[GenResult]: ...


@runtime_checkable
class InProcessEngine(BatchEngine, Protocol):
    """An engine that computes in this process. ``resolved`` is the run's spec with what the engine
    chose when it opened (device, dtype, the planned model); ``client_note`` says what the process's
    own CPU use means (the writer stores it with the client's figures)."""

    def resolved(self, spec: BenchSpec) -> BenchSpec: ...

    def client_note(self) -> str: ...


# -- the engines ------------------------------------------------------------------------------------


def _server(spec: BenchSpec) -> ServerSpec:
    if not isinstance(spec, ServerSpec):
        raise UsageError(f"a server engine needs a server spec, not {spec.kind or 'this one'}")
    return spec


def _openai() -> Factory:
    from gpuledger.engines.openai import OpenAIEngine

    def make(spec: BenchSpec, options: EngineOptions) -> Engine:
        s = _server(spec)
        return OpenAIEngine(str(s.base_url), s.model, endpoint=s.endpoint, api_key=options.api_key,
                            request_timeout_s=s.request_timeout_s or 300.0)

    return make


def _ollama() -> Factory:
    from gpuledger.engines.ollama import OllamaEngine

    def make(spec: BenchSpec, options: EngineOptions) -> Engine:
        s = _server(spec)
        return OllamaEngine(str(s.base_url), s.model, endpoint=s.endpoint, api_key=options.api_key,
                            request_timeout_s=s.request_timeout_s or 300.0)

    return make


def _torch() -> Factory:
    from gpuledger.engines.torch.engine import TorchEngine

    def make(spec: BenchSpec, options: EngineOptions) -> Engine:
        if not isinstance(spec, TorchSpec):
            raise UsageError(f"the torch engine needs a torch spec, not {spec.kind or 'this one'}")
        return TorchEngine(spec, on_phase=options.on_phase)

    return make


register_engine(EngineKind(
    "openai", "OpenAI-compatible servers: vLLM, SGLang, llama.cpp, TGI, …", ServerSpec, _openai,
    {"completions": "prompt", "chat": "chat"}, "http://127.0.0.1:8000",
))
register_engine(EngineKind(
    "ollama", "Ollama's native API", ServerSpec, _ollama, {"generate": "prompt", "chat": "chat"},
    "http://127.0.0.1:11434",
))
register_engine(EngineKind("torch", "in-process PyTorch", TorchSpec, _torch))


def _image(name: str) -> Callable[[], Factory]:
    """The image engines' factories (``engines/image/adapter.py``: each imports its engine when made)."""

    def factory() -> Factory:
        from gpuledger.engines.image import adapter

        made: Factory = {
            "diffusers": adapter.diffusers_factory,
            "comfyui": adapter.comfyui_factory,
            "openai-images": adapter.openai_images_factory,
        }[name]()
        return made

    return factory


register_engine(EngineKind("diffusers", "in-process image generation (diffusers pipelines)", ImageSpec,
                           _image("diffusers")))
register_engine(EngineKind("comfyui", "a ComfyUI server running your workflow (API format)", ImageSpec,
                           _image("comfyui"), default_base_url="http://127.0.0.1:8188"))
register_engine(EngineKind("openai-images", "OpenAI-compatible /v1/images/generations (vLLM-Omni, SGLang, "
                           "LocalAI, …)", ImageSpec, _image("openai-images"), default_base_url="http://127.0.0.1:8000"))


def _train() -> Factory:
    """The training engine (``engines/torch/trainer.py``; ``bench --task train --engine torch``)."""
    from gpuledger.engines.torch.trainer import TrainEngine

    def make(spec: BenchSpec, options: EngineOptions) -> Engine:
        if not isinstance(spec, TrainSpec):
            raise UsageError(f"the training engine needs a training spec, not {spec.kind or 'this one'}")
        return TrainEngine(spec, on_phase=options.on_phase)

    return make


register_engine(EngineKind("torch-train", "in-process PyTorch training (--task train --engine torch)",
                           TrainSpec, _train))
