"""The typed run specification: what a run was asked to do, kept as ``RunInfo.config``.

``BenchSpec`` holds what every run has (the engine's name, the label, the telemetry settings and what
telemetry found, where a repeated workload came from). Each kind of engine subclasses it with its own
arguments and registers under ``KIND``, in its workload kind's ``spec`` facet (``records/kinds.py``):
``ServerSpec`` for the HTTP engines (``openai``, ``ollama``: server, model, endpoint, dataset, load, counts,
timeouts) and ``TorchSpec`` for the in-process engine (model, device, dtype, batch, lengths) in
``kinds/text/spec.py``, ``ImageSpec`` in ``kinds/image/spec.py``, ``TrainSpec`` in ``kinds/train/spec.py``;
the datasets, the model architecture and the base of every spec are here, the load patterns and stages in
``records/load.py``, the models' base in ``records/specbase.py``. A spec is what is needed to repeat the run
(``bench --like``) plus what the engine resolved when it ran (the device it chose, the model it built).

Every field is optional: runs stored before the spec was typed (schema 1) hold whatever the gpuledger of
the day wrote, and they must load as they are. A spec the command line builds sets every field it means.

Stored form: the flat JSON object gpuledger has always written. ``dump_spec`` writes the fields that were
set (so what was absent stays absent), ``"kind"`` for kinds other than the ones schema 1 knew by the
engine's name, and, in the store (``stored=True``), the schema marker ``SCHEMA_KEY``. ``load_spec`` reads
any of them back; schema 1 is upgraded (``upgrade_v1``) without changing what it dumps to.

Validation messages are the command line's own one-line errors (``--concurrency must be at least 1, got
0``): ``checked`` turns the first problem into a ``UsageError``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Self, TypeVar

from pydantic import (
    BaseModel,
    Field,
    ValidationError,
    model_validator,
)

from gpuledger.errors import UsageError
from gpuledger.records.load import (
    BatchStage,
    ConcurrencyLoad,
    ConcurrencyStage,
    LoadSpec,
    RateLoad,
    RateStage,
    Stage,
    SweepLoad,
    TraceLoad,
    TraceStage,
)
from gpuledger.records.specbase import KEEP_SECRETS, SpecError, SpecModel, finite_positive
from gpuledger.records.workloads import workload_problem

if TYPE_CHECKING:
    from gpuledger.records.request import RequestRecord
    from gpuledger.records.summary import RunSummary

SCHEMA_KEY = "$schema"
SCHEMA_VERSION = 2
KIND_KEY = "kind"
SLO_KEYS = ("ttft_ms", "tpot_ms", "e2e_ms")
# The kind of a stored spec that names none and whose engine no kind claims (a run against a server).
DEFAULT_SPEC_KIND = "server"
DATASETS = ("builtin", "random", "jsonl", "sharegpt", "trace")
FILE_DATASETS = ("jsonl", "sharegpt", "trace")
DEFAULT_INPUT_LEN = 128  # the random dataset's --input-len when none is given
DEFAULT_CONCURRENCY = 8
DEFAULT_NUM_REQUESTS = 64


# --------------------------------------------------------------------------------------------------
# Datasets
# --------------------------------------------------------------------------------------------------


class DatasetSpec(SpecModel):
    """Where a server run's prompts come from (``workload/datasets.py`` builds them); sessions, shared
    prefixes and traces: ``records/workloads.py``."""

    name: str = "builtin"
    path: Path | None = None
    input_len: int | None = None
    output_len: int | None = None
    range_ratio: float = 0.0
    seed: int = 0
    turns: int | Literal["all"] | None = None
    think_time_s: float | None = None
    prefix_len: int | None = None
    prefix_groups: int | None = None
    prefix_ratio: float | None = None

    @model_validator(mode="after")
    def _flags(self) -> Self:
        if self.name not in DATASETS:
            raise ValueError(f"--dataset must be one of {', '.join(DATASETS)}, got {self.name!r}")
        if self.name == "trace" and self.path is None:
            raise ValueError("--dataset trace replays a trace file: give --trace FILE")
        if self.name in FILE_DATASETS and self.path is None:
            raise ValueError(f"--dataset {self.name} needs --dataset-path FILE")
        if self.name not in FILE_DATASETS and self.path is not None:
            raise ValueError(f"--dataset-path is only for --dataset jsonl or sharegpt, not {self.name}")
        if self.input_len is not None and self.name != "random":
            raise ValueError(
                "--input-len only applies to --dataset random (other datasets bring their prompts)"
            )
        for flag, v in (("--input-len", self.input_len), ("--output-len", self.output_len)):
            if v is not None and v < 1:
                raise ValueError(f"{flag} must be at least 1, got {v}")
        if not 0.0 <= self.range_ratio < 1.0:
            raise ValueError(f"--range-ratio must be in [0, 1), got {self.range_ratio}")
        problem = workload_problem(self, DEFAULT_INPUT_LEN)
        if problem:
            raise ValueError(problem)
        return self


class TokenIdDataset(SpecModel):
    """Prompts of ``input_tokens`` token ids drawn by the engine from its own vocabulary (fixed seed),
    each asking for exactly ``output_tokens`` tokens: the in-process engine's workload."""

    input_tokens: int = Field(ge=1)
    output_tokens: int = Field(ge=1)
    count: int = Field(ge=1)
    seed: int = 0


