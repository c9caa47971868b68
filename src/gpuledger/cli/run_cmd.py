"""``gpuledger run``: the whole evaluation in one command, on the command line.

Parse → the options (``kinds.pipeline.RunOptions``) → the pipeline (``kinds.pipeline.run_pipeline``: doctor,
bench, cost, report through the task's ``run`` facet, its progress drawn here on stderr) → the typed result,
printed as JSON (``--json``: its dump) or on the terminal (the answer first). A piece that cannot be done is
one line saying why, never a traceback; only a bench that cannot run at all ends the command with its exit
code.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from gpuledger.cli.common import DbOpt, JsonOpt, console, err_console, print_json

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from gpuledger.kinds.pipeline import RunResult, TaskRunResult
    from gpuledger.kinds.text.run import TextRunResult

# --memory-budget: at most 1 PiB, more than any device has (docs/contracts.md, "Which inputs are bounded");
# RunOptions' own bound (kinds.pipeline.MAX_MEMORY_BUDGET_GIB: a test holds them equal).
MAX_MEMORY_BUDGET_GIB = 2**20
MAX_REPEATS = 100
NA = "n/a"


def num(value: float | int | None, spec: str, unit: str = "") -> str:
    """``value`` formatted with ``spec`` (and ``unit``), or ``n/a`` when there is none."""
    if value is None or isinstance(value, bool):
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


@contextmanager
def steps() -> Iterator[Steps]:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

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


def run_cmd(
    device: Annotated[
        str, typer.Option("--device", help="auto (GPU if PyTorch can use one, else CPU), cpu or cuda "
                          "(NVIDIA, or AMD with the ROCm build).")
    ] = "auto",
    model: Annotated[
        str | None,
        typer.Option("--model", help="dummy:NAME (built-in architecture, random weights: smollm2-135m, "
                     "qwen2.5-0.5b, qwen2.5-7b, llama-3.1-8b) or a model folder / Hugging Face id. "
                     "Default: chosen by device."),
    ] = None,
    dtype: Annotated[str, typer.Option("--dtype", help="auto (bf16 on GPUs that support it, fp32 on CPU), "
                                       "bf16, fp16 or fp32.")] = "auto",
    profile: Annotated[
        str | None, typer.Option("--profile", help="Cost profile (preset name or YAML file). Default: from "
                                 "the detected hardware via the catalog.")
    ] = None,
    html: Annotated[
        Path | None, typer.Option("--html", help="Write the HTML report here (default: the data dir's "
                                  "reports/run-ID.html).")
    ] = None,
    quick: Annotated[bool, typer.Option("--quick", help="An even shorter run.")] = False,
    memory_budget: Annotated[
        float | None, typer.Option("--memory-budget", help="GiB the model may use (default: the device's "
                                   "free memory).", min=0.0, max=float(MAX_MEMORY_BUDGET_GIB))
    ] = None,
    label: Annotated[str, typer.Option("--label", help="Label stored with the run.")] = "",
    telemetry_from: Annotated[
        list[str] | None,
        typer.Option("--telemetry-from", help="Also read this exporter's /metrics during the run (e.g. the "
                     "node's dcgm-exporter: http://127.0.0.1:9400/metrics?gpu=0). Repeatable."),
    ] = None,
    repeats: Annotated[
        int,
        typer.Option("--repeat", min=1, max=MAX_REPEATS, help="Measure N times, one stored run each, in one "
                     "group (g-…): the answer gives each figure's mean with its 95 % interval."),
    ] = 1,
    task: Annotated[
        str, typer.Option("--task", help="text (an LLM, the default), image (dummy:sdxl on a GPU with "
                          "room, else dummy:tiny-sd; docs/image.md) or train (dummy:qwen2.5-0.5b on a GPU "
                          "with room, else dummy:smollm2-135m; docs/train.md).")
    ] = "text",
    db: DbOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """The whole evaluation in one command: doctor → bench (in-process PyTorch) → cost → HTML report."""
    from gpuledger.cli import files
    from gpuledger.cli.common import environment_fingerprint
    from gpuledger.kinds.pipeline import PipelineHooks, RunOptions, run_pipeline
    from gpuledger.records.spec import checked

    options = checked(RunOptions, {
        "task": task, "device": device, "model": model, "dtype": dtype, "profile": profile, "html": html,
        "quick": quick, "memory_budget_gib": memory_budget, "label": label,
        "telemetry_from": tuple(telemetry_from or ()), "repeats": repeats, "db": db,
    })
    with steps() as st:
        result = run_pipeline(options, PipelineHooks(on_phase=st.phase, on_progress=st.advance,
                                                     environment=environment_fingerprint, files=files))
    if json_out:
        print_json(result.document())
    else:
        render(result)


def render(result: RunResult) -> None:
    """The result on the terminal: a task's own layout (text generation, or a task with one figures line)."""
    from gpuledger.kinds.pipeline import TaskRunResult
    from gpuledger.kinds.text.run import TextRunResult

    if isinstance(result, TaskRunResult):
        render_task(result)
    elif isinstance(result, TextRunResult):
        render_text(result)
    else:
        raise TypeError(f"no terminal layout for {type(result).__name__}")


