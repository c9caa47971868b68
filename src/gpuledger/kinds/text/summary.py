"""The summary of a text-generation run (LLM inference): tokens, requests, latencies, SLOs, sweep stages.

Produced by ``gpuledger.bench.metrics.summarize`` (the metric definitions are in that module and in
docs/bench.md); a published point's summary is ``PublishedSummary`` (``kinds/text/published.py``, stored by
``gpuledger import-results``). Its work is counted in output tokens (the headline), input tokens, tokens (in
+ out), requests and — with SLOs — good requests and good output tokens; a run whose streams had reasoning
also in answer tokens (output tokens less reasoning: ``bench.workload_metrics``). The reasoning and session
blocks are set only for runs that had them.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from gpuledger.kinds.text import units as _units  # noqa: F401  (registers the units counted here)
from gpuledger.kinds.text.published import PublishedSummary
from gpuledger.quantity import Quantity
from gpuledger.records.itemstats import Latency
from gpuledger.records.summary import RunSummary, Strict
from gpuledger.records.units import Work

# What a request's record keeps beside its timings (server_timings[KEY]): the reasoning/answer split the
# engine read from the stream (engines/openai.py), and what the load knows of it (session and turn, a
# trace's schedule: bench/sessions.py, bench/replay.py).
REASONING_KEY = "reasoning"
WORKLOAD_KEY = "workload"
# Units a run has only when its requests did such work (reasoning; SLOs given).
EXTRA_UNITS = ("answer_token", "good_output_token")




class SloOutcome(Strict):
    """The limits given (ms) and how many requests met all of them."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    met: int = Field(default=0, ge=0)
    met_ratio: float | None = None

    def limits(self) -> dict[str, float]:
        return {
            k: float(v)
            for k in ("ttft_ms", "tpot_ms", "e2e_ms")
            if k in self.model_fields_set and (v := getattr(self, k)) is not None
        }

    def limits_text(self) -> str:
        return ", ".join(f"{k} ≤ {v:g}" for k, v in self.limits().items())


class LengthExample(Strict):
    index: int
    requested: int | None = None
    received: int | None = None


class OutputLengthCheck(Strict):
    """Requests that asked for an exact output length, and those that did not get it."""

    checked: int = Field(default=0, ge=0)
    count: int = Field(default=0, ge=0)
    requested_tokens_total: int = Field(default=0, ge=0)
    received_tokens_total: int = Field(default=0, ge=0)
    examples: list[LengthExample] = Field(default_factory=list)


class ServerTimings(Strict):
    """Client timings side by side with the server's own (Ollama's done line, llama.cpp ``timings``)."""

    n: int = 0
    servers: list[str] = Field(default_factory=list)
    client_ttft_ms_mean: float | None = None
    server_load_ms_mean: float | None = None
    server_prefill_ms_mean: float | None = None
    server_time_to_first_token_ms_mean: float | None = None
    client_decode_ms_mean: float | None = None
    server_decode_ms_mean: float | None = None
    client_e2e_ms_mean: float | None = None
    server_total_ms_mean: float | None = None
    client_decode_tokens_per_s_mean: float | None = None
    server_decode_tokens_per_s_mean: float | None = None
    ttft_client_minus_server_ms: float | None = None
    e2e_client_minus_server_ms: float | None = None


class ReasoningSummary(Strict):
    """Reasoning and answer tokens of the successful requests (``requests``: those whose stream had
    reasoning), the TTFT to the first reasoning and to the first answer token, where the split came from."""

    requests: int = Field(default=0, ge=0)
    reasoning_tokens_total: int = Field(default=0, ge=0)
    answer_tokens_total: int = Field(default=0, ge=0)
    reasoning_share: float | None = None
    ttft_reasoning_ms: Latency = Field(default_factory=Latency)
    ttft_answer_ms: Latency = Field(default_factory=Latency)
    token_source: dict[str, int] = Field(default_factory=dict)


class TurnSummary(Strict):
    """The requests that were turn ``turn`` (from 1) of their session."""

    turn: int = Field(ge=1)
    requests: int = Field(default=0, ge=0)
    num_ok: int = Field(default=0, ge=0)
    ttft_ms: Latency = Field(default_factory=Latency)
    e2e_ms: Latency = Field(default_factory=Latency)
    input_tokens_mean: float | None = None


