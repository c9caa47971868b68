"""Inference engines behind one Protocol (``engines.base.Engine``): OpenAI-compatible servers, Ollama's
native API, and the in-process PyTorch engine (``engines/torch/``, torch imported lazily: it is optional).
They are registered by name in ``engines.registry``; ``ENGINES``, ``ENDPOINTS`` and ``DEFAULT_BASE_URLS``
are read from it."""

from __future__ import annotations

from gpuledger.engines.base import Engine, GenRequest, GenResult, ServerInfo
from gpuledger.engines.registry import (
    ENGINE_KINDS,
    BatchEngine,
    EngineKind,
    EngineOptions,
    InProcessEngine,
    either,
    engine_kind,
    engine_names,
    make_engine,
    register_engine,
)
from gpuledger.tokenizer import Tokenizer

ENGINES = engine_names()
ENDPOINTS = {n: tuple(k.endpoints) for n, k in ENGINE_KINDS.items() if k.endpoints}
DEFAULT_BASE_URLS = {n: k.default_base_url for n, k in ENGINE_KINDS.items() if k.default_base_url}

__all__ = [
    "DEFAULT_BASE_URLS",
    "ENDPOINTS",
    "ENGINES",
    "ENGINE_KINDS",
    "BatchEngine",
    "Engine",
    "EngineKind",
    "EngineOptions",
    "GenRequest",
    "GenResult",
    "InProcessEngine",
    "ServerInfo",
    "Tokenizer",
    "either",
    "engine_kind",
    "engine_names",
    "make_engine",
    "register_engine",
]
