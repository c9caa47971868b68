"""Inference engines behind one Protocol: OpenAI-compatible servers, Ollama's native API, and the
in-process PyTorch engine (``gpuledger.engines.torch_engine``, imported lazily — torch is optional)."""

from __future__ import annotations

from gpuledger.engines.base import Engine, GenRequest, GenResult, ServerInfo, Tokenizer
from gpuledger.errors import UsageError

ENGINES = ("openai", "ollama", "torch")
ENDPOINTS = {"openai": ("completions", "chat"), "ollama": ("generate", "chat")}
DEFAULT_BASE_URLS = {"openai": "http://127.0.0.1:8000", "ollama": "http://127.0.0.1:11434"}


def make_engine(
    kind: str,
    base_url: str,
    model: str | None,
    *,
    endpoint: str | None = None,
    api_key: str | None = None,
    request_timeout_s: float = 300.0,
) -> Engine:
    """An HTTP engine by name (``openai`` or ``ollama``). The torch engine runs in-process and is
    driven by its own module, not through this factory."""
    # Each engine module is imported when chosen: the HTTP engines load aiohttp and orjson (~0.25 s), which
    # an in-process torch run (it needs only engines.base) need not pay.
    if kind == "openai":
        from gpuledger.engines.openai import OpenAIEngine

        return OpenAIEngine(
            base_url,
            model,
            endpoint=endpoint,
            api_key=api_key,
            request_timeout_s=request_timeout_s,
        )
    if kind == "ollama":
        from gpuledger.engines.ollama import OllamaEngine

        return OllamaEngine(
            base_url,
            model,
            endpoint=endpoint,
            api_key=api_key,
            request_timeout_s=request_timeout_s,
        )
    raise UsageError(f"unknown engine {kind!r}: choose one of openai, ollama, torch")


__all__ = [
    "DEFAULT_BASE_URLS",
    "ENDPOINTS",
    "ENGINES",
    "Engine",
    "GenRequest",
    "GenResult",
    "ServerInfo",
    "Tokenizer",
    "make_engine",
]
