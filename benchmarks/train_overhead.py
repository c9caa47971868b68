"""What does the training engine cost over a bare PyTorch training loop? The same model, optimizer, batches
and step count, in the same process, measured in interleaved rounds (engine, bare, engine, bare, …):

- engine: a whole ``gpuledger bench --task train`` run as the library runs it (``bench.runner.run_bench``
  with a throwaway SQLite store, telemetry off): the stored run's training tokens/s over its measured
  window (the priced figure: the engine's time between steps — storing each step's record — is in it) and
  its median step time (device-synchronised phases).
- bare: the textbook loop — ``loss = model(input_ids=x, labels=x).loss; loss.backward(); opt.step();
  opt.zero_grad()`` — over the same batches (the engine's own ``TokenSource``), on a model the engine's
  loader builds for the round (same seed, as the engine builds its own) with the same optimizer; two
  unmeasured warm-up steps as the engine's run has; figure = training tokens ÷ the loop's wall time, and its
  median step time.

Prints one line per round, both medians, the overhead 1 − engine median ÷ bare median for tokens/s (exit 0
when it is at most the target, 3 %, else 1) and for the step time, and the median of the rounds' own
ratios (each engine round against the bare round right after it, under the same load from other processes:
on a shared machine the steadier figure). PyTorch's thread count is the same for both (``--threads``).

    .venv/bin/python benchmarks/train_overhead.py [--rounds 5] [--model dummy:smollm2-135m] [--batch 2]
        [--seq-len 64] [--steps 8] [--optimizer adamw] [--device auto] [--dtype auto] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _inprocess import add_common_args, pin_torch

from gpuledger.bench.runner import Hooks, run_bench
from gpuledger.engines.torch.device import resolve_dtype, select_device
from gpuledger.engines.torch.imports import import_torch
from gpuledger.engines.torch.models import LoadedModel, load_model, plan_model
from gpuledger.engines.torch.trainstep import AUTOCAST_DTYPES, TokenSource
from gpuledger.kinds.train.options import train_spec
from gpuledger.kinds.train.summary import TrainingSummary
from gpuledger.store import open_store

TARGET = 0.03
WARMUP_STEPS = 2


Round = tuple[float, float, float]  # training tokens/s, median step s, training tokens per CPU second


def engine_round(store_dir: Path, args: argparse.Namespace, index: int) -> Round:
    """One measured training run through the bench lifecycle: its stored training tokens/s and median step
    time, and training tokens per CPU second of the whole process over the measured steps."""
    spec = train_spec(
        args.model,
        device=args.device,
        dtype=args.dtype,
        batch_size=args.batch,
        seq_len=args.seq_len,
        steps=args.steps,
        warmup_steps=WARMUP_STEPS,
        optimizer=args.optimizer,
        seed=args.seed,
        telemetry=False,
    )
    cpu: list[float] = []

    def progress(done: int, planned: int | None) -> None:
        if done == 0 or done == planned:
            cpu.append(time.process_time())

    with open_store(f"sqlite:///{store_dir / f'round-{index}.sqlite'}") as store:
        run = run_bench(spec, store, hooks=Hooks(on_progress=progress))
    s = run.summary
    if run.status != "complete" or not isinstance(s, TrainingSummary) or not s.training_tokens_per_s:
        raise SystemExit(f"engine round {index}: run {run.id} is {run.status} with no training tokens/s")
    if len(cpu) != 2:
        raise SystemExit(f"engine round {index}: the run's progress was not reported")
    return s.training_tokens_per_s, float(s.step_time_s.p50 or 0.0), s.tokens_total / (cpu[1] - cpu[0])


def bare_model(args: argparse.Namespace) -> tuple[LoadedModel, Any, TokenSource, str]:
    """The model the engine's loader builds (same seed, fp32 weights), in training mode, with the same
    optimizer and the engine's own batches: built anew for every round, as the engine builds its own."""
    torch = import_torch()
    plan = plan_model(args.model)
    dev = select_device(args.device)
    loaded = load_model(plan, dev, "fp32", seed=args.seed)
    loaded.model.train()
    loaded.model.config.use_cache = False
    params = list(loaded.model.parameters())
    opt = (
        torch.optim.AdamW(params, lr=1e-4)
        if args.optimizer == "adamw"
        else torch.optim.SGD(params, lr=1e-4, momentum=0.9)
    )
    data = TokenSource(
        vocab=plan.shape.vocab_size, seed=args.seed, batch=args.batch, seq_len=args.seq_len, accum=1, world=1
    )
    return loaded, opt, data, resolve_dtype(args.dtype, dev)


