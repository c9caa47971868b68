"""Conversions between records and table rows, and the checks that keep unstorable values out.

The export document (JSON in and out) is ``store/document.py``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Row

from gpuledger.errors import InvalidInputError
from gpuledger.records import (
    RUN_STATUSES,
    TOKEN_SOURCES,
    BenchSpec,
    DeviceWindow,
    RequestRecord,
    RunInfo,
    RunStatus,
    RunSummary,
    SpecError,
    SummaryError,
    TelemetryRecordError,
    TelemetrySample,
    dump_spec,
    dump_summary,
    dump_telemetry_summary,
    load_spec,
    load_summary,
    load_telemetry_summary,
)
from gpuledger.records.environment import (
    Environment,
    EnvironmentRecordError,
    dump_environment,
    load_environment,
)
from gpuledger.store.codec import json_dumps, pack_f64, pack_i32, unpack_f64, unpack_i32

RUN_FIELDS: tuple[str, ...] = tuple(RunInfo.__dataclass_fields__)
_RUN_DATETIMES = ("created_at", "started_at", "finished_at")
# RunInfo fields held as JSON objects (the config and the summary are typed models, stored as their JSON
# documents).
_RUN_DICTS = ("workload", "server", "client")
_ROW_DICTS = (*_RUN_DICTS, "environment", "config", "summary")
_RUN_TEXTS = ("label", "engine", "model", "base_url", "unit")
_RUN_TEXT_LENGTHS = {"unit": 32}  # the VARCHAR columns (models.py); PostgreSQL enforces the length
_TELEMETRY_TEXT_LENGTH = 128



def env_hash(environment: Environment | dict[str, Any]) -> str | None:
    """The environment fingerprint's ``hash`` (a string), if it has one."""
    value = load_environment(environment).hash
    return value[:128] if isinstance(value, str) else None


# Every integer column is 32-bit on PostgreSQL; the store keeps SQLite to the same range, so what one
# backend holds the other (and ``import``) takes too. Counts are never negative.
INT_MAX = 2**31 - 1
_COUNT_FIELDS = ("input_tokens", "output_tokens", "requested_output_tokens")


def _text_problem(value: str, max_len: int | None = None) -> str | None:
    """Why ``value`` cannot be stored as text on both backends (in a column of ``max_len``), or None."""
    if "\x00" in value:
        return "contains a NUL character"
    if max_len is not None and len(value) > max_len:
        return f"is {len(value)} characters long, more than the {max_len} the store keeps"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid Unicode (a lone surrogate)"
    return None


def int_problem(value: Any, *, lowest: int = 0) -> str | None:
    """Why ``value`` is not an integer in ``lowest`` … ``INT_MAX``, or None."""
    if not isinstance(value, int) or isinstance(value, bool):
        return f"is {type(value).__name__} {value!r}, not an integer"
    if not lowest <= value <= INT_MAX:
        return f"{value} is outside {lowest} … {INT_MAX} (the store keeps it as a 32-bit integer)"
    return None


def _time_problem(value: Any) -> str | None:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return f"is {type(value).__name__} {value!r}, not a number"
    return None if math.isfinite(value) else f"is {value}, not a finite number"


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
        if name == "environment" and not isinstance(value, Environment | dict):
            raise InvalidInputError("environment must be an Environment (or its document)")
        if name == "summary" and value is not None and not isinstance(value, RunSummary):
            raise InvalidInputError("summary must be a RunSummary or None")
        if name == "config" and not isinstance(value, BenchSpec):
            raise InvalidInputError("config must be a BenchSpec")
        if name == "telemetry_summary" and not isinstance(value, list):
            raise InvalidInputError("telemetry_summary must be a list of DeviceWindow (or their documents)")
        if name == "num_requests" and int_problem(value):
            raise InvalidInputError(f"num_requests {int_problem(value)}")
        if name == "duration_s" and value is not None and (_time_problem(value) or value < 0):
            raise InvalidInputError(f"duration_s {_time_problem(value) or f'{value} is negative'}")
        if name in _RUN_TEXTS and value is not None:
            why = (
                _text_problem(value, _RUN_TEXT_LENGTHS.get(name)) if isinstance(value, str)
                else f"is {type(value).__name__}, not text"
            )
            if why:
                raise InvalidInputError(f"{name} {why}")


