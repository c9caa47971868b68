"""The Engine Protocol every inference API implements, and the types that cross it.

An engine sends ONE request and streams back what the client saw: when each content chunk arrived
(``time.perf_counter()`` seconds, one reading per network read), how many tokens each chunk carried
when the server says so, the token counts and where they came from, the server's own timings, and
the error, if any. Per-request faults are values (``GenResult.error``), never exceptions: a run
continues past a failed request. Only "the server cannot be used at all" raises ``EngineError``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from gpuledger.records import RequestRecord, TokenSource

# ``GenResult.error`` starts with this when the request could not reach the server at all.
CANNOT_CONNECT = "cannot connect"


@dataclass(slots=True)
class GenRequest:
    """One request. ``prompt`` for completion-style APIs, ``messages`` for chat APIs (an engine
    turns one into the other when needed). ``max_tokens`` is the requested output length;
    ``fixed_output`` asks the server to produce exactly that many tokens (``ignore_eos`` /
    ``min_tokens`` where the server accepts them)."""

    index: int
    prompt: str
    max_tokens: int
    messages: list[dict[str, str]] | None = None
    fixed_output: bool = False
    input_tokens_hint: int | None = None
    stage: str = ""

    def as_messages(self) -> list[dict[str, str]]:
        return self.messages if self.messages is not None else [{"role": "user", "content": self.prompt}]

    def as_prompt(self) -> str:
        if self.messages is None:
            return self.prompt
        return "\n".join(m.get("content", "") for m in self.messages)


@dataclass(slots=True)
class GenResult:
    """What the client measured for one request. Times are absolute ``time.perf_counter()`` seconds;
    :meth:`to_record` puts them on the run's clock."""

    index: int
    t_send: float
    t_end: float
    chunk_times: list[float] = field(default_factory=list)
    chunk_tokens: list[int] | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    token_source: TokenSource = "client_count"
    requested_output_tokens: int | None = None
    error: str | None = None
    stage: str = ""
    server_timings: dict[str, Any] | None = None
    output_chars: int = 0
    text: str | None = None
    system_fingerprint: str | None = None

    def to_record(self, t0: float) -> RequestRecord:
        """The stored record. ``t_end`` is the last content token's arrival when one arrived (E2E's
        definition, so E2E reads the same with or without the chunk times), else the response's end."""
        times = [t - t0 for t in self.chunk_times]
        return RequestRecord(
            index=self.index,
            t_send=self.t_send - t0,
            t_first=times[0] if times else None,
            t_end=times[-1] if times else self.t_end - t0,
            chunk_times=times,
            chunk_tokens=self.chunk_tokens,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            token_source=self.token_source,
            requested_output_tokens=self.requested_output_tokens,
            error=self.error,
            stage=self.stage,
            server_timings=self.server_timings,
            output_chars=self.output_chars,
        )


@dataclass(slots=True)
class ServerInfo:
    """Who answered: engine family (``vllm``, ``sglang``, ``llamacpp``, ``tgi``, ``ollama``, or
    ``unknown``), its version when exposed, where that came from, and what the server supports."""

    kind: str = "unknown"
    version: str | None = None
    version_source: str | None = None
    models: list[str] = field(default_factory=list)
    accepts_ignore_eos: bool = False
    accepts_min_tokens: bool = False
    accepts_continuous_usage: bool = False
    tokenizer_endpoint: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "version": self.version,
            "version_source": self.version_source,
            "models": self.models,
            "accepts_ignore_eos": self.accepts_ignore_eos,
            "accepts_min_tokens": self.accepts_min_tokens,
            "accepts_continuous_usage": self.accepts_continuous_usage,
            "tokenizer_endpoint": self.tokenizer_endpoint,
            "details": self.details,
            "warnings": self.warnings,
        }


@runtime_checkable
class Tokenizer(Protocol):
    """A server's own tokenizer, reached over HTTP (vLLM and llama.cpp ``/tokenize``)."""

    async def tokenize(self, text: str, add_special: bool = False) -> list[int]: ...

    async def detokenize(self, ids: list[int]) -> str: ...


@runtime_checkable
class Engine(Protocol):
    """One inference API. Lifecycle: ``open`` (probe; ``EngineError`` if the server is unusable) →
    ``generate`` many times, concurrently → ``after_run`` (server state worth recording) → ``close``.

    ``chunks_seen`` is a live count of content chunks received, for the progress display only."""

    name: str
    chunks_seen: int

    async def open(self, concurrency: int | None) -> ServerInfo: ...

    @property
    def tokenizer(self) -> Tokenizer | None: ...

    async def generate(self, req: GenRequest) -> GenResult: ...

    async def after_run(self) -> dict[str, Any]: ...

    async def close(self) -> None: ...
