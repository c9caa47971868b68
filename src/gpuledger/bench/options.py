"""A task's ``gpuledger bench`` options as one typed model, validated once, and the spec it makes.

Each workload kind's ``options`` facet (``kinds/<kind>/options.py``) defines ``OPTIONS``, a subclass of
``TaskOptions``: the task's options by their command-line names (``input_len`` is ``--input-len``), typed and
bounded, each refusal the command line's own one line. ``options_of`` makes the task's model from the parsed
command line: the options of the task given or defaulted, and every option of another task that was given —
which the model refuses (another task's own option with the tasks that take it, ``--seq-len: for --task
train (torch), not --engine openai``; an option the task has no use for with the task's own sentence,
``--dataset is not for --task train: give --data FILE``). ``TaskOptions.document`` is the spec's document
the model asks for (``bench --like`` fills it in with the stored workload first), ``spec`` the validated spec.

What the model checks is each option alone and what options say of each other on the command line (the
engine's own options, ``--height`` with ``--width``); what the spec's fields must be together is the spec's
(``--dataset jsonl`` needs a file): a repeat (``--like``) gives the rest of them.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpuledger.bench.bounds import BOUNDS, Bound
from gpuledger.bench.tasks import flag_name, other_tasks_flags, task_of_engine
from gpuledger.engines import EngineKind, engine_kind
from gpuledger.errors import UsageError
from gpuledger.records import BenchSpec
from gpuledger.records.kinds import WorkloadKind, kinds
from gpuledger.records.spec import checked, settled

MAX_LABEL = 500  # characters of --label (one line in every listing)
MAX_TEXT = 100_000  # characters of a text option (a prompt)
MAX_NAME = 4_096  # characters of a name, path or URL option


def bound_problem(
    bound: Bound, value: float | None, below: Callable[[float], str | None] | None = None
) -> str | None:
    """Why ``value`` is outside ``bound`` (None: inside, or not given): ``below``'s own sentence for a value
    the spec has always named so (``--warmup must be 0 or more``), else the bound's."""
    if value is None:
        return None
    if below is not None:
        said = below(value)
        if said:
            return said
    try:
        bound.check(value)
    except UsageError as exc:
        return exc.message
    return None


def at_least_one(flag: str) -> Callable[[float], str | None]:
    return lambda v: f"{flag} must be at least 1, got {v}" if v < 1 else None


def positive_seconds(flag: str) -> Callable[[float], str | None]:
    return lambda v: f"{flag} must be a positive number of seconds, got {v}" if v <= 0 else None


def warmup_sentence(v: float) -> str | None:
    return f"--warmup must be 0 or more, got {v}" if v < 0 else None


def first(problems: Iterable[str | None]) -> str | None:
    return next((p for p in problems if p), None)


class TaskOptions(BaseModel):
    """What every task's options have: the engine (a registered one of the task), the label and the
    telemetry settings. A subclass names its task (``TASK``), its options, and the sentence for each option
    of another workload it refuses (``REFUSED``; any other such option: another task's own, refused with the
    tasks that take it)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, protected_namespaces=())

    TASK: ClassVar[str] = ""
    REFUSED: ClassVar[Mapping[str, str]] = {}

    engine: str = Field(max_length=128)
    label: str = Field(default="", max_length=MAX_LABEL)
    telemetry: bool = True
    telemetry_interval: float = 0.1

    @model_validator(mode="before")
    @classmethod
    def _other_tasks(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        names = cls.option_names() | set(cls.model_fields)
        foreign = [k for k in data if k not in names]
        if not foreign:
            return data
        engine = data.get("engine")
        if isinstance(engine, str):
            try:
                line = other_tasks_flags(engine, foreign)
            except UsageError as exc:
                raise ValueError(exc.message) from None
            if line:
                raise ValueError(line)
        for key, sentence in cls.REFUSED.items():
            if key in foreign:
                raise ValueError(sentence)
        raise ValueError(f"{flag_name(sorted(foreign)[0])} is not an option of --task {cls.TASK}")

    @classmethod
    def option_names(cls) -> frozenset[str]:
        """The names the model takes: its fields, by their command-line names (an alias where a field's
        own name cannot be the option's: ``model_config``)."""
        return frozenset(f.alias or name for name, f in cls.model_fields.items())

    def telemetry_problem(self) -> str | None:
        return bound_problem(BOUNDS["--telemetry-interval"], self.telemetry_interval,
                             positive_seconds("--telemetry-interval"))

    @abstractmethod
    def document(self, kind: EngineKind) -> dict[str, Any]:
        """The spec's document these options ask for, for an engine of ``kind`` (not validated yet:
        ``spec_of``; ``bench --like`` fills in the stored workload first)."""

    def spec(self) -> BenchSpec:
        """The validated spec of these options (``UsageError`` with the flag's line for what the spec
        refuses)."""
        kind = engine_kind(self.engine)
        return spec_of(kind, self.document(kind))


def spec_of(kind: EngineKind, document: Mapping[str, Any]) -> BenchSpec:
    """The validated spec of a document for an engine of ``kind``: the first problem is a ``UsageError``
    with the flag's one line; every field of the document counts as set (a new run stores them all)."""
    return settled(checked(kind.spec, document, {"endpoints": tuple(kind.endpoints)}))


def options_model(task: WorkloadKind) -> type[TaskOptions]:
    """The options model of ``task`` (its ``options`` facet's ``OPTIONS``)."""
    module = task.facet("options")
    model = getattr(module, "OPTIONS", None)
    if not (isinstance(model, type) and issubclass(model, TaskOptions)):
        raise TypeError(f"{task.package}.options defines no OPTIONS = a TaskOptions subclass")
    return model


@cache
def every_option() -> frozenset[str]:
    """The options of every task (an option of none is the command's own: ``--workers``, ``--json``)."""
    return frozenset(n for k in kinds() if k.has("options") for n in options_model(k).option_names())


def options_of(engine: EngineKind, values: Mapping[str, Any], given: Iterable[str] = ()) -> TaskOptions:
    """The options of ``engine``'s task from the command line's ``values`` (by option name): its own
    options that have a value (None: not given, the model's default), and the options of other tasks that
    were ``given`` (refused by the model); ``UsageError`` with the first problem's one line."""
    model = options_model(task_of_engine(engine.name))
    names = model.option_names()
    data = {k: v for k, v in values.items() if k in names and v is not None}
    data.update({k: values[k] for k in given if k not in names and k in every_option() and k in values})
    data["engine"] = engine.name
    return checked(model, data)


__all__ = [
    "TaskOptions",
    "at_least_one",
    "bound_problem",
    "every_option",
    "first",
    "options_model",
    "options_of",
    "positive_seconds",
    "spec_of",
    "warmup_sentence",
]