def run_values(info: RunInfo) -> dict[str, Any]:
    """The ``runs`` columns for ``info`` (everything but the writer and heartbeat columns)."""
    values = column_values({name: getattr(info, name) for name in RUN_FIELDS})
    values["env_hash"] = env_hash(info.environment)
    return values


def column_values(fields: dict[str, Any]) -> dict[str, Any]:
    """RunInfo field values -> column values: the config and the summary as their stored documents
    (schema marked), the environment and the telemetry summary as their models dump them (a document given
    is read through its model first: InvalidInputError naming what it cannot read)."""
    if "summary" in fields:
        fields = {**fields, "summary": dump_summary(fields["summary"], stored=True)}
    if "config" in fields:
        fields = {**fields, "config": dump_spec(fields["config"], stored=True)}
    if "environment" in fields:
        try:
            env = load_environment(fields["environment"])
        except EnvironmentRecordError as exc:
            raise InvalidInputError(str(exc)) from exc
        fields = {**fields, "environment": dump_environment(env)}
    if "telemetry_summary" in fields:
        try:
            windows = load_telemetry_summary(fields["telemetry_summary"])
        except TelemetryRecordError as exc:
            raise InvalidInputError(str(exc)) from exc
        fields = {**fields, "telemetry_summary": dump_telemetry_summary(windows)}
    return fields


def read_summary(doc: Any) -> RunSummary | None:
    """A stored summary document -> the typed summary (older schemas upgraded); ValueError (the store's
    "unreadable value") naming what is wrong."""
    if doc is not None and not isinstance(doc, dict):
        raise ValueError(f"column summary holds {type(doc).__name__}, not a JSON object")
    try:
        return load_summary(doc)
    except SummaryError as exc:
        raise ValueError(f"column summary: {exc}") from exc


def read_config(doc: Any, engine: Any, workload: Any, summary: RunSummary | None) -> BenchSpec:
    """A stored config document -> the typed spec (older schemas upgraded, with the run's workload and
    summary); ValueError (the store's "unreadable value") naming what is wrong."""
    if not isinstance(doc, dict):
        raise ValueError(f"column config holds {type(doc).__name__}, not a JSON object")
    try:
        return load_spec(doc, engine if isinstance(engine, str) else None,
                         workload=workload if isinstance(workload, dict) else None, summary=summary)
    except SpecError as exc:
        raise ValueError(f"column config: {exc}") from exc


def read_telemetry(doc: Any) -> list[DeviceWindow]:
    """A stored telemetry summary -> one typed window per device (older documents upgraded); ValueError
    (the store's "unreadable value") naming the entry and the field that cannot be read."""
    try:
        return load_telemetry_summary(doc)
    except TelemetryRecordError as exc:
        raise ValueError(f"column {exc}") from exc


def run_row_problem(m: Mapping[Any, Any]) -> str | None:
    """Why a ``runs`` row read back cannot be a RunInfo (a value of the wrong type: a corrupt or
    hand-edited SQLite file), or None."""
    for name in RUN_FIELDS:
        value = m[name]
        if name in _ROW_DICTS:
            ok = isinstance(value, dict)
        elif name == "telemetry_summary":
            ok = isinstance(value, list)
        elif name in ("id", "label", "engine", "model", "unit"):
            ok = isinstance(value, str)
        elif name == "base_url":
            ok = value is None or isinstance(value, str)
        elif name == "status":
            ok = value in RUN_STATUSES
        elif name == "created_at":
            ok = isinstance(value, datetime)
        elif name in _RUN_DATETIMES:
            ok = value is None or isinstance(value, datetime)
        elif name == "duration_s":
            ok = value is None or (isinstance(value, int | float) and not isinstance(value, bool))
        elif name == "num_requests":
            ok = isinstance(value, int) and not isinstance(value, bool)
        else:
            ok = True
        if not ok:
            return f"column {name} holds {type(value).__name__} {_short(value)}"
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def run_from_row(row: Row[Any], status: RunStatus) -> RunInfo:
    """The run in a ``runs`` row; ValueError saying which column is unreadable."""
    m = row._mapping
    problem = run_row_problem(m)
    if problem:
        raise ValueError(problem)
    skip = ("status", "summary", "config", "telemetry_summary")
    values = {name: m[name] for name in RUN_FIELDS if name not in skip}
    summary = read_summary(m["summary"])
    config = read_config(m["config"], m["engine"], m["workload"], summary)
    return RunInfo(**values, status=status, summary=summary, config=config,
                   telemetry_summary=read_telemetry(m["telemetry_summary"]))