class SessionSummary(Strict):
    """Multi-turn sessions: how many, how many sent all their turns successfully, their turns and the
    duration of the complete ones (first send → last token), and each turn index's figures."""

    sessions: int = Field(default=0, ge=0)
    complete: int = Field(default=0, ge=0)
    turns_per_session_mean: float | None = None
    session_ms: Latency = Field(default_factory=Latency)
    by_turn: list[TurnSummary] = Field(default_factory=list)


LATENCY_METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")


class TextGenerationSummary(RunSummary):
    """A text-generation run over its measured window (see ``bench.metrics.summarize``)."""

    KIND: ClassVar[str] = "text_generation"
    HEADLINE: ClassVar[str] = "output_token"
    PRICE_UNITS: ClassVar[tuple[str, ...] | None] = ("token", "output_token", "request", "good_request")
    YIELD_UNITS: ClassVar[tuple[str, ...] | None] = ("token", "output_token")
    RATE_KEYS: ClassVar[dict[str, str]] = {
        "output_token": "output_tokens_per_s",
        "input_token": "input_tokens_per_s",
        "token": "total_tokens_per_s",
        "request": "requests_per_s",
        "good_request": "goodput_requests_per_s",
        "answer_token": "answer_tokens_per_s",
        "good_output_token": "goodput_output_tokens_per_s",
    }
    SIZE_UNITS: ClassVar[tuple[tuple[str, str, str], ...]] = (
        ("output_token", "output lengths", "tokens per request"),
        ("input_token", "input lengths", "tokens per request"),
    )

    input_tokens_total: int = Field(default=0, ge=0)
    output_tokens_total: int = Field(default=0, ge=0)
    input_tokens_per_s: float | None = None
    output_tokens_per_s: float | None = None
    total_tokens_per_s: float | None = None
    requests_per_s: float | None = None
    ttft_ms: Latency = Field(default_factory=Latency)
    tpot_ms: Latency = Field(default_factory=Latency)
    itl_ms: Latency = Field(default_factory=Latency)
    e2e_ms: Latency = Field(default_factory=Latency)
    input_tokens_unknown_requests: int | None = None
    slo: SloOutcome | None = None
    goodput_requests_per_s: float | None = None
    token_source: dict[str, int] = Field(default_factory=dict)
    output_len_mismatch: OutputLengthCheck = Field(default_factory=OutputLengthCheck)
    server_timings: ServerTimings | None = None
    stages: list[TextStageSummary] | None = None
    # Set only for runs that have them (bench.workload_metrics).
    answer_tokens_total: int | None = Field(default=None, ge=0)
    answer_tokens_per_s: float | None = None
    good_output_tokens_total: int | None = Field(default=None, ge=0)
    goodput_output_tokens_per_s: float | None = None
    reasoning: ReasoningSummary | None = None
    sessions: SessionSummary | None = None

    def work(self) -> dict[str, Work]:
        out = {
            "output_token": Work(count=self.output_tokens_total, per_s=self.output_tokens_per_s),
            "input_token": Work(count=self.input_tokens_total, per_s=self.input_tokens_per_s),
            "token": Work(
                count=self.input_tokens_total + self.output_tokens_total, per_s=self.total_tokens_per_s
            ),
            "request": Work(count=self.num_ok, per_s=self.requests_per_s),
        }
        if self.slo is not None:
            out["good_request"] = Work(count=self.slo.met, per_s=self.goodput_requests_per_s)
        if self.answer_tokens_total is not None:
            out["answer_token"] = Work(count=self.answer_tokens_total, per_s=self.answer_tokens_per_s)
        if self.good_output_tokens_total is not None:
            out["good_output_token"] = Work(count=self.good_output_tokens_total,
                                            per_s=self.goodput_output_tokens_per_s)
        return out

    def _extras(self) -> list[str]:
        """The units of ``EXTRA_UNITS`` this run did work in."""
        work = self.work()
        return [u for u in EXTRA_UNITS if u in work]

    def price_units(self) -> list[str]:
        return [*super().price_units(), *self._extras()]

    def yield_units(self) -> list[str]:
        return [*super().yield_units(), *[u for u in self._extras() if u == "answer_token"]]

    def rate_keys(self) -> list[tuple[str, str]]:
        extras = self._extras()
        return [(u, k) for u, k in super().rate_keys() if u not in EXTRA_UNITS or u in extras]

    def key_figures(self) -> list[tuple[str, Quantity]]:
        out = super().key_figures()
        for name, label in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT")):
            block = self.latency(name)
            for pct in ("p50", "p99"):
                value = block.get(pct)
                out.append(
                    (
                        f"{label} {pct}",
                        Quantity(value, "ms", "measured", f"{block.n} requests")
                        if value is not None
                        else Quantity.missing("ms", "measured", f"no request had a {label}"),
                    )
                )
        return out

    def fidelity_notes(self) -> list[str]:
        n = self.output_len_mismatch.count
        return [f"{n} request(s) got a different output length than requested"] if n else []

    def compute_share(self) -> tuple[float | None, str]:
        """The share of request time spent before the first token (mean TTFT ÷ mean E2E): the measured proxy
        for the prefill (compute-bound) share of the work."""
        ttft, e2e = self.ttft_ms.mean, self.e2e_ms.mean
        if ttft is None or e2e is None or e2e <= 0:
            return None, "the run has no TTFT/E2E means"
        return min(max(ttft / e2e, 0.0), 1.0), f"mean TTFT {ttft:.1f} ms / mean E2E {e2e:.1f} ms"

    def slo_attainment(self) -> float | None:
        return None if self.slo is None else self.slo.met_ratio

    def slo_text(self) -> str:
        return "" if self.slo is None else self.slo.limits_text()

    def latency(self, name: str) -> Latency:
        value = getattr(self, name, None)
        return value if isinstance(value, Latency) else Latency()

    def stage_summaries(self) -> list[RunSummary]:
        return list(self.stages or [])

    def without_stages(self) -> TextGenerationSummary:
        if self.stages is None:
            return self
        data = self.model_dump(exclude_unset=True, exclude={"stages"})
        return TextGenerationSummary.model_validate(data)

    def with_window(self, scale: float) -> TextGenerationSummary:
        def times(v: float | None) -> float | None:
            return None if v is None else v * scale

        update = {
            "window_s": self.window_s / scale,
            "input_tokens_per_s": times(self.input_tokens_per_s),
            "output_tokens_per_s": times(self.output_tokens_per_s),
            "total_tokens_per_s": times(self.total_tokens_per_s),
            "requests_per_s": times(self.requests_per_s),
            "goodput_requests_per_s": times(self.goodput_requests_per_s),
        }
        for key in ("answer_tokens_per_s", "goodput_output_tokens_per_s"):  # only where the run has them
            if key in self.model_fields_set:
                update[key] = times(getattr(self, key))
        return self.model_copy(update=update)


