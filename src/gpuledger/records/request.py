"""One request as the client measured it: the record bench writes per request, and every kind's summary
is computed from (``records.spec.BenchSpec.summarize``, ``bench.metrics``). Times are seconds on the run's
own clock (``records.run.RunInfo.t0_monotonic``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

# Where a request's token counts came from, most trustworthy first.
TokenSource = Literal["server_usage", "server_tokenizer", "engine", "client_count"]
TOKEN_SOURCES: tuple[TokenSource, ...] = ("server_usage", "server_tokenizer", "engine", "client_count")


@dataclass(slots=True)
class RequestRecord:
    """One request as measured by the client. ``chunk_times[i]`` is when content chunk ``i``
    arrived; ``chunk_tokens[i]`` how many tokens it carried (``None`` = one token per chunk).
    ``t_first`` is ``chunk_times[0]`` when there is content."""

    index: int
    t_send: float
    t_first: float | None = None
    t_end: float | None = None
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

    @property
    def ok(self) -> bool:
        return self.error is None