def request_problems(r: RequestRecord) -> list[tuple[str, str]]:
    """``(field, why)`` for every value of ``r`` the store cannot keep as it is (empty: storable).

    Counts must be integers in 0 … ``INT_MAX``, times finite numbers, texts NUL-free Unicode,
    ``server_timings`` JSON; ``chunk_tokens`` must line up with ``chunk_times``."""
    return _checked(r)[0]


def _checked(r: RequestRecord) -> tuple[list[tuple[str, str]], bytes, bytes | None]:
    """``request_problems``, and the packed ``chunk_times`` and ``chunk_tokens`` (when they pack)."""
    problems: list[tuple[str, str]] = []
    times_blob, tokens_blob = b"", None
    for name, why in (("index", int_problem(r.index)), ("t_send", _time_problem(r.t_send))):
        if why:
            problems.append((name, why))
    for name in ("t_first", "t_end"):
        value = getattr(r, name)
        why = None if value is None else _time_problem(value)
        if why:
            problems.append((name, why))
    for name in _COUNT_FIELDS:
        value = getattr(r, name)
        why = None if value is None else int_problem(value)
        if why:
            problems.append((name, why))
    why = int_problem(r.output_chars)
    if why:
        problems.append(("output_chars", why))
    if r.token_source not in TOKEN_SOURCES:
        problems.append(("token_source", f"{r.token_source!r} is not one of {', '.join(TOKEN_SOURCES)}"))
    try:
        times_blob = pack_f64(r.chunk_times)
        # One sum finds a NaN or an infinity (chunk times are seconds: the sum itself cannot overflow).
        if not math.isfinite(sum(r.chunk_times)):
            problems.append(("chunk_times", "holds a value that is not a finite number"))
    except TypeError as exc:
        problems.append(("chunk_times", f"is not a list of numbers ({exc})"))
    if r.chunk_tokens is not None:
        if len(r.chunk_tokens) != len(r.chunk_times):
            problems.append(
                ("chunk_tokens", f"has {len(r.chunk_tokens)} values for {len(r.chunk_times)} chunk_times")
            )
        else:
            try:
                tokens_blob = pack_i32(r.chunk_tokens)
                if r.chunk_tokens and min(r.chunk_tokens) < 0:
                    problems.append(("chunk_tokens", f"holds a negative count ({min(r.chunk_tokens)})"))
            except (OverflowError, TypeError) as exc:
                why = f"holds a value that is not a count in 0 … {INT_MAX} ({exc})"
                problems.append(("chunk_tokens", why))
    for name in ("stage", "error"):
        value = getattr(r, name)
        if value is None and name == "error":
            continue
        why = f"is {type(value).__name__}, not text" if not isinstance(value, str) else _text_problem(value)
        if why:
            problems.append((name, why))
    if r.server_timings is not None:
        if not isinstance(r.server_timings, dict):
            problems.append(("server_timings", f"is {type(r.server_timings).__name__}, not an object"))
        else:
            try:
                json_dumps(r.server_timings)
            except TypeError as exc:  # orjson.JSONEncodeError: a value JSON cannot hold
                problems.append(("server_timings", f"cannot be stored as JSON ({exc})"))
    return problems, times_blob, tokens_blob


