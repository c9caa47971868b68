"""``gpuledger run`` as a library: doctor → bench → cost → report for one task, its result typed.

``run_pipeline(RunOptions(...), PipelineHooks(...))`` evaluates the task the options name through the task's
``run`` facet (``kinds/<kind>/run.py``: its ``check`` refuses what the task cannot do before anything is
opened, its ``evaluate`` chooses the model and workload for this machine, measures it through the bench's one
run lifecycle, prices it and writes the report) and returns the task's ``RunResult``: a pydantic model whose
``model_dump(mode="json")`` is ``gpuledger run --json``'s document and whose attributes the terminal renders.
Progress and phases go to the hooks (the CLI draws them on stderr); nothing here prints.

The steps every task shares are here: the doctor (``doctor_step``), the cost (``cost_step``), the report
(``report_step``) — a step that cannot be done is one line in the result's ``missing``, never the end of
the evaluation — the answer (``run_answer``: the same as ``report`` and ``cost`` print), the end of an
interrupted bench (``raise_if_stopped``: exit 130, the finished items kept as an incomplete run) and the whole
evaluation of a task with one stored run and a chosen model (``evaluate_task``: image and training).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast

from pydantic import BaseModel, ConfigDict, Field, model_serializer

from gpuledger.cost.pricing.document import CostDocument
from gpuledger.errors import EngineError, GpuledgerError, Interrupted, UsageError
from gpuledger.report.model import Answer

if TYPE_CHECKING:
    from gpuledger.bench.runner import Hooks
    from gpuledger.cost import CostProfile, RunCost
    from gpuledger.records import BenchSpec, RunInfo
    from gpuledger.store import Store

# --memory-budget: at most 1 PiB, more than any device has (docs/contracts.md, "Which inputs are bounded").
MAX_MEMORY_BUDGET_GIB = 2**20
MAX_REPEATS = 100


class RunOptions(BaseModel):
    """What ``gpuledger run`` was asked: the task, the device, model and dtype (``auto``: chosen for this
    machine), the cost profile (None: from the detected hardware), where the HTML report goes (None: the
    data directory's ``reports/run-ID.html``), ``quick`` (an even shorter run), the memory the model may use
    (GiB; None: the device's free memory), the label, telemetry exporters to read during the run, the number
    of repeats (one group) and the store. A task's ``check`` refuses the options it does not take."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task: str = Field(default="text", max_length=64)
    device: str = Field(default="auto", max_length=32)
    model: str | None = Field(default=None, max_length=4096)
    dtype: str = Field(default="auto", max_length=16)
    profile: str | None = Field(default=None, max_length=4096)
    html: Path | None = None
    quick: bool = False
    memory_budget_gib: float | None = Field(default=None, ge=0.0, le=float(MAX_MEMORY_BUDGET_GIB),
                                            allow_inf_nan=False)
    label: str = Field(default="", max_length=500)
    telemetry_from: tuple[str, ...] = Field(default=(), max_length=64)
    repeats: int = Field(default=1, ge=1, le=MAX_REPEATS)
    db: str | None = Field(default=None, max_length=4096)

    def text_only(self) -> None:
        """``UsageError`` when options only the text task takes were given to another task."""
        if self.memory_budget_gib is not None or self.telemetry_from or self.repeats > 1:
            raise UsageError("--memory-budget, --telemetry-from and --repeat are for --task text")


Fingerprint = Callable[[], dict[str, Any]]


class OutputFiles(Protocol):
    """How the report file is checked and written (the CLI's one writer, ``gpuledger.cli.files``: atomic,
    refusing links and devices)."""

    def check_target(self, path: Path, *, overwrite: bool = ..., make_parents: bool = ...) -> object: ...

    def write_output(self, path: Path, data: bytes | str, *, overwrite: bool = ...,
                     make_parents: bool = ...) -> object: ...


@dataclass(frozen=True, slots=True)
class PipelineHooks:
    """Who hears about the evaluation while it goes on: each phase (choosing, doctor, the bench's own, cost,
    report), the bench's finished items (done, planned) and the machine's fingerprint taken before the
    window (``gpuledger.lock.fingerprint`` from the CLI); ``files`` writes the HTML report (None: no report
    file, the result's ``missing`` says so)."""

    on_phase: Callable[[str], None] | None = None
    on_progress: Callable[[int, int | None], None] | None = None
    environment: Fingerprint | None = None
    files: OutputFiles | None = None

    def phase(self, text: str) -> None:
        if self.on_phase is not None:
            self.on_phase(text)

    def bench(self, telemetry_from: tuple[str, ...] = (), workload: Mapping[str, Any] | None = None) -> Hooks:
        """The bench runner's hooks: its phases and finished items here, the machine's fingerprint."""
        from gpuledger.bench.runner import Hooks

        return Hooks(on_phase=self.on_phase, on_progress=self.on_progress, environment=self.environment,
                     telemetry_from=telemetry_from, workload=workload)


# -- the typed documents' shared parts ---------------------------------------------------------------


class Doc(BaseModel):
    """Base of ``gpuledger run``'s documents: unknown keys refused, frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Finding(Doc):
    id: str
    severity: str
    title: str


class DoctorStep(Doc):
    """The doctor's counts and its errors and warnings, and the id it was filed under in the setup-labour
    ledger (None: not filed, ``missing`` says why)."""

    errors: int
    warnings: int
    exit_code: int
    findings: list[Finding]
    stored_id: int | str | None = None


class RunResult(Doc):
    """What every task's evaluation returns (its fields are each task's: ``kinds/<kind>/run.py``)."""

    def document(self) -> dict[str, Any]:
        """``gpuledger run --json``'s document."""
        return self.model_dump(mode="json")


# -- the steps -----------------------------------------------------------------------------------------


def raise_if_stopped(run: RunInfo, items: str) -> None:
    """Ctrl-C (or SIGTERM) during the bench: the run is stored incomplete and the command ends (exit 130)."""
    stopped = run.summary.interrupted if run.summary is not None else None
    if stopped is not None:
        raise Interrupted(
            f"{stopped.signal}: run {run.id} saved as incomplete with {stopped.finished_requests} finished "
            f"{items}"
        )


def default_html_path(run_id: str) -> Path:
    from gpuledger.store.engine import data_dir

    return data_dir() / "reports" / f"run-{run_id}.html"


def check_html(html: Path | None, hooks: PipelineHooks) -> None:
    """The report's file can be written (before minutes of work, not after)."""
    if html is not None and hooks.files is not None:
        hooks.files.check_target(html)


def load_profile_now(profile: str | None) -> CostProfile | None:
    """``--profile``, loaded now: a bad one fails before minutes of measuring."""
    if profile is None:
        return None
    from gpuledger.cost import load_profile

    return load_profile(profile)


def doctor_step(store: Store, missing: list[str]) -> DoctorStep | None:
    from gpuledger.doctor import run_doctor

    try:
        report = run_doctor()
    except GpuledgerError as exc:
        missing.append(f"doctor: could not run — {exc.message}")
        return None
    stored_id: int | str | None = None
    try:
        stored_id = store.add_doctor_run(report.record())
    except GpuledgerError as exc:
        missing.append(f"doctor: result not filed in the setup-labour ledger — {exc.message}")
    return DoctorStep(
        errors=report.errors,
        warnings=report.warnings,
        exit_code=report.exit_code,
        findings=[Finding(id=f.id, severity=f.severity, title=f.title)
                  for f in report.findings if f.severity in ("error", "warning")],
        stored_id=stored_id,
    )


def cost_step(store: Store, run: RunInfo, profile: CostProfile | None, missing: list[str]) -> RunCost | None:
    from gpuledger.catalog import load_catalog
    from gpuledger.cost import cost_of_run, default_profile_for

    try:
        catalog = load_catalog()
        prof = profile if profile is not None else default_profile_for(run, catalog)
        records = store.list_doctor_runs() if prof.from_doctor_history else None
        cost = cost_of_run(run, prof, catalog=catalog, doctor_records=records)
    except GpuledgerError as exc:
        missing.append(f"cost: not computed — {exc.message}" + (f" ({exc.hint})" if exc.hint else ""))
        return None
    try:
        store.save_cost_evaluation(run.id, cost.profile.name, cost.profile.to_dict(),
                                   cost.document().model_dump(mode="json"))
    except GpuledgerError as exc:
        missing.append(f"cost: evaluation not saved — {exc.message}")
    return cost


def report_step(
    store: Store, run: RunInfo, profile_name: str | None, html: Path | None, missing: list[str],
    hooks: PipelineHooks, run_ids: list[str] | None = None,
) -> str | None:
    """The HTML report of ``run`` (of every run of ``run_ids``: ``--repeat N``, led by the group)."""
    from gpuledger.report import build_report, render_html

    if hooks.files is None:
        missing.append("report: not written — no file writer was given (PipelineHooks.files)")
        return None
    target = html if html is not None else default_html_path(run.id)
    try:
        data = build_report(store, run_ids or [run.id], {"*": profile_name} if profile_name else None,
                            progress=hooks.on_phase)
        text = render_html(data)
    except GpuledgerError as exc:
        missing.append(f"report: not written — {exc.message}")
        return None
    try:
        # only gpuledger's own reports folder is created
        hooks.files.write_output(target, text, make_parents=html is None)
    except GpuledgerError as exc:
        missing.append(f"report: not written — {exc.message}")
        return None
    return str(target.resolve())


def run_answer(run: RunInfo, cost: RunCost | None) -> Answer:
    """The answer `gpuledger run` prints first: the same as ``report`` and ``cost`` print
    (``gpuledger.report.headline``): the price when the run was priced, else what it measured."""
    from gpuledger.cost.comparison.breakeven import run_sensitivity
    from gpuledger.report.headline import cost_answer, measured_answer

    if cost is not None:
        return cost_answer(cost, run_sensitivity(cost), f"run {run.id}")
    return measured_answer(run, f"run {run.id}")


# -- a task with one stored run and a chosen model -------------------------------------------------------


class Choice(Protocol):
    """What a task chose to run: the model, the device and why."""

    @property
    def model(self) -> str: ...

    @property
    def device(self) -> str: ...

    @property
    def reason(self) -> str: ...


C = TypeVar("C", bound=Choice)


@dataclass(frozen=True, slots=True)
class TaskRun(Generic[C]):
    """A task's whole evaluation: its stored run, what was chosen, and each other step's result or why not."""

    run: RunInfo
    choice: C
    doctor: DoctorStep | None
    cost: RunCost | None
    html: str | None
    missing: list[str] = field(default_factory=list)


def evaluate_task(
    options: RunOptions,
    hooks: PipelineHooks,
    *,
    choosing: str,
    choose: Callable[[], C],
    spec_of: Callable[[C], BenchSpec],
    items: str,
    failed: str,
) -> TaskRun[C]:
    """Choose (the ``choosing`` phase) → doctor → the bench of ``spec_of(choice)`` → cost → report. A run
    whose every item (``items``: requests, steps) failed ends the evaluation with ``failed``."""
    from gpuledger.bench.runner import run_bench_async
    from gpuledger.store import open_store

    check_html(options.html, hooks)
    prof = load_profile_now(options.profile)
    missing: list[str] = []
    store = open_store(options.db)
    try:
        hooks.phase(choosing)
        choice = choose()
        hooks.phase("doctor: collecting facts about the stack")
        doctor = doctor_step(store, missing)
        run = asyncio.run(run_bench_async(spec_of(choice), store, hooks=hooks.bench()))
        raise_if_stopped(run, items)
        if run.status == "failed":
            raise EngineError(f"run {run.id}: {failed}", hint=f"gpuledger show {run.id}")
        hooks.phase("cost")
        cost = cost_step(store, run, prof, missing)
        hooks.phase("report")
        html_path = report_step(store, run, options.profile, options.html, missing, hooks)
    finally:
        store.close()
    return TaskRun(run, choice, doctor, cost, html_path, missing)


class UnitPrices(Doc):
    """The cost block of a task's document: the currency, the price of each unit the run is priced in and
    what one currency unit buys of each unit it yields, by ``gpuledger cost --json``'s keys
    (``usd_per_1k_images``, ``images_per_usd``), read from the typed cost, and the cost document itself.
    Dumped flat, as ``gpuledger run --json`` has always written it: ``{"currency", <each key>,
    "document"}``."""

    currency: str
    prices: dict[str, float | None]
    document: CostDocument

    @classmethod
    def of(cls, cost: RunCost) -> UnitPrices:
        from gpuledger.cost import money_prefix

        money, s, inputs, ev = money_prefix(cost.currency), cost.summary, cost.inputs, cost.evaluation
        prices = {inputs.unit(u).price_key(money): ev.cost_per(u) for u in s.price_units()}
        prices |= {inputs.unit(u).per_money_key(money): ev.per_money(u) for u in s.yield_units()}
        return cls(currency=cost.currency, prices=prices, document=cost.document())

    @model_serializer(mode="plain")
    def _flat(self) -> dict[str, Any]:
        return {"currency": self.currency, **self.prices, "document": self.document.model_dump(mode="json")}


class ModelReason(Doc):
    reason: str


class TaskMetrics(Doc, ABC):
    """A task's own figures (each task's result narrows ``metrics`` to its own)."""

    @abstractmethod
    def figures(self) -> str:
        """The terminal's line of the figures (console markup)."""


class TaskRunResult(RunResult):
    """What an image or training evaluation has (``evaluate_task``): the task, the stored run, the model and
    why, the device and dtype the run used, the workload, the doctor, the task's figures (``metrics``), the
    answer, the prices (``UnitPrices``), the report and what is missing."""

    task: str
    run_id: str
    status: str
    model: str
    model_choice: ModelReason
    device: str | None
    dtype: str | None
    workload: dict[str, Any]
    doctor: DoctorStep | None
    metrics: TaskMetrics
    answer: Answer
    cost: UnitPrices | None
    report_html: str | None
    missing: list[str]

    def figures(self) -> str:
        """The task's own line on the terminal (console markup)."""
        return self.metrics.figures()


def task_fields(task: str, done: TaskRun[Any], spec_type: type[BenchSpec]) -> dict[str, Any]:
    """The fields of a task's result its evaluation gives (``TaskRunResult``'s, the answer, the prices, the
    report and what is missing)."""
    run, spec = done.run, done.run.config
    mine = isinstance(spec, spec_type)
    return {
        "task": task,
        "run_id": run.id,
        "status": run.status,
        "model": done.choice.model,
        "model_choice": ModelReason(reason=done.choice.reason),
        "device": getattr(spec, "device", None) if mine else done.choice.device,
        "dtype": getattr(spec, "dtype", None) if mine else None,
        "workload": run.workload,
        "doctor": done.doctor,
        "answer": run_answer(run, done.cost),
        "cost": UnitPrices.of(done.cost) if done.cost is not None else None,
        "report_html": done.html,
        "missing": done.missing,
    }


# -- the entry point ---------------------------------------------------------------------------------


class RunFacet(Protocol):
    """A kind's ``run`` facet: what ``gpuledger run --task NAME`` does."""

    def check(self, options: RunOptions) -> None: ...

    def evaluate(self, options: RunOptions, hooks: PipelineHooks) -> RunResult: ...


def run_facet(task: str) -> RunFacet:
    """The ``run`` facet of the kind ``task`` names; ``UsageError`` when there is none."""
    from gpuledger.bench.tasks import task_named

    kind = task_named(task)
    module = kind.facet("run")
    if module is None:
        raise UsageError(f"--task {kind.name} has no `gpuledger run` evaluation: gpuledger bench --task "
                         f"{kind.name}")
    return cast(RunFacet, module)


def run_pipeline(options: RunOptions, hooks: PipelineHooks | None = None) -> RunResult:
    """The whole evaluation of ``options.task`` (the module docstring says which steps); a step that cannot be
    done is a line in the result's ``missing``; only a bench that cannot run at all raises (its exit code)."""
    facet = run_facet(options.task)
    facet.check(options)
    result = facet.evaluate(options, hooks or PipelineHooks())
    if not isinstance(result, RunResult):
        raise TypeError(f"--task {options.task}: its run facet returned no RunResult")
    return result


__all__ = [
    "MAX_MEMORY_BUDGET_GIB",
    "Choice",
    "Doc",
    "DoctorStep",
    "ModelReason",
    "PipelineHooks",
    "RunOptions",
    "RunResult",
    "TaskMetrics",
    "TaskRun",
    "TaskRunResult",
    "UnitPrices",
    "cost_step",
    "default_html_path",
    "doctor_step",
    "evaluate_task",
    "raise_if_stopped",
    "report_step",
    "run_answer",
    "run_pipeline",
    "task_fields",
]
