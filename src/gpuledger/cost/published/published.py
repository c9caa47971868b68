"""Published results as runs: ``gpuledger import-results FILE`` and the shipped public points.

A file of published points (CSV, or the same rows as YAML/JSON) holds one row per point: the GPU and how
many, the model, the workload's input and output lengths, and the output tokens per second of all the
point's GPUs together (or, when the publisher gives input + output, ``total_tokens_per_s``); optionally
the interactivity, concurrency, latencies, precision, framework, a published power per GPU, who published
it and when. ``PublishedRow`` checks every row (unknown columns, bounds, finite numbers, the GPU resolved in
the catalog); ``read_points`` reads a file and returns the runs to store, or raises ONE error naming the
row and the column — nothing is stored until every row is good.

``data/public_results.yaml`` is a dated snapshot of public points anyone can check (each set with its URL,
the day it was read and how the figures were read off the page); ``public_sets`` lists them and
``public_points`` turns one into runs, like a file.
"""

from __future__ import annotations

import csv
import datetime as dt
import functools
import io
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gpuledger.boundeddoc import load_json, load_yaml
from gpuledger.catalog import Catalog, GpuSpec, load_catalog
from gpuledger.cost.pricing.presets import builtin_presets
from gpuledger.errors import InvalidInputError, NotFoundError
from gpuledger.kinds.text.published import Division, PublishedSummary, Scenario, SubmitterRole
from gpuledger.records import RunInfo

MAX_FILE_BYTES = 5_000_000
MAX_ROWS = 10_000
PUBLIC_NAME = "public_results.yaml"
ENGINE = "published"
TEXT = 200
LONG_TEXT = 2_000
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# Keys a YAML/JSON document may give once for all its points.
DOC_DEFAULTS = ("source", "date", "url", "how_read")


class PublishedRow(BaseModel):
    """One published point as a user writes it (a CSV row, a YAML/JSON mapping). Rates are tokens per
    second of all the point's ``gpus`` together; ``date`` is when it was published (or read)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, str_strip_whitespace=True)

    gpu: str = Field(min_length=1, max_length=TEXT)
    gpus: int = Field(ge=1, le=100_000)
    model: str = Field(min_length=1, max_length=TEXT)
    input_len: int | None = Field(default=None, ge=1, le=10_000_000)
    input_len_reason: str | None = Field(default=None, min_length=1, max_length=LONG_TEXT)
    output_len: int = Field(ge=1, le=10_000_000)
    output_tokens_per_s: float | None = Field(default=None, gt=0, le=1e12)
    total_tokens_per_s: float | None = Field(default=None, gt=0, le=1e12)
    tokens_per_s_per_user: float | None = Field(default=None, gt=0, le=1e9)
    concurrency: int | None = Field(default=None, ge=1, le=100_000_000)
    ttft_ms: float | None = Field(default=None, gt=0, le=1e9)
    tpot_ms: float | None = Field(default=None, gt=0, le=1e9)
    precision: str | None = Field(default=None, min_length=1, max_length=64)
    framework: str | None = Field(default=None, min_length=1, max_length=TEXT)
    framework_version: str | None = Field(default=None, min_length=1, max_length=TEXT)
    scenario: Scenario | None = None
    division: Division | None = None
    accuracy_target: str | None = Field(default=None, min_length=1, max_length=TEXT)
    submitter: str | None = Field(default=None, min_length=1, max_length=TEXT)
    submitter_role: SubmitterRole | None = None
    system: str | None = Field(default=None, min_length=1, max_length=TEXT)
    dataset: str | None = Field(default=None, min_length=1, max_length=TEXT)
    power_kw_per_gpu: float | None = Field(default=None, gt=0, le=100)
    source: str | None = Field(default=None, min_length=1, max_length=TEXT)
    date: dt.date | None = None
    label: str | None = Field(default=None, min_length=1, max_length=TEXT)
    url: str | None = Field(default=None, max_length=LONG_TEXT)
    how_read: str | None = Field(default=None, min_length=1, max_length=LONG_TEXT)
    publisher_profile: str | None = Field(default=None, min_length=1, max_length=TEXT)
    published_usd_per_1m_total_tokens: float | None = Field(default=None, gt=0, le=1e9)
    published_usd_per_1m_output_tokens: float | None = Field(default=None, gt=0, le=1e9)

    @field_validator("*", mode="before")
    @classmethod
    def _plain(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("must be a number or a text, not true/false")
        if isinstance(value, str) and _CONTROL.search(value):
            raise ValueError("must not contain control characters (tabs, newlines, escapes)")
        return value

    @field_validator("date", mode="before")
    @classmethod
    def _iso_date(cls, value: Any) -> Any:
        if isinstance(value, int | float):
            raise ValueError("must be a date written YYYY-MM-DD")
        return value

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and (not re.match(r"^https?://\S+$", value)):
            raise ValueError("must be an http(s) address without spaces")
        return value

    @model_validator(mode="after")
    def _a_rate(self) -> PublishedRow:
        out, total = self.output_tokens_per_s, self.total_tokens_per_s
        if self.input_len is None:
            if not self.input_len_reason:
                raise ValueError(
                    "input_len: required (the mean input tokens per request), or input_len_reason saying why "
                    "the publisher does not give it"
                )
            if out is None or total is not None:
                raise ValueError(
                    "output_tokens_per_s: without input_len only a published output rate can be kept (a "
                    "total cannot be split into its output and input tokens)"
                )
        if out is None and total is None:
            raise ValueError(
                "output_tokens_per_s: required: the output tokens per second of all the point's GPUs "
                "together (or total_tokens_per_s, input + output, when that is what was published)"
            )
        if out is not None and total is not None and total <= out:
            raise ValueError(
                f"total_tokens_per_s: {total:g} is not more than output_tokens_per_s {out:g} (a total "
                "counts the input tokens too)"
            )
        return self


COLUMNS: tuple[str, ...] = tuple(PublishedRow.model_fields)
# Columns a point's summary keeps as they are when given (the rates and lengths are set by ``run_of``).
OPTIONAL_FIELDS = (
    "input_len_reason", "tokens_per_s_per_user", "concurrency", "ttft_ms", "tpot_ms", "precision",
    "framework", "framework_version", "scenario", "division", "accuracy_target", "submitter",
    "submitter_role", "system", "dataset", "power_kw_per_gpu", "publisher_profile",
    "published_usd_per_1m_total_tokens", "published_usd_per_1m_output_tokens",
)


def _close(name: str, names: Sequence[str]) -> str:
    import difflib

    near = difflib.get_close_matches(name, list(names), n=1, cutoff=0.5)
    return f" (did you mean {near[0]!r}?)" if near else ""


def _name(name: str) -> str:
    """A column name as it may be echoed: a short identifier, else not shown (a file's bytes)."""
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_ ]{0,63}", name) else "(a name that is not a column)"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:60]}… ({len(text) - 60:,} more characters)"


