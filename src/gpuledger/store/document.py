"""The export document of a run (``gpuledger export RUN --format json``; ``gpuledger import FILE``)::

    {"format": "gpuledger-run", "version": 1,
     "run": {RunInfo fields; datetimes as ISO 8601 strings},
     "requests": [{RequestRecord fields}, ...],
     "telemetry": [{"t", "device", "metric", "value", "source"}, ...]}

A file is validated in full before anything is written: unknown keys, wrong types, non-finite
numbers, or a ``version`` newer than ``FORMAT_VERSION`` are InvalidInputError. Credentials in a server
URL are never written into a document and never kept from one (``gpuledger.urls``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gpuledger.errors import InvalidInputError
from gpuledger.records import (
    RequestRecord,
    RunInfo,
    RunStatus,
    SpecError,
    SummaryError,
    TelemetryRecordError,
    TelemetrySample,
    TokenSource,
    dump_spec,
    dump_summary,
    dump_telemetry_summary,
    load_spec,
    load_summary,
    load_telemetry_summary,
)
from gpuledger.records.environment import EnvironmentRecordError, dump_environment, load_environment
from gpuledger.store.exchange import INT_MAX, RUN_FIELDS
from gpuledger.urls import redact_url

FORMAT = "gpuledger-run"
FORMAT_VERSION = 1
_RUN_DATETIMES = ("created_at", "started_at", "finished_at")

# The columns of `gpuledger export --format csv` (times in seconds on the run's clock, durations in ms).
CSV_COLUMNS: tuple[str, ...] = (
    "index", "stage", "t_send_s", "ttft_ms", "e2e_ms", "input_tokens", "output_tokens",
    "token_source", "error",
)


# ---- export -----------------------------------------------------------------------------------


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def run_to_dict(info: RunInfo) -> dict[str, Any]:
    """``info`` as plain JSON types (datetimes as ISO 8601 strings)."""
    out: dict[str, Any] = {}
    for name in RUN_FIELDS:
        value = getattr(info, name)
        out[name] = _iso(value) if name in _RUN_DATETIMES else value
    out["summary"] = dump_summary(info.summary)
    out["config"] = redacted_config(dump_spec(info.config))
    out["environment"] = dump_environment(info.environment)
    out["telemetry_summary"] = dump_telemetry_summary(info.telemetry_summary)
    # Credentials in a server URL are used for the requests and shown nowhere (runs stored before
    # gpuledger redacted them at the source may still hold them).
    out["base_url"] = redact_url(info.base_url) if info.base_url else info.base_url
    return out


def redacted_config(config: dict[str, Any]) -> dict[str, Any]:
    """A dumped spec with its server URL redacted (``gpuledger.urls``)."""
    url = config.get("base_url")
    return {**config, "base_url": redact_url(url)} if isinstance(url, str) else config


def request_to_dict(r: RequestRecord) -> dict[str, Any]:
    return {
        "index": r.index, "stage": r.stage, "t_send": r.t_send, "t_first": r.t_first, "t_end": r.t_end,
        "chunk_times": r.chunk_times, "chunk_tokens": r.chunk_tokens, "input_tokens": r.input_tokens,
        "output_tokens": r.output_tokens, "token_source": r.token_source,
        "requested_output_tokens": r.requested_output_tokens, "error": r.error,
        "server_timings": r.server_timings, "output_chars": r.output_chars,
    }


def telemetry_to_dict(s: TelemetrySample) -> dict[str, Any]:
    return {"t": s.t, "device": s.device, "metric": s.metric, "value": s.value, "source": s.source}


def export_document(
    info: RunInfo, requests: Iterable[RequestRecord], telemetry: Iterable[TelemetrySample]
) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "run": run_to_dict(info),
        "requests": [request_to_dict(r) for r in requests],
        "telemetry": [telemetry_to_dict(s) for s in telemetry],
    }


def _ms(later: float | None, earlier: float) -> float | None:
    # Rounded to the nanosecond: the difference of two clock readings carries float noise below that.
    return None if later is None else round((later - earlier) * 1000.0, 6)


def csv_rows(requests: Iterable[RequestRecord]) -> Iterator[tuple[Any, ...]]:
    """One row per request, ``CSV_COLUMNS`` order; ``None`` for values that were not measured."""
    for r in requests:
        yield (
            r.index, r.stage, r.t_send, _ms(r.t_first, r.t_send), _ms(r.t_end, r.t_send),
            r.input_tokens, r.output_tokens, r.token_source, r.error,
        )


# ---- import -----------------------------------------------------------------------------------

_When = Annotated[datetime | None, Field(strict=False)]
# Integer columns are 32-bit (INT_MAX); counts and indexes in a file must fit and are never negative.
_Count = Annotated[int, Field(ge=0, le=INT_MAX)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class RunDoc(_Strict):
    id: str
    label: str = ""
    created_at: _When = None
    started_at: _When = None
    status: RunStatus = "incomplete"
    engine: str = ""
    model: str = ""
    base_url: str | None = None
    unit: str = "token"
    workload: dict[str, Any] = Field(default_factory=dict)
    config: dict[str, Any] = Field(default_factory=dict)
    environment: dict[str, Any] = Field(default_factory=dict)
    server: dict[str, Any] = Field(default_factory=dict)
    summary: dict[str, Any] = Field(default_factory=dict)
    telemetry_summary: list[dict[str, Any]] = Field(default_factory=list)
    client: dict[str, Any] = Field(default_factory=dict)
    duration_s: Annotated[float, Field(ge=0)] | None = None
    num_requests: _Count = 0
    finished_at: _When = None


class RequestDoc(_Strict):
    index: _Count
    t_send: float
    t_first: float | None = None
    t_end: float | None = None
    chunk_times: list[float] = Field(default_factory=list)
    chunk_tokens: list[_Count] | None = None
    input_tokens: _Count | None = None
    output_tokens: _Count | None = None
    token_source: TokenSource = "client_count"
    requested_output_tokens: _Count | None = None
    error: str | None = None
    stage: str = ""
    server_timings: dict[str, Any] | None = None
    output_chars: _Count = 0

    @model_validator(mode="after")
    def _chunks_line_up(self) -> RequestDoc:
        if self.chunk_tokens is not None and len(self.chunk_tokens) != len(self.chunk_times):
            raise ValueError(
                f"{len(self.chunk_tokens)} chunk_tokens for {len(self.chunk_times)} chunk_times"
            )
        return self

    @model_validator(mode="after")
    def _no_negative_durations(self) -> RequestDoc:
        # Every duration gpuledger derives from a request (TTFT, E2E, ITL, TPOT) is a difference of these.
        if self.t_first is not None and self.t_first < self.t_send:
            raise ValueError(f"t_first {self.t_first} is before t_send {self.t_send} (a negative TTFT)")
        if self.t_end is not None and self.t_end < self.t_send:
            raise ValueError(f"t_end {self.t_end} is before t_send {self.t_send} (a negative E2E)")
        if self.t_end is not None and self.t_first is not None and self.t_end < self.t_first:
            raise ValueError(f"t_end {self.t_end} is before t_first {self.t_first}")
        times = self.chunk_times
        if times and times[0] < self.t_send:
            raise ValueError(f"chunk_times[0] {times[0]} is before t_send {self.t_send}")
        back = next((k for k in range(1, len(times)) if times[k] < times[k - 1]), None)
        if back is not None:
            raise ValueError(
                f"chunk_times[{back}] {times[back]} is before chunk_times[{back - 1}] {times[back - 1]} "
                "(a negative inter-token latency)"
            )
        return self


class TelemetryDoc(_Strict):
    t: float
    device: str
    metric: str
    value: float
    source: str


class ExportDoc(_Strict):
    format: Literal["gpuledger-run"]
    version: Literal[1]
    run: RunDoc
    requests: list[RequestDoc] = Field(default_factory=list)
    telemetry: list[TelemetryDoc] = Field(default_factory=list)

    @model_validator(mode="after")
    def _indexes_are_unique(self) -> ExportDoc:
        seen: dict[int, int] = {}
        for k, r in enumerate(self.requests):
            first = seen.setdefault(r.index, k)
            if first != k:
                raise ValueError(f"requests[{k}].index {r.index} is also the index of requests[{first}]")
        return self


def _where(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "document"


def parse_document(doc: Any) -> tuple[RunInfo, list[RequestRecord], list[TelemetrySample]]:
    """Validate an export document; InvalidInputError saying where the first problem is."""
    if not isinstance(doc, dict):
        raise InvalidInputError(
            f"not a gpuledger run export: expected a JSON object, got {type(doc).__name__}"
        )
    if doc.get("format") != FORMAT:
        raise InvalidInputError(
            f"not a gpuledger run export: \"format\" is {doc.get('format')!r}, expected {FORMAT!r}"
        )
    version = doc.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise InvalidInputError(f"malformed gpuledger run export: \"version\" is {version!r}")
    if version > FORMAT_VERSION:
        raise InvalidInputError(
            f"this export is {FORMAT} version {version}, written by a newer gpuledger; "
            f"this one reads version {FORMAT_VERSION}",
            hint="upgrade gpuledger on this machine, or export again with this version",
        )
    try:
        parsed = ExportDoc.model_validate(doc)
    except ValidationError as exc:
        errors = exc.errors()
        first = errors[0]
        more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
        where = f"{_where(tuple(first['loc']))}: " if first["loc"] else ""
        msg = str(first["msg"]).removeprefix("Value error, ")
        raise InvalidInputError(f"malformed gpuledger run export: {where}{msg}{more}") from exc
    run = parsed.run
    try:
        summary = load_summary(run.summary)
    except SummaryError as exc:
        raise InvalidInputError(f"malformed gpuledger run export: run.summary: {exc}") from exc
    try:
        # A document from another tool or an older gpuledger may carry a password in its URLs: not kept.
        config = load_spec(
            redacted_config(run.config), run.engine, workload=run.workload, summary=summary
        )
    except SpecError as exc:
        raise InvalidInputError(f"malformed gpuledger run export: run.{exc}") from exc
    fields = {name: getattr(run, name) for name in RUN_FIELDS
              if name not in ("summary", "config", "telemetry_summary")}
    if fields.get("base_url"):
        fields["base_url"] = redact_url(fields["base_url"])
    try:
        fields["environment"] = load_environment(run.environment)
    except EnvironmentRecordError as exc:
        raise InvalidInputError(f"malformed gpuledger run export: run.{exc}") from exc
    try:
        fields["telemetry_summary"] = load_telemetry_summary(run.telemetry_summary)
    except TelemetryRecordError as exc:
        raise InvalidInputError(f"malformed gpuledger run export: run.{exc}") from exc
    info = RunInfo(**fields, summary=summary, config=config)
    requests = [
        RequestRecord(
            r.index, r.t_send, r.t_first, r.t_end, r.chunk_times, r.chunk_tokens, r.input_tokens,
            r.output_tokens, r.token_source, r.requested_output_tokens, r.error, r.stage, r.server_timings,
            r.output_chars,
        )
        for r in parsed.requests
    ]
    telemetry = [TelemetrySample(s.t, s.device, s.metric, s.value, s.source) for s in parsed.telemetry]
    return info, requests, telemetry
