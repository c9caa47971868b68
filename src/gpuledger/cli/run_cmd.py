"""``gpuledger run``: the whole evaluation in one command.

doctor (collect facts, diagnose, file in the ledger) → bench (in-process PyTorch engine on the best
device this machine has; default model by device) → cost (profile from the detected hardware) →
report (terminal summary + one HTML file). A piece that cannot be done is one line saying why, never
a traceback; only a bench that cannot run at all ends the command with its exit code.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuledger.cli.common import DbOpt, JsonOpt, console, print_json
from gpuledger.cli.files import check_target
from gpuledger.cli.run_steps import (
    NA,
    Steps,
    answer_of,
    cost_step,
    doctor_step,
    num,
    raise_if_stopped,
    report_step,
    run_answer,
    steps,
)
from gpuledger.errors import EngineError, InvalidInputError, MissingDependencyError, UsageError
from gpuledger.records import dump_summary

if TYPE_CHECKING:
    from gpuledger.bench.choice import RunChoice
    from gpuledger.cost import RunCost
    from gpuledger.engines.torch.device import DeviceInfo
    from gpuledger.engines.torch.models import ModelPlan
    from gpuledger.quantity import Quantity
    from gpuledger.records import RunInfo
    from gpuledger.records.torchspec import MemoryEstimate
    from gpuledger.store import Store

# --memory-budget: at most 1 PiB, more than any device has (docs/contracts.md, "Which inputs are bounded").
MAX_MEMORY_BUDGET_GIB = 2**20


def _block(summary: dict[str, Any], key: str) -> dict[str, Any]:
    value = summary.get(key)
    return value if isinstance(value, dict) else {}


def _on_device(d: dict[str, Any], device_type: str) -> bool:
    """Is telemetry summary ``d`` about the device the run computed on (the CPU, or a GPU)?"""
    vendor = d.get("vendor")
    return vendor == "cpu" if device_type == "cpu" else vendor in ("nvidia", "amd")


def _power(run: RunInfo, device_type: str, cost: dict[str, Any] | None) -> dict[str, Any]:
    """Measured mean power over the window per device, or why there is none; plus what cost used."""
    measured = [
        {"device": d.get("device"), "name": d.get("name"), "mean_power_w": d.get("mean_power_w"),
         "energy_j": d.get("energy_j"), "energy_method": d.get("energy_method"),
         "reason": d.get("energy_reason") or (d.get("unavailable") or {}).get("power_w")}
        for d in run.telemetry_summary
        if _on_device(d, device_type)
    ]
    watts = [m["mean_power_w"] for m in measured if isinstance(m.get("mean_power_w"), int | float)]
    out: dict[str, Any] = {
        "measured_w": sum(watts) if watts else None,
        "unit": "W",
        "devices": measured,
        "reason": None,
        "priced_w": None,
        "priced_source": None,
        "priced_is_estimate": None,
    }
    if not watts:
        reasons = sorted({str(m["reason"]) for m in measured if m.get("reason")})
        out["reason"] = "; ".join(reasons) if reasons else "no telemetry source reported power for the device"
    if cost is not None:
        p = cost.get("power") or {}
        out["priced_w"] = p.get("average_w")
        out["priced_source"] = p.get("power_source")
        out["priced_is_estimate"] = p.get("estimate")
    return out


def _money_key(cost: dict[str, Any], suffix: str) -> tuple[str | None, Any]:
    for key, value in cost.items():
        if key.endswith(suffix) and re.fullmatch(r"[a-z]{3}" + re.escape(suffix), key):
            return key, value
    return None, None


@dataclass(slots=True)
class MeasuredRun:
    """The stored run and the in-process engine's own view of it (the plan, device and memory it used)."""

    run: RunInfo
    plan: ModelPlan
    device: DeviceInfo
    dtype: str
    estimate: MemoryEstimate
    peak_memory: Quantity
    warnings: list[str]


