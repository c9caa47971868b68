"""A serving engine's own Prometheus ``/metrics``: fetch it (aiohttp, on a timeout, size-capped), and read
what vLLM, SGLang and llama.cpp export there with prometheus_client's text parser. The monitor turns the
token and request counters into live rates (``gpuledger.monitor.engine``); the bench reads the scheduler
series around its window (``gpuledger.bench.server_state``).

Token and request counters, per engine (summed over every label set: models, DP ranks, finish reasons):

=========  ==============================  ==============================  ==================================
engine     prompt tokens                   output tokens                   finished requests
=========  ==============================  ==============================  ==================================
vLLM       ``vllm:prompt_tokens_total``    ``vllm:generation_tokens_total``  ``vllm:request_success_total``
                                                                           (else the e2e histogram's count)
SGLang     ``sglang:prompt_tokens_total``  ``sglang:generation_tokens_total``  ``sglang:num_requests_total``
                                                                           (else the e2e histogram's count)
llama.cpp  ``llamacpp:prompt_tokens_total``  ``llamacpp:tokens_predicted_total``  none (not exported)
=========  ==============================  ==============================  ==================================

End-to-end latency: ``<engine>:e2e_request_latency_seconds`` (``_sum`` / ``_count``), vLLM and SGLang.

Scheduler series (summed over label sets, except the KV-cache ratio, which is the fullest engine's when a
server runs several):

- vLLM: ``vllm:request_queue_time_seconds`` (histogram sum and count), ``vllm:num_preemptions_total``,
  ``vllm:prefix_cache_queries_total`` / ``vllm:prefix_cache_hits_total`` (prompt tokens, v1);
  gauges ``vllm:num_requests_running``, ``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc`` (v1;
  ``vllm:gpu_cache_usage_perc`` in v0; a ratio 0..1 despite the name).
- SGLang: gauges ``sglang:num_running_reqs``, ``sglang:num_queue_reqs``, ``sglang:token_usage`` (ratio);
  ``sglang:prompt_tokens_total`` / ``sglang:cached_tokens_total`` (prompt tokens, and those served from its
  radix cache, every ``cache_source`` summed; docs/references/production_metrics.md).
- llama.cpp (``--metrics``): gauges ``llamacpp:requests_processing``, ``llamacpp:requests_deferred``,
  ``llamacpp:kv_cache_usage_ratio`` (not in every build).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit, urlunsplit

from gpuledger.errors import EngineError
from gpuledger.urls import redact_text, redact_url

if TYPE_CHECKING:  # imported where used: the report and `runs` read STATE_SERIES without a client or a parser
    import aiohttp

EngineKind = Literal["vllm", "sglang", "llamacpp"]
MAX_BODY_BYTES = 32 * 1024 * 1024


class EngineMetricsError(EngineError):
    """The engine's /metrics could not be fetched or is not an engine's exposition text. The monitor
    shows the message as the engine source's reason and keeps serving everything else."""


@dataclass(frozen=True, slots=True)
class _Names:
    prompt: str
    output: str
    requests: tuple[str, ...]  # first present wins
    e2e: str | None
    no_requests_reason: str | None = None


ENGINE_SERIES: dict[EngineKind, _Names] = {
    "vllm": _Names("vllm:prompt_tokens_total", "vllm:generation_tokens_total",
                   ("vllm:request_success_total", "vllm:e2e_request_latency_seconds_count"),
                   "vllm:e2e_request_latency_seconds"),
    "sglang": _Names("sglang:prompt_tokens_total", "sglang:generation_tokens_total",
                     ("sglang:num_requests_total", "sglang:e2e_request_latency_seconds_count"),
                     "sglang:e2e_request_latency_seconds"),
    "llamacpp": _Names("llamacpp:prompt_tokens_total", "llamacpp:tokens_predicted_total", (), None,
                       "llama.cpp's /metrics exports no finished-request counter"),
}
ENGINE_LABELS: dict[EngineKind, str] = {"vllm": "vLLM", "sglang": "SGLang", "llamacpp": "llama.cpp"}


