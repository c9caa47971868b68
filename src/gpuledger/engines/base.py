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
from gpuledger.tokenizer import Tokenizer as Tokenizer  # re-exported: the HTTP engines name it from here

# ``GenResult.error`` starts with this when the request could not reach the server at all.
CANNOT_CONNECT = "cannot connect"

# The largest token count a server may report (the store keeps counts as 32-bit integers).
MAX_COUNT = 2**31 - 1
# Slack on top of 2 x max_tokens: stop and end-of-sequence tokens, servers that count a little differently.
TOKEN_SLACK = 64
# A prompt of n characters is at most 4n UTF-8 bytes, and no tokenizer makes more tokens than bytes
# (byte-level BPE, byte fallback); the slack covers a chat template and its special tokens.
PROMPT_TEMPLATE_SLACK = 8192


def output_token_bound(max_tokens: int) -> int:
    """The most output tokens (and content chunks) believable for a request of ``max_tokens``:
    ``2 × max_tokens + 64``. A server generates at most ``max_tokens``; the slack is for servers that
    count stop tokens or chunk a little differently."""
    return 2 * max(max_tokens, 0) + TOKEN_SLACK


def in_count_range(value: object) -> bool:
    """An integer (not a bool) in ``0 .. 2**31 - 1``: a count the store can keep."""
    return type(value) is int and 0 <= value <= MAX_COUNT


def implausible_output_count(value: object, *, max_tokens: int, chunks: int) -> str | None:
    """Why a server's output token count (``usage.completion_tokens``, Ollama ``eval_count``) cannot be
    believed, or None when it can. Believable: an integer (not a bool), ``0 <= n < 2**31``,
    ``n <= 2 × max_tokens + 64`` (:func:`output_token_bound`), and ``n >= (chunks - 1) / 2`` — the client
    received ``chunks`` content chunks, each one token or more, so a count under half of them is not
    the count of this answer (one chunk of slack: a closing chunk that carried no token)."""
    if type(value) is not int:
        return f"{_short(value)} is not an integer"
    if value < 0:
        return f"{value} is negative"
    if value > MAX_COUNT:
        return f"{value} is 2^31 or more"
    bound = output_token_bound(max_tokens)
    if value > bound:
        return f"{value} is over 2 × max_tokens + {TOKEN_SLACK} = {bound} (max_tokens={max_tokens})"
    if 2 * value < chunks - 1:
        return f"{value} is under half of the {chunks} content chunks received"
    return None


def implausible_input_count(value: object, *, prompt_chars: int) -> str | None:
    """Why a server's prompt token count (``usage.prompt_tokens``, Ollama ``prompt_eval_count``) cannot
    be believed, or None when it can. Believable: an integer (not a bool), ``0 <= n < 2**31``, and
    ``n <= 4 × prompt characters + 8192`` (no tokenizer makes more tokens than UTF-8 bytes; the
    slack covers a chat template)."""
    if type(value) is not int:
        return f"{_short(value)} is not an integer"
    if value < 0:
        return f"{value} is negative"
    if value > MAX_COUNT:
        return f"{value} is 2^31 or more"
    bound = 4 * prompt_chars + PROMPT_TEMPLATE_SLACK
    if value > bound:
        return f"{value} is over 4 × {prompt_chars} prompt characters + {PROMPT_TEMPLATE_SLACK} = {bound}"
    return None


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "…"


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

    def prompt_chars(self) -> int:
        """Characters of the prompt (every message's content and role)."""
        if self.messages is None:
            return len(self.prompt)
        return sum(len(m.get("content", "")) + len(m.get("role", "")) for m in self.messages)


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
    # What the engine noticed about this request and did about it (a server count it did not believe,
    # a redirect it followed), one line each. Not part of the stored record: the engine also tallies
    # them into the run's warnings (``HttpEngine.note_warnings``).
    notes: list[str] = field(default_factory=list)

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