class TextStageSummary(TextGenerationSummary):
    """One load of a sweep: the summary of its requests and the load parameters it ran at."""

    KIND: ClassVar[str] = ""

    stage: str = ""
    concurrency: int | None = None
    rate_requests_per_s: float | None = None
    max_concurrency: int | None = None
    # When the stage ran, on the run's clock (s; first send, last finish) — the window its energy is
    # measured over. Absent in runs stored before stages recorded it.
    window_start_s: float | None = None
    window_end_s: float | None = None

    def stage_name(self) -> str:
        return self.stage

    def stage_window(self) -> tuple[float, float] | None:
        if self.window_start_s is None or self.window_end_s is None:
            return None
        return self.window_start_s, self.window_end_s

    def stage_params(self) -> dict[str, Any]:
        return {
            k: getattr(self, k)
            for k in ("concurrency", "rate_requests_per_s", "max_concurrency")
            if k in self.model_fields_set
        }


TextGenerationSummary.model_rebuild()


__all__ = [
    "EXTRA_UNITS",
    "LATENCY_METRICS",
    "LengthExample",
    "OutputLengthCheck",
    "PublishedSummary",
    "REASONING_KEY",
    "ReasoningSummary",
    "ServerTimings",
    "SessionSummary",
    "SloOutcome",
    "TextGenerationSummary",
    "TextStageSummary",
    "TurnSummary",
    "WORKLOAD_KEY",
]
