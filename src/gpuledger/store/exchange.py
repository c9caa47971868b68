"""Conversions between records, table rows and the export document.

Export document (``gpuledger export RUN --format json``; ``gpuledger import FILE``)::

    {"format": "gpuledger-run", "version": 1,
     "run": {RunInfo fields; datetimes as ISO 8601 strings},
     "requests": [{RequestRecord fields}, ...],
     "telemetry": [{"t", "device", "metric", "value", "source"}, ...]}

A file is validated in full before anything is written: unknown keys, wrong types, non-finite
numbers, or a ``version`` newer than ``FORMAT_VERSION`` are InvalidInputError.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from sqlalchemy.engine import Row

from gpuledger.errors import InvalidInputError, StoreError
from gpuledger.records import (
    RUN_STATUSES,
    TOKEN_SOURCES,
    RequestRecord,
    RunInfo,
    RunStatus,
    RunSummary,
    SummaryError,
    TelemetrySample,
    TokenSource,
    dump_summary,
    load_summary,
)
from gpuledger.store.codec import pack_f64, pack_i32, unpack_f64, unpack_i32

FORMAT = "gpuledger-run"
FORMAT_VERSION = 1

RUN_FIELDS: tuple[str, ...] = tuple(RunInfo.__dataclass_fields__)
_RUN_DATETIMES = ("created_at", "started_at", "finished_at")
_RUN_DICTS = ("workload", "config", "environment", "server", "client")

# The columns of `gpuledger export --format csv` (times in seconds on the run's clock, durations in ms).
CSV_COLUMNS: tuple[str, ...] = (
    "index", "stage", "t_send_s", "ttft_ms", "e2e_ms", "input_tokens", "output_tokens",
    "token_source", "error",
)


def env_hash(environment: dict[str, Any]) -> str | None:
    """The environment fingerprint's ``hash`` (a string), if it has one."""
    value = environment.get("hash")
    return value[:128] if isinstance(value, str) else None


def check_run_fields(fields: dict[str, Any]) -> None:
    """InvalidInputError unless every value has the type its RunInfo field needs."""
    for name, value in fields.items():
        if name in ("id",) or name not in RUN_FIELDS:
            raise InvalidInputError(f"{name!r} is not a run field that can be set")
        if name == "status" and value not in RUN_STATUSES:
            raise InvalidInputError(f"invalid run status {value!r} (one of {', '.join(RUN_STATUSES)})")
        if name == "created_at" and not isinstance(value, datetime):
            raise InvalidInputError("created_at must be a datetime")
        if name in _RUN_DATETIMES and value is not None and not isinstance(value, datetime):
            raise InvalidInputError(f"{name} must be a datetime or None")
        if name in _RUN_DICTS and not isinstance(value, dict):
            raise InvalidInputError(f"{name} must be a dict")
        if name == "summary" and value is not None and not isinstance(value, RunSummary):
            raise InvalidInputError("summary must be a RunSummary or None")
        if name == "telemetry_summary" and not isinstance(value, list):
            raise InvalidInputError("telemetry_summary must be a list")
        if name == "num_requests" and (not isinstance(value, int) or value < 0):
            raise InvalidInputError("num_requests must be a non-negative int")


def run_values(info: RunInfo) -> dict[str, Any]:
    """The ``runs`` columns for ``info`` (everything but the writer and heartbeat columns)."""
    values = column_values({name: getattr(info, name) for name in RUN_FIELDS})
    values["env_hash"] = env_hash(info.environment)
    return values


def column_values(fields: dict[str, Any]) -> dict[str, Any]:
    """RunInfo field values -> column values: the summary as its stored document (schema marked)."""
    if "summary" in fields:
        fields = {**fields, "summary": dump_summary(fields["summary"], stored=True)}
    return fields


def read_summary(run_id: str, doc: Any) -> RunSummary | None:
    """A stored summary document -> the typed summary (older schemas upgraded); StoreError if unreadable."""
    if doc is not None and not isinstance(doc, dict):
        raise StoreError(f"run {run_id}: its stored summary is not a JSON object")
    try:
        return load_summary(doc)
    except SummaryError as exc:
        raise StoreError(f"run {run_id}: its stored summary cannot be read: {exc}") from exc