def _row_error(where: str, row: int, line: int | None, column: str, message: str) -> InvalidInputError:
    at = f"row {row}" + (f" (line {line})" if line is not None else "")
    col = f", column {column}" if column else ""
    return InvalidInputError(
        f"{where}: {at}{col}: {message}; nothing was imported",
        hint="docs/published.md lists the columns; rates are tokens/s of all the point's GPUs together",
    )


def _validation_error(exc: ValidationError, where: str, row: int, line: int | None,
                      raw: Mapping[str, Any]) -> InvalidInputError:
    err = exc.errors()[0]
    loc = [str(p) for p in err["loc"]]
    msg = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        name = loc[0] if loc else "?"
        return _row_error(where, row, line, _name(name), f"not a column{_close(name, COLUMNS)}")
    if not loc and ": " in msg:
        column, msg = msg.split(": ", 1)
        return _row_error(where, row, line, column, msg)
    column = loc[0] if loc else ""
    if err["type"] == "missing":
        return _row_error(where, row, line, column, "required, and missing")
    got = raw.get(column) if column else None
    got_text = f" (got {_shown(got)})" if got is not None and not isinstance(got, dict | list) else ""
    return _row_error(where, row, line, column, f"{msg}{got_text}")


@dataclass(frozen=True, slots=True)
class RawPoint:
    """One row as read from a file: its fields, its row number (1 = the first point) and CSV line."""

    fields: dict[str, Any]
    row: int
    line: int | None = None


def _rates(row: PublishedRow) -> tuple[float, float | None, float | None, list[str], str]:
    """(output, input, total tok/s, the rate keys as published, how the others were derived)."""
    i, o = row.input_len, row.output_len
    out, total = row.output_tokens_per_s, row.total_tokens_per_s
    if i is None:  # the row model allows this with a published output rate only
        assert out is not None
        return out, None, None, ["output_tokens_per_s"], (
            f"no input or total rate: the input length is not published ({row.input_len_reason})"
        )
    if out is not None and total is not None:
        return out, total - out, total, ["output_tokens_per_s", "total_tokens_per_s"], (
            "input tok/s = total tok/s - output tok/s"
        )
    if out is not None:
        inp = out * i / o
        return out, inp, out + inp, ["output_tokens_per_s"], (
            f"input tok/s = output tok/s x input_len {i} / output_len {o}; total = input + output"
        )
    assert total is not None  # the row model requires one of them
    out = total * o / (i + o)
    return out, total - out, total, ["total_tokens_per_s"], (
        f"output tok/s = total tok/s x output_len {o} / (input_len {i} + output_len {o}), i.e. every "
        "request's tokens split as its lengths; input = total - output"
    )