def _document(
    bench: MeasuredRun, doctor: dict[str, Any] | None, priced: RunCost | None,
    html: str | None, missing: list[str], reason: str, skipped: list[str],
) -> dict[str, Any]:
    cost = priced.to_dict() if priced is not None else None
    run = bench.run
    s = dump_summary(run.summary)
    ttft = _block(s, "ttft_ms")
    tpot = _block(s, "tpot_ms")
    telemetry_peak = [
        {"device": d.get("device"), "peak_memory_bytes": d.get("peak_memory_bytes"),
         "sources": d.get("sources")}
        for d in run.telemetry_summary
        if d.get("peak_memory_bytes") is not None and _on_device(d, bench.device.type)
    ]
    doc: dict[str, Any] = {
        "run_id": run.id,
        "status": run.status,
        "model": bench.plan.to_dict(),
        "model_choice": {"reason": reason, "skipped": skipped},
        "device": bench.device.to_dict(),
        "dtype": bench.dtype,
        "workload": {**run.workload, "batch_size": run.config.fixed_concurrency()},
        "doctor": doctor,
        "metrics": {
            "output_tokens_per_s": s.get("output_tokens_per_s"),
            "total_tokens_per_s": s.get("total_tokens_per_s"),
            "ttft_ms_p50": ttft.get("p50"),
            "ttft_ms_mean": ttft.get("mean"),
            "tpot_ms_p50": tpot.get("p50"),
            "num_requests": s.get("num_requests"),
            "window_s": s.get("window_s"),
            "token_source": "engine (tokens generated by the in-process model)",
        },
        "memory": {
            "estimate": bench.estimate.to_dict(),
            "peak": bench.peak_memory.to_dict(),
            "telemetry_peak": telemetry_peak,
        },
        "power": _power(run, bench.device.type, cost),
        # The same answer as `gpuledger report` and `cost` (gpuledger.report.headline): price first.
        "answer": run_answer(run, priced).model_dump(mode="json"),
        "cost": None,
        "report_html": html,
        "missing": missing,
        "warnings": bench.warnings,
    }
    if cost is not None:
        key, per_1m = _money_key(cost, "_per_1m_tokens")
        okey, per_1m_out = _money_key(cost, "_per_1m_output_tokens")
        hkey, per_hour = _money_key(cost, "_per_hour")
        doc["cost"] = {
            "currency": cost.get("currency"),
            "profile": (cost.get("profile") or {}).get("name"),
            "per_1m_tokens": per_1m,
            "per_1m_tokens_key": key,
            "per_1m_output_tokens": per_1m_out,
            "per_1m_output_tokens_key": okey,
            "per_hour": per_hour,
            "per_hour_key": hkey,
            "warnings": cost.get("warnings", []),
            "document": cost,
        }
    return doc


