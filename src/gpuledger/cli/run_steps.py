"""The steps every task of ``gpuledger run`` shares: text generation (``run_cmd``), images (``run_image``) and
training (``run_train``).

- The progress display on stderr (``steps()``), the bench hooks it feeds and the end of a bench that was
  interrupted (``raise_if_stopped``: exit 130, the finished items kept as an incomplete run).
- The doctor, cost and report steps: each a piece that cannot be done is one line in ``missing``, never the
  end of the command.
- The whole evaluation of a task with one stored run and a chosen model (``evaluate_task``: image and
  training), its JSON document's common fields (``task_document``) and its terminal lines (``render_task``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from gpuledger.cli.common import console, err_console
from gpuledger.cli.files import write_output
from gpuledger.errors import EngineError, GpuledgerError, Interrupted

if TYPE_CHECKING:
    from gpuledger.bench.runner import Hooks
    from gpuledger.cost import CostProfile, RunCost
    from gpuledger.kinds.image.spec import ImageSpec
    from gpuledger.kinds.train.spec import TrainSpec
    from gpuledger.records import RunInfo
    from gpuledger.records.spec import BenchSpec
    from gpuledger.report.model import Answer
    from gpuledger.store import Store

NA = "n/a"


def num(value: Any, spec: str, unit: str = "") -> str:
    """``value`` formatted with ``spec`` (and ``unit``), or ``n/a`` when it is not a number."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return NA
    return f"{value:{spec}}{unit}"


class Steps:
    """One progress display on stderr: a spinner line per phase and a bar for requests."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.task: TaskID = progress.add_task("starting", total=None)

    def phase(self, text: str) -> None:
        self.progress.update(self.task, description=escape(text), total=None, completed=0)

    def advance(self, done: int, total: int | None) -> None:
        self.progress.update(self.task, total=total, completed=done)

    def hooks(self, telemetry_from: tuple[str, ...] = (), workload: dict[str, Any] | None = None) -> Hooks:
        """The bench's hooks: its phases and finished items on this display, the machine's fingerprint."""
        from gpuledger.bench.runner import Hooks
        from gpuledger.cli.common import environment_fingerprint

        return Hooks(on_phase=self.phase, on_progress=self.advance, environment=environment_fingerprint,
                     telemetry_from=telemetry_from, workload=workload)


@contextmanager
def steps() -> Iterator[Steps]:
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    ) as progress:
        yield Steps(progress)


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


def doctor_step(store: Store, missing: list[str]) -> dict[str, Any] | None:
    from gpuledger.doctor import run_doctor

    try:
        report = run_doctor()
    except GpuledgerError as exc:
        missing.append(f"doctor: could not run — {exc.message}")
        return None
    out: dict[str, Any] = {
        "errors": report.errors,
        "warnings": report.warnings,
        "exit_code": report.exit_code,
        "findings": [
            {"id": f.id, "severity": f.severity, "title": f.title}
            for f in report.findings
            if f.severity in ("error", "warning")
        ],
        "stored_id": None,
    }
    try:
        out["stored_id"] = store.add_doctor_run(report.record())
    except GpuledgerError as exc:
        missing.append(f"doctor: result not filed in the setup-labour ledger — {exc.message}")
    return out


def cost_step(
    store: Store, run: RunInfo, profile: CostProfile | None, missing: list[str]
) -> RunCost | None:
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
        store.save_cost_evaluation(run.id, cost.profile.name, cost.profile.to_dict(), cost.to_dict())
    except GpuledgerError as exc:
        missing.append(f"cost: evaluation not saved — {exc.message}")
    return cost


def report_step(
    store: Store, run: RunInfo, profile_name: str | None, html: Path | None, missing: list[str],
    on_phase: Callable[[str], None], run_ids: list[str] | None = None,
) -> str | None:
    """The HTML report of ``run`` (of every run of ``run_ids``: ``--repeat N``, led by the group)."""
    from gpuledger.report import build_report, render_html

    target = html if html is not None else default_html_path(run.id)
    try:
        data = build_report(store, run_ids or [run.id], {"*": profile_name} if profile_name else None,
                            progress=on_phase)
        text = render_html(data)
    except GpuledgerError as exc:
        missing.append(f"report: not written — {exc.message}")
        return None
    try:
        write_output(target, text, make_parents=html is None)  # only our own reports folder is created
    except GpuledgerError as exc:
        missing.append(f"report: not written — {exc.message}")
        return None
    return str(target.resolve())


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
    doctor: dict[str, Any] | None
    cost: RunCost | None
    html: str | None
    missing: list[str]


def evaluate_task(
    *,
    choosing: str,
    choose: Callable[[], C],
    spec_of: Callable[[C], BenchSpec],
    items: str,
    failed: str,
    profile: str | None,
    html: Path | None,
    db: str | None,
) -> TaskRun[C]:
    """Choose (the ``choosing`` phase) → doctor → the bench of ``spec_of(choice)`` → cost → report. A run
    whose every item (``items``: requests, steps) failed ends the command with ``failed``."""
    from gpuledger.bench.runner import run_bench_async
    from gpuledger.cost import load_profile
    from gpuledger.store import open_store

    prof: CostProfile | None = load_profile(profile) if profile else None
    missing: list[str] = []
    store = open_store(db)
    try:
        with steps() as st:
            st.phase(choosing)
            choice = choose()
            st.phase("doctor: collecting facts about the stack")
            doctor = doctor_step(store, missing)
            run = asyncio.run(run_bench_async(spec_of(choice), store, hooks=st.hooks()))
            raise_if_stopped(run, items)
            if run.status == "failed":
                raise EngineError(f"run {run.id}: {failed}", hint=f"gpuledger show {run.id}")
            st.phase("cost")
            cost = cost_step(store, run, prof, missing)
            st.phase("report")
            html_path = report_step(store, run, profile, html, missing, st.phase)
    finally:
        store.close()
    return TaskRun(run, choice, doctor, cost, html_path, missing)


def run_answer(run: RunInfo, cost: RunCost | None) -> Answer:
    """The answer `gpuledger run` prints first: the same as ``report`` and ``cost`` print
    (``gpuledger.report.headline``): the price when the run was priced, else what it measured."""
    from gpuledger.cost.comparison.breakeven import run_sensitivity
    from gpuledger.report.headline import cost_answer, measured_answer

    if cost is not None:
        return cost_answer(cost, run_sensitivity(cost), f"run {run.id}")
    return measured_answer(run, f"run {run.id}")


def task_document(
    task: str,
    done: TaskRun[Any],
    spec_type: type[ImageSpec] | type[TrainSpec],
    metrics: dict[str, Any],
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON document of a task's evaluation: its run, choice, doctor, ``metrics``, ``extra``, the
    answer, and the cost's price of each unit the run is priced in and what one currency unit buys of
    each unit it yields (the keys of ``gpuledger cost --json``)."""
    from gpuledger.cost.pricing.model import money_prefix

    run, spec = done.run, done.run.config
    cost = done.cost.to_dict() if done.cost is not None else None
    price: dict[str, Any] = {}
    if done.cost is not None and cost is not None:
        money, s, inputs = money_prefix(done.cost.currency), done.cost.summary, done.cost.inputs
        keys = [inputs.unit(u).price_key(money) for u in s.price_units()]
        keys += [inputs.unit(u).per_money_key(money) for u in s.yield_units()]
        price = {k: cost[k] for k in keys if k in cost}
    return {
        "task": task,
        "run_id": run.id,
        "status": run.status,
        "model": done.choice.model,
        "model_choice": {"reason": done.choice.reason},
        "device": spec.device if isinstance(spec, spec_type) else done.choice.device,
        "dtype": spec.dtype if isinstance(spec, spec_type) else None,
        "workload": run.workload,
        "doctor": done.doctor,
        "metrics": metrics,
        **(extra or {}),
        "answer": run_answer(run, done.cost).model_dump(mode="json"),
        "cost": {"currency": (cost or {}).get("currency"), **price, "document": cost}
        if cost is not None
        else None,
        "report_html": done.html,
        "missing": done.missing,
    }