# --------------------------------------------------------------------------------------------------
# What every run has
# --------------------------------------------------------------------------------------------------


class TelemetrySource(SpecModel):
    """One telemetry source as the run found it (``gpuledger.telemetry.SourceStatus``)."""

    name: str
    available: bool
    reason: str | None = None
    devices: list[str] = Field(default_factory=list)


class TelemetryRecord(SpecModel):
    """The telemetry settings (``enabled``, ``interval_s``) and what the run writer found: the sources, or
    why there were none; samples the store could not keep."""

    enabled: bool = True
    interval_s: float = 0.1
    sources: list[TelemetrySource] | None = None
    error: str | None = None
    samples_left_out: str | None = None
    samples_not_saved: str | None = None

    @model_validator(mode="after")
    def _interval(self) -> Self:
        if not finite_positive(self.interval_s):
            raise ValueError(
                f"--telemetry-interval must be a positive number of seconds, got {self.interval_s}"
            )
        return self


class LikeOrigin(SpecModel):
    """``bench --like RUN``: the run whose workload was repeated and the flags that overrode it."""

    run_id: str
    overridden: list[str] = Field(default_factory=list)


def slo_problem(slo: Mapping[str, float] | None) -> str | None:
    for key, value in (slo or {}).items():
        if key not in SLO_KEYS:
            return f"--slo: {key!r} is not one of {', '.join(SLO_KEYS)}"
        if not finite_positive(value):
            return f"--slo: {key} must be a positive number of milliseconds, got {value}"
    return None


_KINDS: dict[str, type[BenchSpec]] = {}