def _render(doc: dict[str, Any]) -> None:
    """The answer first (price, key figures, power, why: the same as ``report`` and ``cost``), then what
    was run and where the report is, fitted to the terminal; a long provenance rule (the CPU power
    estimate) once, at the end."""
    from rich.text import Text

    from gpuledger.engines.torch.device import torch_text
    from gpuledger.records.torchspec import gib
    from gpuledger.report.layout import Notes, paragraph, print_table
    from gpuledger.report.terminal import print_answer

    notes = Notes()
    dev = doc["device"]
    m = doc["metrics"]
    wl = doc["workload"]
    p = doc["power"]
    c = doc["cost"]
    notes.file(p.get("priced_source"))
    where = f"{dev['torch_device']}, {torch_text(dev['torch_version'], dev['build'])}, {doc['dtype']}"
    paragraph(
        console,
        Text("gpuledger run", style="bold") + Text(f" — {doc['model']['name']} on {dev['name']} ({where})"),
        indent=2,
    )
    console.print()
    print_answer(answer_of(doc), console, notes)
    rows: list[tuple[str, str]] = []
    d = doc["doctor"]
    if d is not None:
        worst = ", ".join(f"{f['severity']}: {f['title']}" for f in d["findings"][:3])
        counts = f"{d['errors']} errors, {d['warnings']} warnings"
        rows.append(("doctor", counts + (f" ({worst})" if worst else "")))
    rows.append((
        "workload",
        f"{m['num_requests']} requests, batch {wl.get('batch_size')}, {wl.get('input_tokens')} tokens in / "
        f"{wl.get('output_tokens')} out (token ids, fixed output length); engine token count, "
        f"window {num(m['window_s'], '.1f', ' s')}",
    ))
    if p["measured_w"] is not None:
        rows.append(("power measured", f"{p['measured_w']:.0f} W mean"))
    else:
        rows.append(("power measured", notes.shorten(f"no — {p['reason']}")))
    mem = doc["memory"]
    peak = mem["peak"]
    tele = "; ".join(
        f"{t['device']} {gib(t['peak_memory_bytes'])} "
        + ("machine-wide RAM in use" if t["device"] == "cpu" else "device memory in use")
        + f" (telemetry: {', '.join(t['sources'] or [])})"
        for t in mem["telemetry_peak"]
    )
    rows.append(("peak memory", f"{gib(peak['value'])} ({peak['source']}: {peak['method']})"
                 + (f"; {tele}" if tele else "") + f"; estimate {gib(mem['estimate']['total_bytes'])}"))
    if c is not None:
        cur = c["currency"] or ""
        rows.append(("cost per hour", f"{num(c['per_hour'], '.4g')} {cur}/hour (profile {c['profile']})"))
    rows.append(("run id", f"{doc['run_id']} ({doc['status']}) — gpuledger report {doc['run_id']} / "
                 f"gpuledger cost {doc['run_id']}"))
    rows.append(("next", f"same workload elsewhere: gpuledger export {doc['run_id']} -o run.json; there: "
                 f"gpuledger import run.json && gpuledger bench --like {doc['run_id']}"))
    print_table(console, "", ("", ""), rows, compact=True, header=False)
    # The report's path on lines of its own, unindented: copied from the terminal it is the path.
    paragraph(console, doc["report_html"] or NA, lead="report: ", indent=0)
    for w in doc["warnings"] + (c["warnings"] if c is not None else []):
        paragraph(console, notes.shorten(str(w)), lead=Text("  warning: ", style="yellow"), indent=4)
    for line in doc["missing"]:
        paragraph(console, notes.shorten(line), lead=Text("  missing: ", style="yellow"), indent=4)
    notes.print(console)


