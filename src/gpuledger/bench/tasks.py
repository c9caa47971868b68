"""The tasks ``gpuledger bench --task`` and ``gpuledger run --task`` know — the essay's three workloads: LLM
inference (``text``), image generation (``image``) and training (``train``) — registered like the engines, so
that a new workload is one entry here, not a new branch in each command.

A task names the spec kinds of its engines (``engines.registry``: an engine whose spec is of one of them
belongs to the task), the engine it runs without ``--engine``, what ``--engine NAME`` means under it when
that name is another task's engine (``--task train --engine torch`` is the training engine ``torch-train``),
and the bench flags that are its own: such a flag given to another task's engine is refused with one line (it
would be ignored otherwise). A flag several tasks take (``--steps``, ``--batch-size``) is listed by each.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gpuledger.engines import either, engine_kind, engine_names
from gpuledger.errors import UsageError
from gpuledger.kinds.image.spec import ImageSpec
from gpuledger.kinds.text.spec import ServerSpec, TorchSpec
from gpuledger.kinds.train.spec import TrainSpec
from gpuledger.records import BenchSpec


@dataclass(frozen=True, slots=True)
class Task:
    """One workload of ``--task``; see the module docstring."""

    name: str
    about: str
    specs: tuple[type[BenchSpec], ...]
    default_engine: str
    aliases: Mapping[str, str] = field(default_factory=dict)
    flags: tuple[str, ...] = ()

    def engines(self) -> tuple[str, ...]:
        """The registered engines of this task, in registration order."""
        return tuple(n for spec in self.specs for n in engine_names(spec))

    def owns(self, engine: str) -> bool:
        return engine_kind(engine).spec in self.specs

    def engine_for(self, engine: str | None) -> str:
        """The registered engine ``--engine NAME`` means under this task (its default when None)."""
        if engine is None:
            return self.default_engine
        return self.aliases.get(engine, engine)

    def choices(self) -> str:
        """``diffusers, comfyui or openai-images``: the names ``--engine`` takes under this task."""
        names = [n for n in self.engines() if n not in self.aliases.values()] + list(self.aliases)
        return either(tuple(dict.fromkeys(names)))


TASKS: dict[str, Task] = {}
DEFAULT_TASK = "text"


def register_task(task: Task) -> None:
    TASKS[task.name] = task


def task_named(name: str) -> Task:
    task = TASKS.get(name)
    if task is None:
        raise UsageError(f"--task must be {either(tuple(TASKS))}, got {name!r}")
    return task


def task_of_engine(engine: str) -> Task:
    """The task whose engines include ``engine`` (``UsageError`` for an engine nobody registered)."""
    kind = engine_kind(engine)
    for task in TASKS.values():
        if kind.spec in task.specs:
            return task
    raise UsageError(f"engine {engine} belongs to no task")


def engine_for_task(task: str | None, engine: str, engine_given: bool) -> str:
    """The registered engine of ``--task``/``--engine``: a task without ``--engine`` runs its default engine;
    ``--engine`` alone implies the engine's task; an engine of another task is refused with one line."""
    if task is None:
        engine_kind(engine)
        return engine
    t = task_named(task)
    name = t.engine_for(engine if engine_given else None)
    if not t.owns(name):
        owner = task_of_engine(name)
        if owner.name == DEFAULT_TASK or not engine_given:
            raise UsageError(f"--task {t.name} runs {t.choices()}, not --engine {engine}")
        raise UsageError(
            f"--engine {engine} is for --task {owner.name}: give --task {owner.name} (or leave --task out)"
        )
    return name


def check_task_flags(engine: str, given: Iterable[str]) -> None:
    """A flag of another task given to ``engine`` is refused (``--seq-len`` to a server run, ``--num-images``
    to a training run), with the tasks that take it."""
    mine = task_of_engine(engine)
    given = set(given)
    used: dict[str, list[str]] = {}
    for task in TASKS.values():
        if task is mine:
            continue
        for flag in task.flags:
            if flag in given and flag not in mine.flags:
                used.setdefault(flag, []).append(task.name)
    if not used:
        return
    names = ", ".join("--" + f.removesuffix("_inputs").replace("_", "-") for f in used)
    owners = sorted({t for ts in used.values() for t in ts})
    detail = "; ".join(f"--task {t} ({TASKS[t].choices()})" for t in owners)
    raise UsageError(f"{names}: for {detail}, not --engine {engine}")


register_task(
    Task(
        "text",
        "LLM inference: a server (openai, ollama) or in-process PyTorch (torch)",
        (ServerSpec, TorchSpec),
        "openai",
        flags=("model_config", "turns", "think_time", "prefix_len", "prefix_groups", "prefix_ratio", "trace",
               "trace_speed"),
    )
)
register_task(
    Task(
        "image",
        "image generation: diffusers (default), comfyui or openai-images (docs/image.md)",
        (ImageSpec,),
        "diffusers",
        flags=(
            "steps",
            "height",
            "width",
            "batch_size",
            "guidance",
            "scheduler",
            "num_images",
            "workflow",
            "set_inputs",
            "prompt",
            "negative_prompt",
        ),
    )
)
register_task(
    Task(
        "train",
        "training: in-process PyTorch, data parallel under torchrun (docs/train.md)",
        (TrainSpec,),
        "torch-train",
        aliases={"torch": "torch-train"},
        flags=(
            "steps",
            "batch_size",
            "seq_len",
            "grad_accum",
            "warmup_steps",
            "optimizer",
            "learning_rate",
            "activation_checkpointing",
            "compile",
            "data",
        ),
    )
)

__all__ = [
    "DEFAULT_TASK",
    "TASKS",
    "Task",
    "check_task_flags",
    "engine_for_task",
    "register_task",
    "task_named",
    "task_of_engine",
]
