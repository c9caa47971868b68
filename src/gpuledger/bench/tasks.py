"""The tasks ``gpuledger bench --task`` and ``gpuledger run --task`` know, looked up in the registries: a task
is a workload kind (``records.kinds``: its descriptor names its engines, the engine it runs without
``--engine``, what ``--engine NAME`` means under it when that name is another task's engine — ``--task train
--engine torch`` is the training engine ``torch-train`` — and the bench options that are its own), and its
engines are the registered ones whose spec is of one of the kind's spec kinds (``engines.registry``: an engine
registered at run time belongs to the task of its spec). A new workload is a new kind package, not a branch
here.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpuledger.engines import either, engine_kind, engine_names
from gpuledger.errors import UsageError
from gpuledger.records.kinds import UnknownKind, WorkloadKind, kind_named, kinds

DEFAULT_TASK = "text"


def task_named(name: str) -> WorkloadKind:
    """The kind ``--task NAME`` names; ``UsageError`` naming the kinds otherwise."""
    try:
        return kind_named(name)
    except UnknownKind:
        raise UsageError(f"--task must be {either(tuple(k.name for k in kinds()))}, got {name!r}") from None


def engines_of(task: WorkloadKind) -> tuple[str, ...]:
    """The registered engines of ``task``, in registration order."""
    return tuple(n for n in engine_names() if engine_kind(n).spec.KIND in task.spec_kinds)


def owns(task: WorkloadKind, engine: str) -> bool:
    return engine_kind(engine).spec.KIND in task.spec_kinds


def choices(task: WorkloadKind) -> str:
    """``diffusers, comfyui or openai-images``: the names ``--engine`` takes under ``task``."""
    aliased = set(task.engine_aliases.values())
    names = [n for n in engines_of(task) if n not in aliased] + list(task.engine_aliases)
    return either(tuple(dict.fromkeys(names)))


def task_of_engine(engine: str) -> WorkloadKind:
    """The task whose engines include ``engine`` (``UsageError`` for an engine nobody registered)."""
    spec_kind = engine_kind(engine).spec.KIND
    for task in kinds():
        if spec_kind in task.spec_kinds:
            return task
    raise UsageError(f"engine {engine} belongs to no task")


def engine_for_task(task: str | None, engine: str, engine_given: bool) -> str:
    """The registered engine of ``--task``/``--engine``: a task without ``--engine`` runs its default engine;
    ``--engine`` alone implies the engine's task; an engine of another task is refused with one line."""
    if task is None:
        engine_kind(engine)
        return engine
    t = task_named(task)
    name = t.engine_aliases.get(engine, engine) if engine_given else t.default_engine
    if not owns(t, name):
        owner = task_of_engine(name)
        if owner.name == DEFAULT_TASK or not engine_given:
            raise UsageError(f"--task {t.name} runs {choices(t)}, not --engine {engine}")
        raise UsageError(
            f"--engine {engine} is for --task {owner.name}: give --task {owner.name} (or leave --task out)"
        )
    return name


def flag_name(option: str) -> str:
    """``--batch-size`` for the option ``batch_size``."""
    return "--" + option.replace("_", "-")


def other_tasks_flags(engine: str, given: Iterable[str]) -> str | None:
    """Why the options of another task given to ``engine`` are refused (``--seq-len`` to a server run,
    ``--num-images`` to a training run), with the tasks that take them; None when there are none."""
    mine = task_of_engine(engine)
    given = set(given)
    used: dict[str, list[str]] = {}
    for task in kinds():
        if task.name == mine.name:
            continue
        for flag in task.flags:
            if flag in given and flag not in mine.flags:
                used.setdefault(flag, []).append(task.name)
    if not used:
        return None
    names = ", ".join(flag_name(f) for f in used)
    owners = sorted({t for ts in used.values() for t in ts})
    detail = "; ".join(f"--task {t} ({choices(kind_named(t))})" for t in owners)
    return f"{names}: for {detail}, not --engine {engine}"


__all__ = [
    "DEFAULT_TASK",
    "choices",
    "engine_for_task",
    "engines_of",
    "flag_name",
    "other_tasks_flags",
    "owns",
    "task_named",
    "task_of_engine",
]