@dataclass(frozen=True, slots=True)
class EngineCounters:
    """One scrape of an engine, as cumulative counters (tokens, requests, seconds)."""

    kind: EngineKind
    prompt_tokens: float | None
    output_tokens: float | None
    requests: float | None
    e2e_sum_s: float | None
    e2e_count: float | None
    models: tuple[str, ...] = ()
    requests_reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.kind, "prompt_tokens_total": self.prompt_tokens,
                "output_tokens_total": self.output_tokens, "requests_total": self.requests,
                "e2e_seconds_sum": self.e2e_sum_s, "e2e_count": self.e2e_count, "models": list(self.models),
                "requests_reason": self.requests_reason}


def normalise_engine_url(url: str) -> str:
    """``http://host:8000`` -> ``http://host:8000/metrics`` (a URL with a path is kept as given)."""
    parts = urlsplit(url.strip())
    if parts.path in ("", "/"):
        parts = parts._replace(path="/metrics")
    return urlunsplit(parts)


def parse_engine_metrics(text: str) -> EngineCounters:
    """The engine's counters from its exposition text. Unparseable text, or text with none of the
    engines' series, is an :class:`EngineMetricsError` saying which."""
    from prometheus_client.parser import text_string_to_metric_families

    sums: dict[str, float] = {}
    models: set[str] = set()
    families = 0
    try:
        for fam in text_string_to_metric_families(text):
            families += 1
            for sample in fam.samples:
                value = float(sample.value)
                if not math.isfinite(value):
                    continue
                sums[sample.name] = sums.get(sample.name, 0.0) + value
                model = sample.labels.get("model_name")
                if model and sample.name.split(":", 1)[0] in ENGINE_SERIES:
                    models.add(model)
    except (ValueError, IndexError, KeyError, TypeError) as exc:
        first = text.strip().splitlines()[0][:80] if text.strip() else ""
        raise EngineMetricsError(f"not Prometheus exposition text ({exc}); it starts with {first!r}") from exc

    for kind, names in ENGINE_SERIES.items():
        if names.prompt not in sums and names.output not in sums:
            continue
        requests = None
        for name in names.requests:
            if name in sums:
                requests = sums[name]
                break
        reason = None
        if requests is None:
            reason = names.no_requests_reason or f"none of {', '.join(names.requests)} in the response"
        e2e_sum = sums.get(f"{names.e2e}_sum") if names.e2e else None
        e2e_count = sums.get(f"{names.e2e}_count") if names.e2e else None
        return EngineCounters(kind, sums.get(names.prompt), sums.get(names.output), requests, e2e_sum,
                              e2e_count, tuple(sorted(models)), reason)
    raise EngineMetricsError(
        f"no vLLM, SGLang or llama.cpp token counters in the response ({families} metric families; "
        "expected vllm:generation_tokens_total, sglang:generation_tokens_total or "
        "llamacpp:tokens_predicted_total) — is this the engine's /metrics endpoint? "
        "(llama.cpp needs --metrics)"
    )


async def fetch_engine_metrics(session: aiohttp.ClientSession, url: str, timeout_s: float) -> str:
    """GET ``url`` and return its text; every failure is an :class:`EngineMetricsError`."""
    import aiohttp

    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s),
                               allow_redirects=False) as resp:
            if resp.status != 200:
                status = f"HTTP {resp.status} {resp.reason or ''}".rstrip()
                raise EngineMetricsError(f"GET {redact_url(url)} answered {status}")
            chunks: list[bytes] = []
            size = 0
            async for chunk in resp.content.iter_chunked(65536):
                size += len(chunk)
                if size > MAX_BODY_BYTES:
                    raise EngineMetricsError(
                        f"GET {redact_url(url)}: response larger than {MAX_BODY_BYTES // 2**20} MiB"
                    )
                chunks.append(chunk)
            return b"".join(chunks).decode("utf-8", errors="replace")
    except TimeoutError as exc:
        raise EngineMetricsError(f"GET {redact_url(url)}: no answer within {timeout_s:g} s") from exc
    except aiohttp.ClientError as exc:
        raise EngineMetricsError(
            f"GET {redact_url(url)}: {type(exc).__name__}: {redact_text(str(exc))}"
        ) from exc