def bare_round(args: argparse.Namespace) -> Round:
    """The same steps as a plain loop: training tokens ÷ the loop's wall time, its median step time, and
    training tokens per CPU second of the process."""
    torch = import_torch()
    loaded, opt, data, dtype = bare_model(args)
    model, dev = loaded.model, loaded.device
    autocast = (
        torch.autocast(device_type=dev.type, dtype=getattr(torch, AUTOCAST_DTYPES[dtype]))
        if dtype in AUTOCAST_DTYPES
        else contextlib.nullcontext()
    )
    scaler = torch.amp.GradScaler(dev.type) if dtype == "fp16" else None

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev.torch_device)

    def step(index: int) -> None:
        x = data.batch_for(index, 0, 0).to(dev.torch_device)
        with autocast:
            loss = model(input_ids=x, labels=x).loss
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        opt.zero_grad(set_to_none=True)

    for i in range(-WARMUP_STEPS, 0):
        step(i)
    sync()
    times: list[float] = []
    c0 = time.process_time()
    t0 = time.perf_counter()
    for i in range(args.steps):
        t = time.perf_counter()
        step(i)
        sync()
        times.append(time.perf_counter() - t)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    tokens = args.steps * args.batch * args.seq_len
    return tokens / wall, statistics.median(times), tokens / cpu


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(p, model="dummy:smollm2-135m")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--optimizer", default="adamw", choices=("adamw", "sgd"))
    args = p.parse_args(argv)
    if args.rounds < 5:
        p.error("--rounds must be at least 5")
    torch, threads, dev, dtype = pin_torch(args)
    plan = plan_model(args.model)
    print(
        f"{plan.name} on {dev.text()}, {dtype} (fp32 weights), {threads} threads; {args.steps} steps of "
        f"{args.batch} × {args.seq_len} tokens per round, {args.optimizer}",
        file=sys.stderr,
    )

    rounds: dict[str, list[Round]] = {"engine": [], "bare": []}
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="gpuledger-train-overhead-") as tmp:
        for i in range(args.rounds):
            rounds["engine"].append(engine_round(Path(tmp), args, i))
            rounds["bare"].append(bare_round(args))
            (e_rate, e_step, e_cpu), (b_rate, b_step, b_cpu) = rounds["engine"][-1], rounds["bare"][-1]
            print(
                f"round {i + 1}: engine {e_rate:.2f} tok/s (step {e_step:.4f} s, {e_cpu:.2f} tok per CPU s), "
                f"bare loop {b_rate:.2f} tok/s (step {b_step:.4f} s, {b_cpu:.2f} tok per CPU s)",
                file=sys.stderr,
            )

    def median(side: str, k: int) -> float:
        return statistics.median(r[k] for r in rounds[side])

    overhead = 1.0 - median("engine", 0) / median("bare", 0)
    paired = 1.0 - statistics.median(
        e[0] / b[0] for e, b in zip(rounds["engine"], rounds["bare"], strict=True)
    )
    step_overhead = median("engine", 1) / median("bare", 1) - 1.0
    cpu_overhead = 1.0 - median("engine", 2) / median("bare", 2)
    doc = {
        "model": plan.name,
        "device": dev.text(),
        "dtype": dtype,
        "threads": threads,
        "batch": args.batch,
        "seq_len": args.seq_len,
        "steps_per_round": args.steps,
        "optimizer": args.optimizer,
        "rounds": rounds,
        "overhead_ratio": overhead,
        "paired_overhead_ratio": paired,
        "step_time_overhead_ratio": step_overhead,
        "cpu_overhead_ratio": cpu_overhead,
        "target_ratio": TARGET,
        "load_average": [load0, os.getloadavg()[0]],
    }
    print(
        f"engine median {median('engine', 0):.2f} tok/s, bare loop median {median('bare', 0):.2f} tok/s: "
        f"overhead {overhead:+.1%} (target ≤ {TARGET:.0%}); median of the rounds' ratios {paired:+.1%}; "
        f"step time {step_overhead:+.1%} against the bare loop's; per CPU second {cpu_overhead:+.1%}"
    )
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(doc, indent=2) + "\n")
    return 0 if overhead <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
