"""A benchmark matrix plan (``gpuledger matrix PLAN.yaml``): servers × loads × datasets, crossed into cells.

    bench:                      # the common bench settings: bench's flags, with underscores
      dataset: random
      input_len: 512
      output_len: 128
      num_requests: 200
    matrix:                     # the axes: every combination is a cell
      target:                   # the servers, each placed next to its node (Ray resources / labels)
        - {name: h100, base_url: "http://h100-node:8000", engine: openai, model: llama-8b,
           resources: {h100_node: 1}, profile: h100-sxm-own}
        - {name: mi300x, base_url: "http://mi300x-node:8000", engine: openai, model: llama-8b,
           labels: {gpu: mi300x}}
      concurrency: [1, 8, 32]   # any bench setting as a list of values
    exclude:
      - {target: mi300x, concurrency: 1}
    repeat: 3                   # each cell run 3 times: one group of repeats per cell
    profile: cpu-cloud          # the cost profile of a target that names none (default: the run's hardware)
    slurm: {partition: gpu}     # where the cells run on Slurm (--backend slurm) or Kubernetes (--emit
    kubernetes: {image: ...}    # k8s): bench.matrix_sections

The plan is validated whole before anything runs (pydantic, unknown keys refused with the closest name):
every cell's bench spec is built here, so a bad value is refused naming the cell. A cell's key is its axis
values in the plan's order, ``target=h100,concurrency=8``; with the matrix id and the repeat it is the cell's
natural key in the store (``store.matrix``). A cell's load level is its key without the target (the
cheapest target per load level is read across it). The plan's digest (what ``--resume`` compares) leaves
out the ``slurm:`` and ``kubernetes:`` sections: they say where the cells run, not what they measure.
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
import json
import math
import re
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gpuledger.bench.matrix_sections import KubernetesSection, SlurmSection
from gpuledger.bench.metrics import parse_slo
from gpuledger.bench.workers import check_workers
from gpuledger.catalog.catalog import read_yaml_mapping
from gpuledger.engines import engine_kind
from gpuledger.errors import GpuledgerError, InvalidInputError, NotFoundError
from gpuledger.kinds.text.options import server_spec
from gpuledger.kinds.text.spec import ServerSpec
from gpuledger.records.spec import FILE_DATASETS
from gpuledger.records.specbase import SecretUrl
from gpuledger.store.matrix import MAX_KEY_CHARS
from gpuledger.telemetry.remotes import check_remote_urls
from gpuledger.urls import redact_url

MAX_REPEAT = 1000
MAX_CELLS = 10_000
TARGET_AXIS = "target"
_STRICT = ConfigDict(extra="forbid", strict=True)


class BenchSettings(BaseModel):
    """The bench settings a plan may set (``gpuledger bench``'s flags, with underscores)."""

    model_config = _STRICT

    endpoint: str | None = None
    dataset: str | None = None
    dataset_path: str | None = None
    input_len: int | None = None
    output_len: int | None = None
    range_ratio: float | None = None
    concurrency: int | None = None
    rate: float | None = None
    sweep: list[int] | None = None
    num_requests: int | None = None
    duration: float | None = None
    warmup: int | None = None
    seed: int | None = None
    slo: dict[str, float] | str | None = None
    label: str | None = None
    telemetry: bool | None = None
    telemetry_interval: float | None = None
    server_metrics: bool | None = None
    server_metrics_interval: float | None = None
    request_timeout: float | None = None
    api_key_env: str | None = None
    workers: int | None = None


SETTINGS: tuple[str, ...] = tuple(BenchSettings.model_fields)
# The plan's sections that say where the cells run (not part of the plan's digest).
BACKEND_SECTIONS = ("slurm", "kubernetes")
# The plan's names for the settings that ``server_document`` names otherwise.
_DOCUMENT_NAMES = {"duration": "duration_s", "telemetry_interval": "telemetry_interval_s",
                   "server_metrics_interval": "server_metrics_interval_s",
                   "request_timeout": "request_timeout_s"}


class Target(BaseModel):
    """One server of the matrix: where it is, what it serves, where its cells run and how it is priced."""

    model_config = _STRICT

    name: str | None = None
    base_url: SecretUrl  # whole here (the cells use it), redacted in every dump: the stored plan, the digest
    engine: str = "openai"
    model: str
    endpoint: str | None = None
    api_key_env: str | None = None
    telemetry_from: list[SecretUrl] = Field(default_factory=list)
    resources: dict[str, float] = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict)
    profile: str | None = None

    @property
    def key_name(self) -> str:
        return self.name or self.model