def _gpu(catalog: Catalog, name: str, where: str, point: RawPoint) -> GpuSpec:
    spec = catalog.find(name)
    if spec is not None:
        return spec
    near = catalog.suggestions(name)
    hint = f"did you mean: {', '.join(near)}?" if near else "`gpuledger gpus` lists the catalog"
    raise _row_error(where, point.row, point.line, "gpu", f"{name!r} is not in the GPU catalog; {hint}")


def run_of(row: PublishedRow, spec: GpuSpec, source_default: str) -> RunInfo:
    """The stored run of one checked row (on the catalog GPU ``spec``)."""
    out, inp, total, published, how = _rates(row)
    source = row.source or source_default
    summary = PublishedSummary(
        window_s=1.0,
        source=source,
        date=row.date.isoformat() if row.date is not None else None,
        url=row.url,
        how_read=row.how_read,
        gpu=spec.key,
        gpu_name=spec.name,
        gpus=row.gpus,
        output_len=row.output_len,
        output_tokens_per_s=out,
        published_rates=published,
        derivation=how,
        **{k: v for k, v in (("input_len", row.input_len), ("input_tokens_per_s", inp),
                             ("total_tokens_per_s", total)) if v is not None},
        **{k: getattr(row, k) for k in OPTIONAL_FIELDS if getattr(row, k) is not None},
    )
    workload: dict[str, Any] = {"input_len": row.input_len, "output_len": row.output_len}
    if row.dataset is not None:
        workload["dataset"] = row.dataset
    if row.tokens_per_s_per_user is not None:
        workload["tokens_per_s_per_user"] = row.tokens_per_s_per_user
    if row.precision is not None:
        workload["precision"] = row.precision
    label = row.label or (
        f"{spec.name} x{row.gpus}, {row.model} {row.input_len or '?'}/{row.output_len}"
        + (f" at {row.tokens_per_s_per_user:g} tok/s/user" if row.tokens_per_s_per_user else "")
    )
    return RunInfo(
        id="",
        label=label,
        status="complete",
        engine=ENGINE,
        model=row.model,
        unit="token",
        workload=workload,
        server={"framework": row.framework} if row.framework else {},
        summary=summary,
    )


def runs_of(points: Sequence[RawPoint], where: str, source_default: str,
            catalog: Catalog | None = None) -> list[RunInfo]:
    """Every point checked (the first problem is ONE error naming its row and column), then turned into
    the runs to store."""
    if not points:
        raise InvalidInputError(f"{where}: no points to import")
    if len(points) > MAX_ROWS:
        raise InvalidInputError(f"{where}: {len(points):,} points; at most {MAX_ROWS:,} in one file")
    cat = catalog if catalog is not None else load_catalog()
    presets: set[str] | None = None
    out = []
    for point in points:
        try:
            row = PublishedRow.model_validate(point.fields)
        except ValidationError as exc:
            raise _validation_error(exc, where, point.row, point.line, point.fields) from None
        spec = _gpu(cat, row.gpu, where, point)
        if row.publisher_profile is not None:
            presets = presets if presets is not None else set(builtin_presets(cat))
            if row.publisher_profile not in presets:
                raise _row_error(where, point.row, point.line, "publisher_profile",
                                 f"{row.publisher_profile!r} is not a built-in preset"
                                 f"{_close(row.publisher_profile, sorted(presets))}")
        out.append(run_of(row, spec, source_default))
    return out


# ---- files ------------------------------------------------------------------------------------------
def _text(path: Path) -> str:
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise NotFoundError(f"no such file: {path}") from None
    except IsADirectoryError:
        raise InvalidInputError(f"{path} is a directory, not a file of published points") from None
    except OSError as exc:
        raise InvalidInputError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise InvalidInputError(
            f"{path}: larger than {MAX_FILE_BYTES:,} bytes; not a file of published points"
        )
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidInputError(f"{path}: not UTF-8 text (byte {exc.start:,} cannot be decoded)") from None
    if "\x00" in text:
        raise InvalidInputError(f"{path}: contains NUL bytes (a binary file?)")
    return text


