"""``gpuledger bench``: measure an inference server (OpenAI-compatible or Ollama) or the in-process
torch engine with a dataset and a load pattern; every finished request is stored as it finishes.

Exit codes: 0 done; 2 bad flags; 3 dataset file missing; 4 bad dataset file; 5 store error;
6 server unreachable / refused the run; 7 torch missing (``--engine torch``); 130 interrupted
(the run is kept as ``incomplete`` with every finished request).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from gpuledger.cli.common import DbOpt, JsonOpt, err_console
from gpuledger.cli.train_opts import (
    CheckpointingOpt,
    CompileOpt,
    DataOpt,
    GradAccumOpt,
    LearningRateOpt,
    OptimizerOpt,
    SeqLenOpt,
    WarmupStepsOpt,
)
from gpuledger.cli.workload_opts import (
    PrefixGroupsOpt,
    PrefixLenOpt,
    PrefixRatioOpt,
    ThinkTimeOpt,
    TraceOpt,
    TraceSpeedOpt,
    TurnsOpt,
)
from gpuledger.errors import EngineError, Interrupted, UsageError
from gpuledger.records.kinds import engine_names_of_kinds, kinds

if TYPE_CHECKING:
    from gpuledger.records import RunInfo

# The options' help is written from the kinds' descriptors (records/kinds.py: each kind names its engines),
# which import nothing of the bench, the engines or the store: `bench --help` starts at once.
_ENGINES = engine_names_of_kinds()
ENGINE_HELP = "; ".join(f"{e.name}: {e.about}" for e in _ENGINES) + "."
BASE_URL_HELP = "Server URL (default " + ", ".join(
    f"{e.default_base_url} for {e.name}" for e in _ENGINES if e.default_base_url
) + ")."
TASK_HELP = "; ".join(f"{k.name}: {k.about}" for k in kinds()) + " (default text)."
ENDPOINT_HELP = "; ".join(
    f"{e.name}: " + " | ".join(f"{n} (default)" if i == 0 else n for i, (n, _) in enumerate(e.endpoints))
    for e in _ENGINES if e.endpoints
) + "."
# The command line's names of two options whose parameters cannot be called so (typer, Python).
RENAMED = {"set_inputs": "set", "compile_model": "compile"}


def _from_command_line(ctx: typer.Context, name: str) -> bool:
    """Was parameter ``name`` given on the command line (or its environment variable), not defaulted?"""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def command_line(ctx: typer.Context) -> tuple[dict[str, Any], set[str]]:
    """The parsed values by option name (``--set`` is ``set``) and the options given on the command line:
    what the task's options model is made of (``bench.options.options_of``)."""
    values = {RENAMED.get(k, k): v for k, v in ctx.params.items()}
    given = {RENAMED.get(k, k) for k in ctx.params if _from_command_line(ctx, k)}
    return values, given