class Axes(BaseModel):
    """The matrix block: the targets, and any bench setting as a list of values (``BenchSettings``' names)."""

    model_config = _STRICT

    target: list[Target] = Field(min_length=1)
    endpoint: list[str] | None = None
    dataset: list[str] | None = None
    dataset_path: list[str] | None = None
    input_len: list[int] | None = None
    output_len: list[int] | None = None
    range_ratio: list[float] | None = None
    concurrency: list[int] | None = None
    rate: list[float] | None = None
    sweep: list[list[int]] | None = None
    num_requests: list[int] | None = None
    duration: list[float] | None = None
    warmup: list[int] | None = None
    seed: list[int] | None = None
    slo: list[dict[str, float] | str] | None = None
    label: list[str] | None = None
    telemetry: list[bool] | None = None
    telemetry_interval: list[float] | None = None
    server_metrics: list[bool] | None = None
    server_metrics_interval: list[float] | None = None
    request_timeout: list[float] | None = None
    api_key_env: list[str] | None = None
    workers: list[int] | None = None


class MatrixPlan(BaseModel):
    """The whole plan file."""

    model_config = _STRICT

    name: str | None = None
    bench: BenchSettings = Field(default_factory=BenchSettings)
    matrix: Axes
    exclude: list[dict[str, Any]] = Field(default_factory=list)
    repeat: int = Field(default=1, ge=1, le=MAX_REPEAT)
    profile: str | None = None
    slurm: SlurmSection | None = None
    kubernetes: KubernetesSection | None = None

    @model_validator(mode="after")
    def _axes(self) -> Self:
        names = [t.key_name for t in self.targets]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"matrix.target: two targets are called {twice[0]!r}: give each its own name:")
        for section in BACKEND_SECTIONS:
            block = getattr(self, section)
            for name in block.targets if block is not None else ():
                if name not in names:
                    near = difflib.get_close_matches(name, names, n=1, cutoff=0.5)
                    close = f" (did you mean {near[0]!r}?)" if near else ""
                    raise ValueError(f"{section}.targets: {name[:64]!r} is not a target of the matrix{close}")
        for axis, values in self.axes().items():
            if not values:
                raise ValueError(f"matrix.{axis}: an axis needs at least one value")
            keys = [key_value(v) for v in values]
            if len(set(keys)) != len(keys):
                raise ValueError(f"matrix.{axis}: a value is given twice")
            if axis != TARGET_AXIS and getattr(self.bench, axis) is not None:
                raise ValueError(f"{axis} is both a bench setting and an axis of the matrix: give it once")
        return self

    @property
    def targets(self) -> list[Target]:
        return list(self.matrix.target)

    def axes(self, order: Sequence[str] = ()) -> dict[str, list[Any]]:
        """The axes, the targets first (by name), then in ``order`` (the plan file's), then the rest."""
        out: dict[str, list[Any]] = {TARGET_AXIS: [t.key_name for t in self.targets]}
        given = self.matrix.model_fields_set
        names = [*order, *type(self.matrix).model_fields]
        for name in dict.fromkeys(names):
            values = getattr(self.matrix, name, None)
            if name != TARGET_AXIS and name in given and values is not None:
                out[name] = list(values)
        return out


# -- cells -----------------------------------------------------------------------------------------------


def key_value(value: Any) -> str:
    """An axis value as it is written in a cell key (``8``, ``random``, ``1+4+16``, ``ttft_ms:500``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "+".join(key_value(v) for v in value)
    if isinstance(value, dict):
        return ";".join(f"{k}:{key_value(v)}" for k, v in sorted(value.items()))
    return quote(str(value), safe="/:._-+@ ")


@dataclass(frozen=True)
class Cell:
    """One combination of the axes: its key, the axis values, its target and the bench settings it runs."""

    key: str
    values: dict[str, Any]
    target: Target
    settings: dict[str, Any]
    workers: int = 1
    profile: str | None = None
    # The plan's datasets are an axis: the settings of one kind of dataset (dataset_path for the files,
    # input_len / range_ratio for random) apply to the cells of that kind only.
    datasets_vary: bool = False

    @property
    def load_level(self) -> str:
        """The key without the target: the load every target of the matrix is measured at."""
        rest = [f"{k}={key_value(v)}" for k, v in self.values.items() if k != TARGET_AXIS]
        return ",".join(rest) or "(one load)"

    def spec(self, label: str) -> ServerSpec:
        """The cell's bench spec (``label`` unless the plan gives one); ``UsageError`` for a bad value."""
        s = self.settings
        t = self.target
        args: dict[str, Any] = {_DOCUMENT_NAMES.get(k, k): v for k, v in s.items()
                                if k not in ("workers", "slo")}
        if s.get("sweep") is not None:
            args["sweep"] = tuple(s["sweep"])
        if s.get("dataset_path") is not None:
            args["dataset_path"] = Path(s["dataset_path"])
        slo = s.get("slo")
        args["slo"] = parse_slo(slo) if isinstance(slo, str) else dict(slo or {})
        args.setdefault("warmup", 1)  # gpuledger bench's default
        if self.datasets_vary:
            dataset = s.get("dataset") or "builtin"
            if dataset not in FILE_DATASETS:
                args.pop("dataset_path", None)
            if dataset != "random":
                args.pop("input_len", None)
                args.pop("range_ratio", None)
        args["label"] = s.get("label") or label
        if t.endpoint is not None:
            args["endpoint"] = t.endpoint
        if t.api_key_env is not None:
            args["api_key_env"] = t.api_key_env
        return server_spec(t.engine, base_url=t.base_url, model=t.model, **args)

    def params(self) -> dict[str, Any]:
        """What the store keeps of the cell (``matrix_cells.params``): no credentials."""
        t = self.target
        return {"values": self.values, "load_level": self.load_level, "target": {
            "name": t.key_name, "engine": t.engine, "model": t.model, "base_url": redact_url(t.base_url),
            "profile": self.profile}}