def request_values(run_id: str, r: RequestRecord) -> dict[str, Any]:
    """The ``requests`` columns for ``r``; InvalidInputError naming the request and the first value
    the store cannot keep (see ``request_problems``)."""
    problems, times_blob, tokens_blob = _checked(r)
    if problems:
        name, why = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise InvalidInputError(f"request {r.index!r}: {name} {why}{more}")
    return {
        "run_id": run_id,
        "idx": r.index,
        "stage": r.stage,
        "t_send": r.t_send,
        "t_first": r.t_first,
        "t_end": r.t_end,
        "chunk_times": times_blob,
        "chunk_tokens": tokens_blob,
        "input_tokens": r.input_tokens,
        "output_tokens": r.output_tokens,
        "requested_output_tokens": r.requested_output_tokens,
        "token_source": r.token_source,
        "error": r.error,
        "server_timings": r.server_timings,
        "output_chars": r.output_chars,
    }


def _clean_text(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text.replace("\x00", "\ufffd").encode("utf-8", "replace").decode("utf-8")


def storable(r: RequestRecord) -> tuple[RequestRecord, list[tuple[str, str]]]:
    """A copy of ``r`` the store accepts, and what had to change: every value ``request_problems``
    names is dropped (a count or time becomes None, ``chunk_tokens`` None, ``chunk_times`` empty,
    ``output_chars`` 0, ``server_timings`` None, an unknown ``token_source`` ``client_count``) or, for
    text, cleaned (NUL and lone surrogates replaced). The error text is left to the caller.

    InvalidInputError when ``index`` or ``t_send`` is bad: without them there is no request to keep."""
    problems = request_problems(r)
    fields = {name for name, _ in problems}
    if fields & {"index", "t_send"}:
        name, why = next(p for p in problems if p[0] in ("index", "t_send"))
        raise InvalidInputError(f"request {r.index!r} cannot be stored: {name} {why}")
    chunks_bad = "chunk_times" in fields
    fixed = RequestRecord(
        index=r.index,
        t_send=r.t_send,
        t_first=None if "t_first" in fields or chunks_bad else r.t_first,
        t_end=None if "t_end" in fields else r.t_end,
        chunk_times=[] if chunks_bad else r.chunk_times,
        chunk_tokens=None if "chunk_tokens" in fields or chunks_bad else r.chunk_tokens,
        input_tokens=None if "input_tokens" in fields else r.input_tokens,
        output_tokens=None if "output_tokens" in fields else r.output_tokens,
        token_source="client_count" if "token_source" in fields else r.token_source,
        requested_output_tokens=None if "requested_output_tokens" in fields else r.requested_output_tokens,
        error=None if r.error is None else _clean_text(r.error),
        stage=_clean_text(r.stage) if "stage" in fields else r.stage,
        server_timings=None if "server_timings" in fields else r.server_timings,
        output_chars=0 if "output_chars" in fields else r.output_chars,
    )
    return fixed, problems


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


def telemetry_problem(s: TelemetrySample) -> str | None:
    """Why the store cannot keep sample ``s`` (a non-finite number, a name it cannot hold), or None."""
    if _time_problem(s.t) or _time_problem(s.value):
        return (
            f"telemetry sample {s.device}/{s.metric} at t={s.t} has a non-finite value {s.value}: "
            "an unavailable reading is left out, not stored as NaN"
        )
    for name in ("device", "metric", "source"):
        value = getattr(s, name)
        why = (
            _text_problem(value, _TELEMETRY_TEXT_LENGTH) if isinstance(value, str)
            else f"is {type(value).__name__}, not text"
        )
        if why:
            return f"telemetry sample at t={s.t}: {name} {why}"
    return None


def telemetry_values(run_id: str, s: TelemetrySample) -> dict[str, Any]:
    problem = telemetry_problem(s)
    if problem:
        raise InvalidInputError(problem)
    return {"run_id": run_id, "t": s.t, "device": s.device, "metric": s.metric, "value": s.value,
            "source": s.source}