async def scrape_engine(session: aiohttp.ClientSession, url: str, timeout_s: float) -> EngineCounters:
    text = await fetch_engine_metrics(session, url, timeout_s)
    return parse_engine_metrics(text)


# --------------------------------------------------------------------------- scheduler state


@dataclass(frozen=True, slots=True)
class StateSeries:
    label: str
    running: str
    waiting: str
    kv_usage: tuple[str, ...]  # first present wins
    preemptions: str | None
    queue_time: str | None = None  # a histogram of seconds spent waiting, per request
    # Prompt tokens looked up in the prefix cache, and found there (counters).
    prefix_queries: str | None = None
    prefix_hits: str | None = None


STATE_SERIES: dict[str, StateSeries] = {
    "vllm": StateSeries(
        "vLLM", "vllm:num_requests_running", "vllm:num_requests_waiting",
        ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"), "vllm:num_preemptions_total",
        "vllm:request_queue_time_seconds", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
    ),
    "sglang": StateSeries("SGLang", "sglang:num_running_reqs", "sglang:num_queue_reqs",
                          ("sglang:token_usage",), None, None, "sglang:prompt_tokens_total",
                          "sglang:cached_tokens_total"),
    "llamacpp": StateSeries("llama.cpp", "llamacpp:requests_processing", "llamacpp:requests_deferred",
                            ("llamacpp:kv_cache_usage_ratio",), None),
}


@dataclass(frozen=True, slots=True)
class StatePoint:
    """One scrape: ``t`` in seconds on the run's clock; None where the server does not export it."""

    t: float
    running: float | None
    waiting: float | None
    kv_usage_ratio: float | None
    preemptions_total: float | None
    queue_seconds_sum: float | None = None
    queue_count: float | None = None
    prefix_queries: float | None = None
    prefix_hits: float | None = None


def parse_state(text: str, kind: str, t: float) -> StatePoint:
    """The state series of ``kind`` in one exposition text (``EngineMetricsError`` if it is not one)."""
    from prometheus_client.parser import text_string_to_metric_families

    series = STATE_SERIES[kind]
    wanted = {series.running, series.waiting, *series.kv_usage}
    if series.preemptions:
        wanted.add(series.preemptions)
    if series.queue_time:
        wanted.update((series.queue_time + "_sum", series.queue_time + "_count"))
    prefix = tuple(n for n in (series.prefix_queries, series.prefix_hits) if n)
    wanted.update(prefix)
    sums: dict[str, float] = {}
    peaks: dict[str, float] = {}
    try:
        for fam in text_string_to_metric_families(text):
            for sample in fam.samples:
                if sample.name not in wanted:
                    continue
                value = float(sample.value)
                if not math.isfinite(value):
                    continue
                sums[sample.name] = sums.get(sample.name, 0.0) + value
                peaks[sample.name] = max(peaks.get(sample.name, value), value)
    except (ValueError, IndexError, KeyError, TypeError) as exc:
        raise EngineMetricsError(f"/metrics is not Prometheus exposition text ({exc})") from exc
    kv = next((peaks[n] for n in series.kv_usage if n in peaks), None)
    queue = series.queue_time
    return StatePoint(
        t,
        sums.get(series.running),
        sums.get(series.waiting),
        kv,
        sums.get(series.preemptions) if series.preemptions else None,
        sums.get(queue + "_sum") if queue else None,
        sums.get(queue + "_count") if queue else None,
        sums.get(series.prefix_queries) if series.prefix_queries else None,
        sums.get(series.prefix_hits) if series.prefix_hits else None,
    )