@dataclass(frozen=True)
class LoadedPlan:
    """A validated plan: the model, its cells (exclusions applied), the digest ``--resume`` compares."""

    plan: MatrixPlan
    cells: list[Cell]
    digest: str
    where: str
    excluded: int = 0
    document: dict[str, Any] = field(default_factory=dict)

    @property
    def repeat(self) -> int:
        return self.plan.repeat


def _fields_at(loc: Sequence[Any]) -> list[str]:
    """The keys allowed where a validation error points (for the closest-name hint): the model the path
    leads to, through nested models, lists and mappings of them."""
    model: type[BaseModel] = MatrixPlan
    parts = list(loc[:-1])
    while parts:
        part = parts.pop(0)
        field = model.model_fields.get(str(part))
        if field is None:
            return []
        inner = _model_in(field.annotation)
        if inner is None:
            return []
        model, keyed = inner
        if keyed and parts:  # a list index or a mapping's key: the model is its value
            parts.pop(0)
    return list(model.model_fields)


def _model_in(annotation: Any) -> tuple[type[BaseModel], bool] | None:
    """The model a field holds (itself, optional, or as the items of a list / values of a dict) and
    whether it is held in a list or dict."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            keyed = typing.get_origin(annotation) in (list, dict)
            return found[0], found[1] or keyed
    return None


def _problem(exc: ValidationError, where: str) -> InvalidInputError:
    err = exc.errors()[0]
    loc = [p for p in err["loc"]]
    at = ".".join(str(p) for p in loc)
    msg = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        name = str(loc[-1]) if loc else "?"
        near = difflib.get_close_matches(name, _fields_at(loc), n=1, cutoff=0.5)
        close = f" (did you mean {near[0]!r}?)" if near else ""
        shown = name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,63}", name) else "(a key that is not a name)"
        return InvalidInputError(f"{where}: {'.'.join(str(p) for p in loc[:-1]) + '.' if loc[:-1] else ''}"
                                 f"{shown}: not a key of the plan here{close}", hint="docs/matrix.md")
    return InvalidInputError(f"{where}: {at + ': ' if at else ''}{msg}", hint="docs/matrix.md")


def _excluded(rules: list[dict[str, Any]], axes: Mapping[str, list[Any]], where: str) -> list[dict[str, str]]:
    """The exclude rules as {axis: key value}, each checked against the axes."""
    out: list[dict[str, str]] = []
    for i, rule in enumerate(rules, 1):
        if not rule:
            raise InvalidInputError(f"{where}: exclude #{i}: an empty rule would exclude every cell")
        norm: dict[str, str] = {}
        for axis, value in rule.items():
            if axis not in axes:
                near = difflib.get_close_matches(str(axis), list(axes), n=1, cutoff=0.5)
                close = f" (did you mean {near[0]!r}?)" if near else ""
                raise InvalidInputError(f"{where}: exclude #{i}: {str(axis)[:64]!r} is not an axis of the "
                                        f"matrix{close}")
            known = [key_value(v) for v in axes[axis]]
            if key_value(value) not in known:
                raise InvalidInputError(f"{where}: exclude #{i}: {key_value(value)[:64]!r} is not a value of "
                                        f"the {axis} axis ({', '.join(known)})")
            norm[str(axis)] = key_value(value)
        out.append(norm)
    return out


def parse_plan(doc: Mapping[str, Any], where: str, base_dir: Path) -> LoadedPlan:
    """A plan document → its cells, every one's spec checked; ``InvalidInputError`` naming the problem."""
    try:
        plan = MatrixPlan.model_validate(dict(doc))
    except ValidationError as exc:
        raise _problem(exc, where) from exc
    matrix_doc = doc.get("matrix")
    axes = plan.axes([str(k) for k in matrix_doc] if isinstance(matrix_doc, dict) else [])
    rules = _excluded(plan.exclude, axes, where)
    targets = {t.key_name: t for t in plan.targets}
    for t in plan.targets:
        try:
            kind = engine_kind(t.engine)
            check_remote_urls(t.telemetry_from)  # parsed and checked, no request made
        except GpuledgerError as exc:
            raise InvalidInputError(f"{where}: target {t.key_name}: {exc.message}") from exc
        if kind.spec is not ServerSpec:
            raise InvalidInputError(f"{where}: target {t.key_name}: --engine {t.engine} is not a server "
                                    "engine (a matrix benchmarks servers: openai, ollama)")
    names = list(axes)
    count = math.prod(len(axes[n]) for n in names)  # before building them: a plan may ask for 10^10
    if count * plan.repeat > MAX_CELLS:
        raise InvalidInputError(f"{where}: {count:,} cells × {plan.repeat} repeats is more than "
                                f"{MAX_CELLS:,} runs")
    combos = list(itertools.product(*(axes[n] for n in names)))
    bench = plan.bench.model_dump(exclude_none=True)
    cells: list[Cell] = []
    excluded = 0
    for combo in combos:
        values = dict(zip(names, combo, strict=True))
        keyed = {n: key_value(v) for n, v in values.items()}
        if any(all(keyed[a] == v for a, v in rule.items()) for rule in rules):
            excluded += 1
            continue
        key = ",".join(f"{n}={keyed[n]}" for n in names)
        if len(key) > MAX_KEY_CHARS:
            raise InvalidInputError(f"{where}: cell key {key[:60]!r}… is longer than {MAX_KEY_CHARS} "
                                    "characters", hint="use shorter target names or axis values")
        target = targets[values[TARGET_AXIS]]
        settings = {**bench, **{n: v for n, v in values.items() if n != TARGET_AXIS}}
        if settings.get("dataset_path") is not None:
            settings["dataset_path"] = str((base_dir / str(settings["dataset_path"])).resolve())
        cell = Cell(key, values, target, settings, int(settings.get("workers") or 1),
                    target.profile or plan.profile, datasets_vary=len(axes.get("dataset", [])) > 1)
        try:
            check_workers(cell.spec(label=key), cell.workers)
        except GpuledgerError as exc:
            raise InvalidInputError(f"{where}: cell {key}: {exc.message}", hint="docs/matrix.md") from exc
        cells.append(cell)
    if not cells:
        raise InvalidInputError(f"{where}: the exclude rules leave no cell to run")
    return LoadedPlan(plan, cells, plan_digest(plan), where, excluded, plan_document(plan))