def run_from_row(row: Row[Any], status: RunStatus) -> RunInfo:
    m = row._mapping
    values = {name: m[name] for name in RUN_FIELDS if name not in ("status", "summary")}
    return RunInfo(**values, status=status, summary=read_summary(str(m["id"]), m["summary"]))


def request_values(run_id: str, r: RequestRecord) -> dict[str, Any]:
    if r.token_source not in TOKEN_SOURCES:
        raise InvalidInputError(
            f"request {r.index}: token_source {r.token_source!r} is not one of {', '.join(TOKEN_SOURCES)}"
        )
    if r.chunk_tokens is not None and len(r.chunk_tokens) != len(r.chunk_times):
        raise InvalidInputError(
            f"request {r.index}: {len(r.chunk_tokens)} chunk_tokens for {len(r.chunk_times)} chunk_times"
        )
    return {
        "run_id": run_id,
        "idx": r.index,
        "stage": r.stage,
        "t_send": r.t_send,
        "t_first": r.t_first,
        "t_end": r.t_end,
        "chunk_times": pack_f64(r.chunk_times),
        "chunk_tokens": None if r.chunk_tokens is None else pack_i32(r.chunk_tokens),
        "input_tokens": r.input_tokens,
        "output_tokens": r.output_tokens,
        "requested_output_tokens": r.requested_output_tokens,
        "token_source": r.token_source,
        "error": r.error,
        "server_timings": r.server_timings,
        "output_chars": r.output_chars,
    }


# The request columns read back, in the order request_from_row unpacks them.
REQUEST_COLUMNS: tuple[str, ...] = (
    "idx", "t_send", "t_first", "t_end", "chunk_times", "chunk_tokens", "input_tokens", "output_tokens",
    "token_source", "requested_output_tokens", "error", "stage", "server_timings", "output_chars",
)


def request_from_row(row: Sequence[Any]) -> RequestRecord:
    (idx, t_send, t_first, t_end, chunk_times, chunk_tokens, input_tokens, output_tokens, token_source,
     requested, error, stage, server_timings, output_chars) = row
    return RequestRecord(
        idx, t_send, t_first, t_end, [] if chunk_times is None else unpack_f64(chunk_times),
        None if chunk_tokens is None else unpack_i32(chunk_tokens),
        input_tokens, output_tokens, token_source, requested, error, stage, server_timings, output_chars,
    )


def telemetry_values(run_id: str, s: TelemetrySample) -> dict[str, Any]:
    if not (math.isfinite(s.t) and math.isfinite(s.value)):
        raise InvalidInputError(
            f"telemetry sample {s.device}/{s.metric} at t={s.t} has a non-finite value {s.value}: "
            "an unavailable reading is left out, not stored as NaN"
        )
    return {"run_id": run_id, "t": s.t, "device": s.device, "metric": s.metric, "value": s.value,
            "source": s.source}


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
    return out


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
# Integer columns are 32-bit on PostgreSQL; counts and indexes in a file must fit.
_Count = Annotated[int, Field(ge=0, le=2**31 - 1)]
_Index = Annotated[int, Field(ge=-(2**31), le=2**31 - 1)]


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
    duration_s: float | None = None
    num_requests: _Count = 0
    finished_at: _When = None


class RequestDoc(_Strict):
    index: _Index
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
        raise InvalidInputError(
            f"malformed gpuledger run export: {_where(tuple(first['loc']))}: {first['msg']}{more}"
        ) from exc
    run = parsed.run
    try:
        summary = load_summary(run.summary)
    except SummaryError as exc:
        raise InvalidInputError(f"malformed gpuledger run export: run.summary: {exc}") from exc
    info = RunInfo(**{name: getattr(run, name) for name in RUN_FIELDS if name != "summary"}, summary=summary)
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