class BenchSpec(SpecModel):
    """What every run's spec has; a subclass per engine kind adds its arguments and says what they mean
    for the run (its stages, counts, warm-up). An instance of this class itself is a spec that records
    nothing beyond these fields (a run written by the store API without a config)."""

    KIND: ClassVar[str] = ""
    # Engine names schema 1 (before the spec was typed) wrote specs of this kind for: their stored specs
    # carry no "kind".
    LEGACY_ENGINES: ClassVar[tuple[str, ...]] = ()

    # What the run observed of the machine rather than was asked to do (dotted paths in the spec's
    # document): not run settings (``settings``). A kind adds its own: free memory, the device's name, ...
    OBSERVED: ClassVar[tuple[str, ...]] = (
        "telemetry.sources", "telemetry.error", "telemetry.samples_left_out", "telemetry.samples_not_saved",
    )

    engine: str | None = None
    label: str | None = None
    telemetry: TelemetryRecord | None = None
    like: LikeOrigin | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        kind = cls.__dict__.get("KIND")
        if kind:
            _KINDS[kind] = cls

    def settings(self) -> dict[str, Any]:
        """The spec's document without what the run observed of the machine (``OBSERVED``): what the user
        asked for and what follows from it — what two runs must share to be like-for-like (compare)."""
        doc = dump_spec(self)
        for path in self.OBSERVED:
            *parents, leaf = path.split(".")
            node: Any = doc
            for part in parents:
                node = node.get(part) if isinstance(node, dict) else None
            if isinstance(node, dict):
                node.pop(leaf, None)
        return doc

    # -- what the run does (the runner reads these) ---------------------------------------------------
    def dataset_spec(self) -> DatasetSpec | TokenIdDataset | None:
        """Where the run's prompts come from (None: the spec does not say)."""
        return None

    def stages(self) -> list[Stage]:
        """The measured stages, in order."""
        return []

    def requests_per_stage(self) -> int | None:
        """Measured requests per stage (None: the stages are bounded by ``stage_duration_s``)."""
        return None

    def stage_duration_s(self) -> float | None:
        return None

    def warmup_requests(self) -> int:
        """Requests sent before the window and not measured."""
        return 0

    def warmup_output_tokens(self) -> int | None:
        """Output tokens each warm-up request asks for (None: what its prompt asks)."""
        return None

    def slo_limits(self) -> dict[str, float]:
        """The goodput limits (``{"ttft_ms": 500.0}``)."""
        return {}

    def workload_seed(self) -> int:
        """The seed of prompt choice, lengths and arrivals."""
        return 0

    def summary_stages(self) -> list[dict[str, Any]] | None:
        """The stages the summary breaks the run into (a sweep's), else None."""
        return None

    def workload_record(self, meta: Mapping[str, Any], warmup: Mapping[str, Any]) -> dict[str, Any]:
        """``RunInfo.workload``: the dataset's own description (``meta``) and what this kind adds to it."""
        return dict(meta)

    # -- what the run was (cost and reports read these) -----------------------------------------------
    def telemetry_enabled(self) -> bool:
        return self.telemetry.enabled if self.telemetry is not None else True

    def telemetry_interval_s(self) -> float:
        return self.telemetry.interval_s if self.telemetry is not None else 0.1

    def parameter_count(self) -> int | None:
        """The model's parameter count when the run recorded it."""
        return None

    def precision(self) -> str | None:
        """The dtype the model computed in, when the run recorded it (``bf16``)."""
        return None

    def fixed_concurrency(self) -> int | None:
        """Requests in flight during the whole run when that was fixed (a batch, one concurrency)."""
        return None

    def load_stage(self, name: str) -> Stage | None:
        """The stored stage of this name (a sweep's ``c=16``)."""
        return next((s for s in self.stages() if s.stage == name), None)

    def records_server_metrics(self) -> bool | None:
        """Whether the run was asked to read the server's /metrics (None: it does not say)."""
        return None

    def single_process_reason(self) -> str | None:
        """Why the run's load cannot be split over ``bench --workers`` processes (None: it can)."""
        return None

    def summarize(self, records: Sequence[RequestRecord]) -> RunSummary | None:
        """This kind of run's summary of its stored requests (image generation: ``kinds.image.summary``);
        None: text generation's (``bench.metrics.summarize``)."""
        return None

    @property
    def kind(self) -> str:
        return self.KIND

    def to_dict(self) -> dict[str, Any]:
        """The spec's JSON document (``dump_spec``)."""
        return dump_spec(self)


# --------------------------------------------------------------------------------------------------
# The HTTP engines' spec
# --------------------------------------------------------------------------------------------------


class ModelArchitecture(SpecModel):
    """``bench --model-config PATH``: the model's config.json as it was read, kept with the run so the store
    alone says what the server's model is (its MBU and MFU need the architecture:
    cost/pricing/efficiency.py)."""

    path: str = Field(max_length=4096)
    config: dict[str, Any]


# --------------------------------------------------------------------------------------------------
# Reading, writing, checking
# --------------------------------------------------------------------------------------------------


def _loaded() -> dict[str, type[BenchSpec]]:
    """The spec kinds, every workload kind's ``spec`` facet imported first (``records.kinds``)."""
    from gpuledger.records.kinds import load_facet

    load_facet("spec")
    return _KINDS


def spec_kinds() -> dict[str, type[BenchSpec]]:
    return dict(_loaded())


def kind_of_engine(engine: str | None) -> type[BenchSpec]:
    """The spec kind schema 1 stored for runs of ``engine`` (its engines' names); a name gpuledger never
    had an engine of: the server kind (the store API's default)."""
    kinds = _loaded()
    for cls in kinds.values():
        if engine in cls.LEGACY_ENGINES:
            return cls
    return kinds[DEFAULT_SPEC_KIND]


def first_problem(exc: ValidationError) -> str:
    """The first problem of a validation error, in one line: the validator's own message when it raised
    one (``--concurrency must be at least 1, got 0``), else where and what (``load.stages: ...``)."""
    first = exc.errors()[0]
    error = (first.get("ctx") or {}).get("error")
    if isinstance(error, ValueError):
        return str(error)
    where = ".".join(str(p) for p in first["loc"])
    return f"{where}: {first['msg']}" if where else str(first["msg"])


M = TypeVar("M", bound=BaseModel)
S = TypeVar("S", bound="BenchSpec")