def bench(
    ctx: typer.Context,
    engine: Annotated[
        str,
        typer.Option(
            "--engine", help=ENGINE_HELP
        ),
    ] = "openai",
    base_url: Annotated[
        str | None,
        typer.Option(
            "--base-url",
            help=BASE_URL_HELP,
        ),
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", help="Model name (default: the server's first).")
    ] = None,
    model_config: Annotated[
        Path | None,
        typer.Option("--model-config", help="A server run: the served model's config.json (or its folder), "
                     "kept with the run for its MBU and MFU when the model name is not a known one."),
    ] = None,
    endpoint: Annotated[
        str | None,
        typer.Option(
            "--endpoint", help=ENDPOINT_HELP
        ),
    ] = None,
    dataset: Annotated[
        str | None,
        typer.Option(
            "--dataset",
            help="builtin | random | jsonl | sharegpt (default: random with --input-len, else builtin).",
        ),
    ] = None,
    dataset_path: Annotated[
        Path | None, typer.Option("--dataset-path", help="File for jsonl / sharegpt.")
    ] = None,
    input_len: Annotated[
        int | None, typer.Option("--input-len", help="random: input tokens per request.")
    ] = None,
    output_len: Annotated[
        int | None,
        typer.Option(
            "--output-len", help="Output tokens per request, forced where the server allows (ignore_eos)."
        ),
    ] = None,
    range_ratio: Annotated[
        float,
        typer.Option(
            "--range-ratio", help="random: lengths drawn uniformly within ±R of the given length (0 ≤ R < 1)."
        ),
    ] = 0.0,
    turns: TurnsOpt = None,
    think_time: ThinkTimeOpt = None,
    prefix_len: PrefixLenOpt = None,
    prefix_ratio: PrefixRatioOpt = None,
    prefix_groups: PrefixGroupsOpt = None,
    trace: TraceOpt = None,
    trace_speed: TraceSpeedOpt = None,
    concurrency: Annotated[
        int | None,
        typer.Option("--concurrency", help="Requests in flight (default 8); with --rate: the cap."),
    ] = None,
    rate: Annotated[
        float | None, typer.Option("--rate", help="Poisson arrivals, requests per second.")
    ] = None,
    sweep: Annotated[
        str | None, typer.Option("--sweep", help="Concurrencies to run in turn, e.g. 1,4,16,64.")
    ] = None,
    num_requests: Annotated[
        int | None, typer.Option("--num-requests", help="Measured requests (per sweep stage; default 64).")
    ] = None,
    duration: Annotated[
        float | None,
        typer.Option(
            "--duration", help="Seconds to send requests for (per sweep stage), instead of a count."
        ),
    ] = None,
    warmup: Annotated[int, typer.Option("--warmup", help="Requests sent first and not measured.")] = 1,
    seed: Annotated[
        int | None,
        typer.Option("--seed", help="Seed for prompt choice, lengths and arrivals (default 0; comfyui: a "
                     "fresh one per run, kept with it; openai-images: none sent)."),
    ] = None,
    slo: Annotated[
        str | None,
        typer.Option(
            "--slo", help="Goodput limits, e.g. ttft_ms=500,tpot_ms=50 (keys: ttft_ms, tpot_ms, e2e_ms)."
        ),
    ] = None,
    label: Annotated[str, typer.Option("--label", help="A label to find the run by.")] = "",
    telemetry: Annotated[
        bool, typer.Option("--telemetry/--no-telemetry", help="Sample GPU/CPU telemetry.")
    ] = True,
    telemetry_interval: Annotated[
        float, typer.Option("--telemetry-interval", help="Seconds between readings.")
    ] = 0.1,
    telemetry_from: Annotated[
        list[str] | None,
        typer.Option("--telemetry-from", help="Telemetry of the server's node: an exporter's /metrics "
                     "(dcgm-exporter, AMD device-metrics-exporter, gpuledger monitor) sampled during the "
                     "run, e.g. http://gpu-node:9400/metrics?gpu=0,1, or prometheus+http://PROM:9090?"
                     "selector=... read after it. Repeatable (docs/telemetry.md)."),
    ] = None,
    server_metrics: Annotated[
        bool,
        typer.Option(
            "--server-metrics/--no-server-metrics",
            help="Read the server's own /metrics (vLLM, SGLang, llama.cpp) before the window and after each "
            "stage: queue time, preemptions, and why: lines (off by default: see docs/bench.md).",
        ),
    ] = False,
    server_metrics_interval: Annotated[
        float | None,
        typer.Option(
            "--server-metrics-interval",
            help="Also sample requests running/waiting and KV cache every S seconds DURING the window "
            "(costs the server CPU: it can change what is measured).",
        ),
    ] = None,
    request_timeout: Annotated[
        float,
        typer.Option("--request-timeout", help="Seconds one request may take before it counts as failed."),
    ] = 300.0,
    api_key_env: Annotated[
        str,
        typer.Option(
            "--api-key-env", help="Environment variable holding the API key (sent as Bearer; never stored)."
        ),
    ] = "OPENAI_API_KEY",
    device: Annotated[
        str | None,
        typer.Option("--device", help="torch, diffusers and --task train only: auto | cpu | cuda."),
    ] = None,
    dtype: Annotated[
        str | None,
        typer.Option("--dtype", help="torch, diffusers and --task train only: auto | fp32 | bf16 | fp16 "
                     "(train: autocast over fp32 weights, fp16 with a grad scaler)."),
    ] = None,
    task: Annotated[
        str | None,
        typer.Option("--task", help=TASK_HELP),
    ] = None,
    steps: Annotated[
        int | None,
        typer.Option("--steps", help="image: denoising steps per image; train: optimizer steps measured "
                     "(default 10)."),
    ] = None,
    height: Annotated[int | None, typer.Option("--height", help="image: height in pixels.")] = None,
    width: Annotated[int | None, typer.Option("--width", help="image: width in pixels.")] = None,
    batch_size: Annotated[
        int | None,
        typer.Option("--batch-size", help="image: images per request (one pipeline call / prompt); train: "
                     "sequences per micro-batch on each device."),
    ] = None,
    guidance: Annotated[float | None, typer.Option("--guidance", help="image: guidance scale (CFG).")] = None,
    scheduler: Annotated[
        str | None, typer.Option("--scheduler", help="diffusers: euler, euler_a, ddim, dpmpp_2m, pndm, lms, "
                                 "heun, unipc, flow_euler or a diffusers class name.")
    ] = None,
    num_images: Annotated[
        int | None, typer.Option("--num-images", help="image: images to measure (default 8).")
    ] = None,
    workflow: Annotated[
        Path | None, typer.Option("--workflow", help="comfyui: your workflow, in ComfyUI's API format.")
    ] = None,
    set_inputs: Annotated[
        list[str] | None,
        typer.Option("--set", help="comfyui: NODE_ID.INPUT=VALUE sets an input of a workflow node "
                     "(repeatable)."),
    ] = None,
    prompt: Annotated[
        str | None, typer.Option("--prompt", help="image: the prompt of every request.")
    ] = None,
    negative_prompt: Annotated[
        str | None, typer.Option("--negative-prompt", help="image: the negative prompt.")
    ] = None,
    # --task train (cli/train_opts.py, docs/train.md)
    seq_len: SeqLenOpt = None,
    grad_accum: GradAccumOpt = None,
    warmup_steps: WarmupStepsOpt = None,
    optimizer: OptimizerOpt = None,
    learning_rate: LearningRateOpt = None,
    activation_checkpointing: CheckpointingOpt = False,
    compile_model: CompileOpt = False,
    data: DataOpt = None,
    workers: Annotated[
        int,
        typer.Option("--workers", min=1, max=256, help="Send the load from N processes (each its own event "
                     "loop, a share of the concurrency or rate), merged into one run: more load than one "
                     "process offers (docs/matrix.md)."),
    ] = 1,
    ray: Annotated[
        str | None,
        typer.Option("--ray", help="With --workers: the load processes as Ray actors on this cluster "
                     "(auto, or a head's HOST:6379 / ray://HOST:10001; local: a Ray instance here)."),
    ] = None,
    like: Annotated[
        str | None,
        typer.Option(
            "--like",
            help="Repeat the workload of a stored run (id or prefix): dataset, lengths, load, counts, "
            "warm-up, seed, SLOs. Flags given here override it; the server and model are not copied.",
        ),
    ] = None,
    progress: Annotated[
        bool | None,
        typer.Option("--progress/--no-progress", help="Progress on stderr: the preparation, then a live bar "
                     "(default: when stderr is a terminal)."),
    ] = None,
    repeats: Annotated[
        int,
        typer.Option(
            "--repeat",
            min=1,
            max=1000,
            help="Run the same spec N times, one stored run each, in one group (g-…): cost, compare and "
            "report of the group give each figure's mean with its 95 % interval.",
        ),
    ] = 1,
    gate: Annotated[
        bool,
        typer.Option("--gate", help="With --like RUN: judge the new run(s) against RUN as `gpuledger gate` "
                     "does (default thresholds; --json: the verdict only); exit 1 on a regression."),
    ] = False,
    db: DbOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Measure tokens/s, TTFT, TPOT, ITL and E2E of a server under load, with telemetry; store the run."""
    from gpuledger.bench.flags import require
    from gpuledger.bench.like import check_dataset, engine_of_repeat, repeat
    from gpuledger.bench.options import options_of, spec_of
    from gpuledger.bench.runner import Hooks, run_bench_async
    from gpuledger.bench.tasks import engine_for_task
    from gpuledger.cli.common import environment_fingerprint
    from gpuledger.engines import engine_kind
    from gpuledger.kinds.text.spec import ServerSpec
    from gpuledger.store import open_store

    values, given = command_line(ctx)
    if gate and like is None:
        raise UsageError("--gate judges the new run(s) against the run repeated: give --like RUN")
    if like is None or "engine" in given or task is not None:  # a repeat's engine is the stored run's
        engine = values["engine"] = engine_for_task(task, engine, "engine" in given)
    stored = None
    if like is not None:
        with open_store(db) as store:
            stored = store.get_run(like)
        kind = engine_of_repeat(stored, engine, given)
    else:
        kind = engine_kind(engine)
    # The task's options, validated once: every option's bound, the options of another task refused.
    options = options_of(kind, values, given)
    asked = options.document(kind)
    spec = repeat(stored, asked, kind, given) if stored is not None else spec_of(kind, asked)
    require(spec)  # every flag problem is exit 2 before anything is opened
    from gpuledger.bench.workers import check_workers

    check_workers(spec, workers)  # bench --workers N: the load must split N ways (exit 2)
    if ray is not None and workers < 2:
        raise UsageError("--ray places the load processes of --workers N (N ≥ 2) on a Ray cluster")
    from gpuledger.cli.bench_train import follows

    if follows(spec):  # a data-parallel training run's other ranks: rank 0 stores and prints the run
        return
    if stored is not None and isinstance(spec, ServerSpec) and spec.dataset is not None:
        check_dataset(stored, spec.dataset.path)
    show_progress = progress if progress is not None else err_console.is_terminal

    def created(run_id: str) -> None:
        if show_progress:
            err_console.print(f"run [bold]{run_id}[/bold]: measuring…")

    def warned(text: str) -> None:  # the store writer's, while the run goes on (RunWriter)
        err_console.print(f"[yellow]warning:[/yellow] {escape(text)}")

    def phase(text: str) -> None:  # the engine's (planning and loading a model) and the runner's
        if show_progress:
            err_console.print(f"[dim]{escape(text)}[/dim]")

    from gpuledger.telemetry.remotes import check_remote_urls

    check_remote_urls(telemetry_from or ())  # a malformed URL is exit 2 before anything is opened
    hooks = Hooks(on_run_created=created, on_warning=warned, on_phase=phase,
                  environment=environment_fingerprint, telemetry_from=tuple(telemetry_from or ()),
                  console=err_console, workers=workers, cluster=ray)
    store = open_store(db)
    try:
        if repeats > 1:  # one group of N runs of the same spec (cli/groups.py)
            from dataclasses import replace

            from gpuledger.cli.bench_render import render_run
            from gpuledger.cli.groups import print_repeats, run_repeats

            group, runs = run_repeats(repeats, lambda extra: asyncio.run(
                run_bench_async(spec, store, progress=show_progress, hooks=replace(hooks, workload=extra))))
            if not (gate and json_out):
                print_repeats(group, runs, render_run, json_out=json_out)
            _exit_for(runs[-1])
            if gate and like is not None:  # bench --like RUN --gate (cli/gate_cmd.py, docs/gate.md)
                from gpuledger.cli.gate_cmd import gate_after_bench

                gate_after_bench(store, like, runs, json_out=json_out)
            return
        info = asyncio.run(run_bench_async(spec, store, progress=show_progress, hooks=hooks))
        if gate and like is not None:
            from gpuledger.cli.gate_cmd import gate_after_bench

            if json_out:  # the verdict is the only JSON document
                _exit_for(info)
            else:
                _emit(info, False)
            gate_after_bench(store, like, [info], json_out=json_out)
            return
    finally:
        store.close()
    _emit(info, json_out)


def _emit(info: RunInfo, json_out: bool) -> None:
    from gpuledger.cli.bench_render import render_run
    from gpuledger.cli.common import print_json

    if json_out:
        print_json(info)
    else:
        render_run(info)
    _exit_for(info)


def _exit_for(info: RunInfo) -> None:
    """The run did not end as planned: its error, with the documented exit code."""
    summary = info.summary
    aborted = summary.aborted if summary is not None else None
    if aborted:
        sys.stdout.flush()
        raise EngineError(f"run {info.id} stopped and was kept as incomplete: {aborted}")
    interrupted = summary.interrupted if summary is not None else None
    if interrupted:
        sys.stdout.flush()
        if info.status == "cancelled":
            raise Interrupted(
                f"{interrupted.signal}: no request had finished; run {info.id} is stored as cancelled "
                "(nothing measured)"
            )
        raise Interrupted(
            f"{interrupted.signal}: run {info.id} saved as incomplete with "
            f"{interrupted.finished_requests} finished requests"
        )
    if info.status == "failed":  # every request failed (RunWriter.finish): the engine's error, exit 6
        sys.stdout.flush()
        examples = (summary.error_examples if summary is not None else None) or []
        first = examples[0].error if examples else None
        failed = summary.num_failed if summary is not None else info.num_requests
        raise EngineError(
            f"run {info.id}: all {failed} requests failed; the first: {first}",
            hint="check --model, --endpoint and the server's log",
        )


def register(app: typer.Typer) -> None:
    """Add ``gpuledger bench`` to ``app``."""
    app.command("bench")(bench)