def _csv_points(text: str, where: str) -> list[RawPoint]:
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, None)
        if header is None:
            raise InvalidInputError(f"{where}: empty file (a CSV needs a header row naming its columns)")
        names = [h.strip() for h in header]
        for i, name in enumerate(names):
            if name not in COLUMNS:
                raise InvalidInputError(
                    f"{where}: header (line 1), column {i + 1} {_name(name)!r}: not a column"
                    f"{_close(name, COLUMNS)}",
                    hint=f"columns: {', '.join(COLUMNS)}",
                )
            if names.index(name) != i:
                raise InvalidInputError(f"{where}: header (line 1): column {name!r} is given twice")
        points: list[RawPoint] = []
        for cells in reader:
            line = reader.line_num
            if not any(c.strip() for c in cells):
                continue
            row = len(points) + 1
            if len(cells) > len(names):
                raise _row_error(
                    where, row, line, "", f"{len(cells)} cells but the header names {len(names)} columns"
                )
            fields = {n: c for n, c in zip(names, cells, strict=False) if c.strip() != ""}
            points.append(RawPoint(fields, row, line))
            if len(points) > MAX_ROWS:
                break
    except csv.Error as exc:
        raise InvalidInputError(f"{where}: not valid CSV (line {reader.line_num}): {exc}") from None
    return points


def _document_points(doc: Any, where: str) -> list[RawPoint]:
    defaults: dict[str, Any] = {}
    if isinstance(doc, dict):
        for key in doc:
            if key not in ("points", *DOC_DEFAULTS):
                raise InvalidInputError(
                    f"{where}: top-level key {_name(str(key))!r} is not one of points, "
                    f"{', '.join(DOC_DEFAULTS)}"
                )
        defaults = {k: doc[k] for k in DOC_DEFAULTS if k in doc}
        doc = doc.get("points")
    if not isinstance(doc, list):
        raise InvalidInputError(
            f"{where}: expected a list of points (or a mapping with `points:`), got {type(doc).__name__}"
        )
    if len(doc) > MAX_ROWS:
        raise InvalidInputError(f"{where}: {len(doc):,} points; at most {MAX_ROWS:,} in one file")
    points = []
    for i, item in enumerate(doc, start=1):
        if not isinstance(item, dict):
            raise _row_error(
                where, i, None, "", f"expected a mapping of column -> value, got {type(item).__name__}"
            )
        points.append(RawPoint({**defaults, **{str(k): v for k, v in item.items()}}, i))
    return points


def read_points(path: Path, catalog: Catalog | None = None) -> list[RunInfo]:
    """The runs of a file of published points (``.csv``, ``.yaml``/``.yml`` or ``.json``)."""
    where = str(path)
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".yaml", ".yml", ".json"):
        raise InvalidInputError(
            f"{where}: expected a .csv, .yaml/.yml or .json file of published points",
            hint="`gpuledger public` lists the shipped sets, imported by name",
        )
    text = _text(path)
    if suffix == ".csv":
        points = _csv_points(text, where)
    else:  # nesting and aliases bounded (boundeddoc)
        doc = load_json(text, where) if suffix == ".json" else load_yaml(text, where)
        points = _document_points(doc, where)
    return runs_of(points, where, f"the file {path.name}", catalog)


# ---- the shipped public points ----------------------------------------------------------------------
class PublicSet(BaseModel):
    """A set of public points from one page or results table: where, when it was published (or read), how
    the figures were read, what was looked for and is not there (``about``), and the columns every point
    shares (``defaults``; a point's own value wins)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    title: str = Field(min_length=1, max_length=LONG_TEXT)
    source: str = Field(min_length=1, max_length=TEXT)
    url: str = Field(pattern=r"^https://\S+$")
    date: dt.date
    how_read: str = Field(min_length=1, max_length=LONG_TEXT)
    about: str | None = Field(default=None, min_length=1, max_length=LONG_TEXT)
    defaults: dict[str, Any] = Field(default_factory=dict)
    points: list[dict[str, Any]] = Field(min_length=1)


class PublicFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: Literal["gpuledger-public-results"]
    version: Literal[1]
    snapshot: dt.date
    about: str
    sets: dict[str, PublicSet]


@functools.lru_cache(maxsize=1)
def public_file() -> PublicFile:
    text = resources.files("gpuledger").joinpath("data", PUBLIC_NAME).read_text(encoding="utf-8")
    try:
        return PublicFile.model_validate(yaml.safe_load(text))
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise InvalidInputError(f"built-in {PUBLIC_NAME}: {where}: {err['msg']}") from exc


def public_sets() -> dict[str, PublicSet]:
    return dict(public_file().sets)


def public_points(name: str, catalog: Catalog | None = None) -> list[RunInfo]:
    """The runs of the shipped set ``name`` (``gpuledger public`` lists them)."""
    sets = public_sets()
    found = sets.get(name)
    if found is None:
        raise NotFoundError(
            f"no public set {name!r} (and no such file)",
            hint=f"`gpuledger public` lists them{_close(name, sorted(sets))}",
        )
    shared = {"source": found.source, "url": found.url, "date": found.date, "how_read": found.how_read,
              **found.defaults}
    points = [RawPoint({**shared, **p}, i) for i, p in enumerate(found.points, start=1)]
    return runs_of(points, f"built-in {PUBLIC_NAME}: {name}", found.source, catalog)
