"""The engines, registered by name: what each one is called on the command line, the spec kind its runs
store (``records.spec``), its endpoints and default server URL, and how to make one.

The CLI's ``--engine`` choices and help are written from the kinds' descriptors (``records.kinds.EngineName``:
each kind's ``__init__`` names its engines, importable without this package, so ``bench --help`` imports no
engine); this registry makes an ``EngineKind`` of each of them with its spec class and factory, and refuses a
descriptor's engine it has no factory for. The runner, ``bench --like`` and ``gpuledger run`` read the
registry; nothing else lists engines. An engine's module is imported only when the engine is made: the HTTP
engines load aiohttp and orjson (~0.25 s), the in-process engine torch and transformers (seconds), which the
other commands need not pay.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from gpuledger.engines.base import Engine, GenRequest, GenResult
from gpuledger.errors import UsageError
from gpuledger.kinds.image.spec import ImageSpec
from gpuledger.kinds.text.spec import ServerSpec, TorchSpec
from gpuledger.kinds.train.spec import TrainSpec
from gpuledger.records import BenchSpec
from gpuledger.records.kinds import EngineName, engine_names_of_kinds

if TYPE_CHECKING:
    from gpuledger.engines.torch.models import ModelPlan


@dataclass(frozen=True, slots=True)
class EngineOptions:
    """What making an engine needs beyond its spec: the API key (read from the variable the spec names,
    never stored), where an engine reports its phases (loading a model takes a while) and, for the in-process
    engine, the model already planned (``gpuledger run`` chose it by its plan: not planned twice)."""

    api_key: str | None = None
    on_phase: Callable[[str], None] | None = None
    plan: ModelPlan | None = None


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
        return TorchEngine(spec, on_phase=options.on_phase, plan=options.plan)

    return make



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



def _train() -> Factory:
    """The training engine (``engines/torch/trainer.py``; ``bench --task train --engine torch``)."""
    from gpuledger.engines.torch.trainer import TrainEngine

    def make(spec: BenchSpec, options: EngineOptions) -> Engine:
        if not isinstance(spec, TrainSpec):
            raise UsageError(f"the training engine needs a training spec, not {spec.kind or 'this one'}")
        return TrainEngine(spec, on_phase=options.on_phase)

    return make


# How to make each engine the kinds' descriptors name, and the spec classes their runs store.
FACTORIES: dict[str, Callable[[], Factory]] = {
    "openai": _openai,
    "ollama": _ollama,
    "torch": _torch,
    "diffusers": _image("diffusers"),
    "comfyui": _image("comfyui"),
    "openai-images": _image("openai-images"),
    "torch-train": _train,
}
SPECS: dict[str, type[BenchSpec]] = {s.KIND: s for s in (ServerSpec, TorchSpec, ImageSpec, TrainSpec)}


def kind_of_entry(entry: EngineName) -> EngineKind:
    """The registered engine of a descriptor's entry: its names and endpoints, its spec class and factory."""
    factory = FACTORIES.get(entry.name)
    spec = SPECS.get(entry.spec_kind)
    if factory is None or spec is None:
        raise LookupError(f"engine {entry.name}: no factory or spec class for it in engines.registry")
    return EngineKind(entry.name, entry.about, spec, factory, dict(entry.endpoints), entry.default_base_url)


for _entry in engine_names_of_kinds():
    register_engine(kind_of_entry(_entry))