def plan_document(plan: MatrixPlan) -> dict[str, Any]:
    """The plan as the store keeps it (the backend sections only when given), every URL redacted (a
    target's ``base_url`` and ``telemetry_from``: ``SecretUrl``)."""
    doc = plan.model_dump(mode="json")
    for section in BACKEND_SECTIONS:
        if doc.get(section) is None:
            doc.pop(section, None)
    return doc


def plan_digest(plan: MatrixPlan) -> str:
    """What ``--resume`` compares: the plan's cells, settings and repeats, not where they run (its URLs
    redacted: no digest of a password is stored, and a changed password is the same plan)."""
    doc = plan.model_dump(mode="json", exclude=set(BACKEND_SECTIONS))
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def load_plan(path: Path) -> LoadedPlan:
    """The plan file at ``path`` (YAML), validated."""
    if not path.is_file():
        raise NotFoundError(f"matrix plan not found: {path}")
    doc = read_yaml_mapping(path, "matrix plan")
    return parse_plan(doc, str(path), path.resolve().parent)


def group_id(matrix_id: str, key: str) -> str:
    """The group of a cell's repeats (``cost GROUP``, ``compare GROUP GROUP``): one per cell and matrix,
    the same in every invocation (a resumed cell's repeats join the same group)."""
    alphabet = "abcdefghijklmnopqrstuvwxyz234567"
    digest = hashlib.sha256(f"{matrix_id}\0{key}".encode()).digest()
    return "g-" + "".join(alphabet[b % 32] for b in digest[:8])