def answer_of(doc: dict[str, Any]) -> Answer:
    """The answer a run's JSON document carries (``doc["answer"]``), to print."""
    from gpuledger.report.model import Answer

    a = doc["answer"]
    return Answer(
        title=a["title"],
        headline=a["headline"],
        subline=a["subline"],
        facts=tuple((f["label"], f["value"]) for f in a["facts"]),
        why=tuple(a["why"]),
    )


def render_task(doc: dict[str, Any], figures: str) -> None:
    """A task's evaluation on the terminal: what ran and why, then the answer (price first, key figures,
    power, why: the same as ``report`` and ``cost``), ``figures`` (console markup: the task's own line),
    the doctor's counts, the run's id, the report, its warnings and what is missing; a long provenance
    sentence once, at the end."""
    from rich.text import Text

    from gpuledger.report.layout import Notes, paragraph
    from gpuledger.report.terminal import print_answer

    notes = Notes()
    what = f" — {doc['model']} on {doc['device']} ({doc['dtype']}); {doc['model_choice']['reason']}"
    paragraph(console, Text(f"gpuledger run --task {doc['task']}", style="bold") + Text(what), indent=2)
    console.print()
    print_answer(answer_of(doc), console, notes)
    paragraph(console, Text.from_markup(figures), lead="  ", indent=4)
    d = doc["doctor"]
    if d is not None:
        console.print(f"  doctor: {d['errors']} errors, {d['warnings']} warnings", highlight=False)
    console.print(
        f"  run id: {escape(doc['run_id'])} ({escape(doc['status'])}) — gpuledger report "
        f"{escape(doc['run_id'])}",
        highlight=False,
    )
    paragraph(console, doc["report_html"] or "n/a", lead="report: ", indent=0)
    c = doc["cost"]
    warnings = ((c or {}).get("document") or {}).get("warnings") or []
    for w in warnings:
        paragraph(console, notes.shorten(str(w)), lead=Text("  warning: ", style="yellow"), indent=4)
    for line in doc["missing"]:
        paragraph(console, notes.shorten(line), lead=Text("  missing: ", style="yellow"), indent=4)
    notes.print(console)