def render_text(r: TextRunResult) -> None:
    """The answer first (price, key figures, power, why: the same as ``report`` and ``cost``), then what
    was run and where the report is, fitted to the terminal; a long provenance rule (the CPU power
    estimate) once, at the end; a group's answer after it (``--repeat N``)."""
    from rich.text import Text

    from gpuledger.engines.torch.device import torch_text
    from gpuledger.records.torchspec import gib
    from gpuledger.report.layout import Notes, paragraph, print_table
    from gpuledger.report.terminal import print_answer

    notes = Notes()
    dev, m, wl, p, c = r.device, r.metrics, r.workload, r.power, r.cost
    notes.file(p.priced_source)
    where = f"{dev.torch_device}, {torch_text(dev.torch_version, dev.build)}, {r.dtype}"
    head = Text("gpuledger run", style="bold") + Text(f" — {r.model.name} on {dev.name} ({where})")
    paragraph(console, head, indent=2)
    console.print()
    print_answer(r.answer, console, notes)
    rows: list[tuple[str, str]] = []
    d = r.doctor
    if d is not None:
        worst = ", ".join(f"{f.severity}: {f.title}" for f in d.findings[:3])
        counts = f"{d.errors} errors, {d.warnings} warnings"
        rows.append(("doctor", counts + (f" ({worst})" if worst else "")))
    rows.append((
        "workload",
        f"{m.num_requests} requests, batch {wl.get('batch_size')}, {wl.get('input_tokens')} tokens in / "
        f"{wl.get('output_tokens')} out (token ids, fixed output length); engine token count, "
        f"window {num(m.window_s, '.1f', ' s')}",
    ))
    if p.measured_w is not None:
        rows.append(("power measured", f"{p.measured_w:.0f} W mean"))
    else:
        rows.append(("power measured", notes.shorten(f"no — {p.reason}")))
    mem = r.memory
    tele = "; ".join(
        f"{t.device} {gib(t.peak_memory_bytes)} "
        + ("machine-wide RAM in use" if t.device == "cpu" else "device memory in use")
        + f" (telemetry: {', '.join(t.sources or [])})"
        for t in mem.telemetry_peak
    )
    peak = mem.peak
    rows.append(("peak memory", f"{gib(peak.value) if peak.value is not None else NA} ({peak.source}: "
                 f"{peak.method})"
                 + (f"; {tele}" if tele else "") + f"; estimate {gib(mem.estimate.total_bytes)}"))
    if c is not None:
        rows.append(("cost per hour", f"{num(c.per_hour, '.4g')} {c.currency}/hour (profile {c.profile})"))
    rows.append(("run id", f"{r.run_id} ({r.status}) — gpuledger report {r.run_id} / gpuledger cost "
                 f"{r.run_id}"))
    rows.append(("next", f"same workload elsewhere: gpuledger export {r.run_id} -o run.json; there: "
                 f"gpuledger import run.json && gpuledger bench --like {r.run_id}"))
    print_table(console, "", ("", ""), rows, compact=True, header=False)
    # The report's path on lines of its own, unindented: copied from the terminal it is the path.
    paragraph(console, r.report_html or NA, lead="report: ", indent=0)
    for w in [*r.warnings, *(c.warnings if c is not None else [])]:
        paragraph(console, notes.shorten(str(w)), lead=Text("  warning: ", style="yellow"), indent=4)
    for line in r.missing:
        paragraph(console, notes.shorten(line), lead=Text("  missing: ", style="yellow"), indent=4)
    notes.print(console)
    if r.group_answer is not None:
        console.print()
        print_answer(r.group_answer, console)


def render_task(r: TaskRunResult) -> None:
    """A task's evaluation on the terminal: what ran and why, then the answer (price first, key figures,
    power, why: the same as ``report`` and ``cost``), the task's own figures line, the doctor's counts, the
    run's id, the report, the cost's warnings and what is missing; a long provenance sentence once, at the
    end."""
    from rich.text import Text

    from gpuledger.report.layout import Notes, paragraph
    from gpuledger.report.terminal import print_answer

    notes = Notes()
    what = f" — {r.model} on {r.device} ({r.dtype}); {r.model_choice.reason}"
    paragraph(console, Text(f"gpuledger run --task {r.task}", style="bold") + Text(what), indent=2)
    console.print()
    print_answer(r.answer, console, notes)
    paragraph(console, Text.from_markup(r.figures()), lead="  ", indent=4)
    d = r.doctor
    if d is not None:
        console.print(f"  doctor: {d.errors} errors, {d.warnings} warnings", highlight=False)
    console.print(
        f"  run id: {escape(r.run_id)} ({escape(r.status)}) — gpuledger report {escape(r.run_id)}",
        highlight=False,
    )
    paragraph(console, r.report_html or NA, lead="report: ", indent=0)
    warnings = r.cost.document.warnings if r.cost is not None else []
    for w in warnings:
        paragraph(console, notes.shorten(str(w)), lead=Text("  warning: ", style="yellow"), indent=4)
    for line in r.missing:
        paragraph(console, notes.shorten(line), lead=Text("  missing: ", style="yellow"), indent=4)
    notes.print(console)


def register(app: typer.Typer) -> None:
    """Add ``gpuledger run`` to ``app``."""
    app.command("run")(run_cmd)