def checked(model: type[M], data: Mapping[str, Any], context: Mapping[str, Any] | None = None) -> M:
    """``model`` validated from ``data`` (command-line values); the first problem is a ``UsageError``."""
    try:
        return model.model_validate(dict(data), context=dict(context or {}))
    except ValidationError as exc:
        raise UsageError(first_problem(exc)) from exc


Upgrade = Callable[[BenchSpec, Mapping[str, Any], Any], BenchSpec]
_UPGRADES: dict[str, Upgrade] = {}


def register_upgrade(kind: str, upgrade: Upgrade) -> None:
    """``upgrade(spec, workload, summary)``: a schema-1 spec of ``kind`` with what the run recorded
    elsewhere filled in (fields left unset: the stored form does not change)."""
    _UPGRADES[kind] = upgrade


def load_spec(
    doc: Mapping[str, Any] | None,
    engine: str | None = None,
    *,
    workload: Mapping[str, Any] | None = None,
    summary: Any = None,
) -> BenchSpec:
    """A stored (or exported) spec document -> the typed spec. ``engine`` (``RunInfo.engine``) chooses the
    kind of a document that names none; ``workload`` and ``summary`` (the run's) complete a schema-1 spec.
    ``SpecError`` saying what is wrong otherwise."""
    data = dict(doc or {})
    version = data.pop(SCHEMA_KEY, 1)
    if version not in (1, SCHEMA_VERSION):
        raise SpecError(f"config schema {version!r} is not one this gpuledger reads (1..{SCHEMA_VERSION})")
    kind = data.pop(KIND_KEY, None)
    if kind is not None and not isinstance(kind, str):
        raise SpecError(f"config: kind {kind!r} is not a name")
    name = data.get("engine") if isinstance(data.get("engine"), str) else engine
    cls = _loaded().get(kind) if kind else (kind_of_engine(name) if data else BenchSpec)
    if cls is None:
        raise SpecError(f"config: kind {kind!r} is not one this gpuledger reads ({', '.join(_KINDS)})")
    try:
        spec = cls.model_validate(data)
    except ValidationError as exc:
        raise SpecError(f"config ({cls.KIND or 'run'}): {first_problem(exc)}") from exc
    upgrade = _UPGRADES.get(cls.KIND)
    if version == 1 and upgrade is not None:
        spec = upgrade(spec, workload or {}, summary)
    return spec


def dump_spec(spec: BenchSpec | None, *, stored: bool = False, keep_secrets: bool = False) -> dict[str, Any]:
    """The spec as JSON types: the fields that were set, ``kind`` when the engine's name does not say it,
    and (``stored=True``) the schema marker the store keeps. The server URL is redacted unless
    ``keep_secrets`` (a document that stays with the run in memory: its own load processes, a matrix
    cell run in memory; ``records.specbase``)."""
    if spec is None:
        return {}
    context = {KEEP_SECRETS: True} if keep_secrets and not stored else None
    out = spec.model_dump(mode="json", exclude_unset=True, by_alias=True, context=context)
    if spec.KIND and kind_of_engine(spec.engine) is not type(spec):
        out = {KIND_KEY: spec.KIND, **out}
    if stored:
        out[SCHEMA_KEY] = SCHEMA_VERSION
    return out


def settled(spec: S) -> S:
    """``spec`` with every field it holds marked as set (a new run's spec dumps all of them), except the
    optional records that are None (``like``). Its server URL keeps its credentials: the run's requests
    are made from this spec."""
    data = spec.model_dump(by_alias=True, context={KEEP_SECRETS: True})
    if spec.like is None:
        data.pop("like", None)
    return type(spec).model_validate(data)


__all__ = [
    "DATASETS",
    "DEFAULT_CONCURRENCY",
    "DEFAULT_NUM_REQUESTS",
    "SCHEMA_KEY",
    "SLO_KEYS",
    "BatchStage",
    "BenchSpec",
    "ConcurrencyLoad",
    "ConcurrencyStage",
    "DatasetSpec",
    "LikeOrigin",
    "LoadSpec",
    "ModelArchitecture",
    "RateLoad",
    "RateStage",
    "SpecError",
    "SpecModel",
    "Stage",
    "SweepLoad",
    "TelemetryRecord",
    "TraceLoad",
    "TraceStage",
    "TelemetrySource",
    "TokenIdDataset",
    "checked",
    "dump_spec",
    "first_problem",
    "kind_of_engine",
    "load_spec",
    "register_upgrade",
    "settled",
    "slo_problem",
    "spec_kinds",
]
