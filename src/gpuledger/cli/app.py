"""The ``gpuledger`` typer application: every command by name, its module and its one-line help.

Imported by ``gpuledger.cli.main.main`` after the signal handlers are installed. It imports no command: a
command's module is imported when the command runs or shows its own ``--help`` (``gpuledger.cli.lazy``), so
``gpuledger --version`` and ``gpuledger --help`` start at once.
"""

from __future__ import annotations

import typer

from gpuledger import __version__
from gpuledger.cli.lazy import CommandEntry, LazyGroup

_C = "gpuledger.cli."

# Order = the user's path through the tool (docs/design.md): run first, then the steps.
COMMANDS: tuple[CommandEntry, ...] = (
    CommandEntry("run", _C + "run_cmd",
                 "The whole evaluation in one command: doctor → bench (in-process PyTorch) → cost → HTML "
                 "report."),
    CommandEntry("doctor", _C + "doctor_cmd",
                 "Diagnose the GPU stack bottom up (hardware, kernel, management, runtime, containers, "
                 "WSL2, applications)."),
    CommandEntry("lock", _C + "lock_cmd",
                 "Pin the driver, CUDA/ROCm, PyTorch and engine versions (seed §8.1) and catch drift."),
    CommandEntry("bench", _C + "bench_cmd",
                 "Measure tokens/s, TTFT, TPOT, ITL and E2E of a server under load, with telemetry; store "
                 "the run."),
    CommandEntry("matrix", _C + "matrix_cmd",
                 "Run a benchmark matrix (targets × loads × repeats) on Ray or Slurm into one store, or "
                 "write it as Kubernetes manifests; `show ID` reads one."),
    CommandEntry("sample", _C + "sample_cmd",
                 "Sample utilisation, memory, power and energy of every GPU and the CPU, then summarise."),
    CommandEntry("cost", _C + "cost_cmds",
                 "Cost of a run: hourly cost breakdown, cost per unit of work (1M tokens, 1,000 images, "
                 "...), J/unit."),
    CommandEntry("compare", _C + "cost_cmds",
                 "Compare cost efficiency: the ratio, its decomposition (the throughput ratio taken "
                 "apart), what differs between the runs (like for like), break-even values, sensitivity, "
                 "warnings."),
    CommandEntry("gpus", _C + "cost_cmds",
                 "The GPU catalog: memory, bandwidth, dense TFLOPS, TDP, ids, prices, architecture and "
                 "launch year (each with source and date)."),
    CommandEntry("profiles", _C + "cost_cmds",
                 "Built-in cost presets, each price with its source and date."),
    CommandEntry("estimate", _C + "estimate_cmd",
                 "What-if on another GPU, always labelled an estimate: scale a GPU run by the roofline, or"
                 " put the model's roofline (from a CPU run or from no run) on the GPU at an efficiency "
                 "with its origin."),
    CommandEntry("advise", _C + "advise_cmd",
                 "Rank the catalog GPUs for your workload by cost per 1M output tokens at your TCO (setup "
                 "labour included), with the seed essay's criteria as questions — every figure measured, "
                 "published or estimate."),
    CommandEntry("import-results", _C + "published_cmds",
                 "Store published benchmark points as runs (origin: published), priced and compared like "
                 'measured runs and always labelled "published by SOURCE (DATE), not measured here".'),
    CommandEntry("public", _C + "published_cmds",
                 "The public points shipped with gpuledger (a dated snapshot, each set with its page and "
                 "how it was read), and next to each headline pair that is not like for like the closest "
                 "like-for-like pair; `gpuledger import-results NAME` stores a set."),
    CommandEntry("report", _C + "report_cmd",
                 "Report on one run, or compare several: terminal tables, Markdown, self-contained HTML."),
    CommandEntry("gate", _C + "gate_cmd",
                 "Judge a candidate run or group against a baseline like a test: PASS, FAIL or NOT "
                 "DISTINGUISHABLE per metric, what changed in the stack, exit 1 on a regression."),
    CommandEntry("monitor", _C + "monitor_cmd",
                 "Serve GPU/CPU utilisation, memory, power, energy, temperature and live cost as "
                 "Prometheus metrics."),
    CommandEntry("serve", _C + "serve_cmd",
                 "Serve a read-only web dashboard of the store: runs, reports, comparisons, matrices, "
                 "trends and published points, with a JSON API of the same documents as --json."),
    CommandEntry("runs", _C + "store_cmds",
                 "List stored runs, newest first: id, when, label, engine, model, status, requests "
                 "(steps), what each made in its own unit (output tokens, images, training tokens) and its"
                 " rate."),
    CommandEntry("show", _C + "store_cmds",
                 "Show one run: header, summary (its rate and counts in its own units), latency, "
                 "environment, telemetry, saved cost evaluations."),
    CommandEntry("export", _C + "store_cmds",
                 "Export a run: JSON document (to import elsewhere) or per-request CSV."),
    CommandEntry("delete", _C + "store_cmds",
                 "Delete a run with its requests, telemetry and cost evaluations."),
    CommandEntry("import", _C + "store_cmds",
                 "Add a run exported elsewhere to this store (all or nothing)."),
    CommandEntry("telemetry", _C + "telemetry_cmd",
                 "Telemetry taken elsewhere: attach a log of the server's node to a stored run."),
)


class Commands(LazyGroup):
    ENTRIES = COMMANDS


app = typer.Typer(
    name="gpuledger",
    help="What a token of YOUR workload costs on YOUR GPU stack (NVIDIA, AMD or CPU), and why.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
    cls=Commands,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gpuledger {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print version."),
) -> None:
    """gpuledger: doctor → lock → bench → cost → compare/report → monitor."""