def _task_run(task: str) -> Callable[..., None] | None:
    """The whole evaluation of a task that has its own (its module: ``run_image``, ``run_train``), else None:
    text generation is this module's."""
    if task == "image":
        from gpuledger.cli.run_image import run_image

        return run_image
    if task == "train":
        from gpuledger.cli.run_train import run_train

        return run_train
    return None


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
        typer.Option("--repeat", min=1, max=100, help="Measure N times, one stored run each, in one group "
                     "(g-…): the answer gives each figure's mean with its 95 % interval."),
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
    from gpuledger.bench.tasks import task_named
    from gpuledger.telemetry.remote import check_remote_urls

    own = _task_run(task_named(task).name)  # a task with its own whole evaluation (image, train)
    if own is not None:
        if memory_budget is not None or telemetry_from or repeats > 1:
            raise UsageError("--memory-budget, --telemetry-from and --repeat are for --task text")
        if html is not None:
            check_target(html)
        own(device=device, model=model, dtype=dtype, profile=profile, html=html, label=label,
            quick=quick, db=db, json_out=json_out)
        return

    check_remote_urls(telemetry_from or ())
    from gpuledger.bench.choice import choose_run
    from gpuledger.cost.comparison.groups import REPEAT_KEY, new_group_id, repeat_record, summarize_group
    from gpuledger.engines.torch.device import DEVICE_CHOICES
    from gpuledger.engines.torch.imports import torch_status
    from gpuledger.records.torchspec import GIB
    from gpuledger.store import open_store

    if device not in DEVICE_CHOICES:
        raise UsageError(f"--device must be one of {', '.join(DEVICE_CHOICES)} (got {device!r})")
    if html is not None and html.suffix.lower() not in (".html", ".htm"):
        raise InvalidInputError(f"--html {html}: give a file name ending in .html or .htm")
    if html is not None:
        check_target(html)  # before minutes of work, not after
    budget = int(memory_budget * GIB) if memory_budget is not None else None
    ok, why = torch_status()
    if not ok:  # before minutes of doctoring: without torch there is nothing to measure in-process
        raise MissingDependencyError(
            why, hint="doctor, lock, bench against a server, cost, compare and report work without it"
        )
    prof = None
    if profile is not None:
        from gpuledger.cost import load_profile

        prof = load_profile(profile)  # a bad --profile fails now, before minutes of measuring
    missing: list[str] = []
    store = open_store(db)
    try:
        with steps() as st:
            st.phase("choosing device and model")  # first: a model that cannot run fails at once
            choice = choose_run(device, model, dtype, quick, budget)
            st.phase("doctor: collecting facts about the stack")
            doctor = doctor_step(store, missing)
            group = new_group_id() if repeats > 1 else None
            benches = [
                _bench_step(store, choice, device, label or "gpuledger run", budget, st,
                            tuple(telemetry_from or ()),
                            {REPEAT_KEY: repeat_record(group, i, repeats)} if group else None)
                for i in range(1, repeats + 1)
            ]
            bench = benches[-1]
            st.phase("cost")
            costs = [cost_step(store, b.run, prof, missing) for b in benches]
            cost = costs[-1]
            st.phase("report")
            html_path = report_step(store, bench.run, profile, html, missing, st.phase,
                                    [b.run.id for b in benches])
    finally:
        store.close()
    doc = _document(bench, doctor, cost, html_path, missing, choice.reason, choice.skipped)
    repeated = (summarize_group(group, [b.run for b in benches], [c for c in costs if c is not None])
                if group else None)
    if repeated is not None:
        doc["group"] = repeated.to_dict()
    if json_out:
        print_json(doc)
    else:
        _render(doc)
        if repeated is not None:
            from gpuledger.report.groups import group_answer
            from gpuledger.report.terminal import print_answer

            console.print()
            print_answer(group_answer(repeated), console)


def _bench_step(
    store: Store, choice: RunChoice, device: str, label: str, budget: int | None, steps: Steps,
    telemetry_from: tuple[str, ...] = (), workload: dict[str, Any] | None = None,
) -> MeasuredRun:
    """The chosen model measured in-process through the bench's run lifecycle; Ctrl-C keeps the finished
    requests as an incomplete run and ends the command (exit 130)."""
    from gpuledger.bench.runner import run_bench_async
    from gpuledger.engines.torch.engine import TorchEngine

    spec = choice.spec(device=device, label=label, memory_budget_bytes=budget)
    engine = TorchEngine(spec, on_phase=steps.phase, plan=choice.plan)
    hooks = steps.hooks(telemetry_from, workload)
    run = asyncio.run(run_bench_async(spec, store, engine=engine, hooks=hooks))
    raise_if_stopped(run, "requests")
    if engine.device is None or engine.dtype is None or engine.estimate is None or engine.peak is None:
        raise EngineError(f"run {run.id}: the torch engine did not report its device and memory")
    return MeasuredRun(run, choice.plan, engine.device, engine.dtype, engine.estimate, engine.peak,
                       list(run.server.get("warnings", [])))


def register(app: typer.Typer) -> None:
    """Add ``gpuledger run`` to ``app``."""
    app.command("run")(run_cmd)
