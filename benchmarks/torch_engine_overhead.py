"""What does the in-process engine cost over a bare ``generate``? The same dummy model, batch and prompts,
in the same process, measured in interleaved rounds (engine, bare, engine, bare, …):

- engine: a whole ``gpuledger bench --engine torch`` run as the library runs it (``bench.runner.run_bench``
  with a throwaway SQLite store, telemetry off): the stored run's output tok/s over its measured window.
- bare: ``model.generate`` of the same model (built once with the engine's own loader and seed), the same
  token-id prompts and forced length, batch after batch: output tokens ÷ the wall time of the calls.

Prints one line per round, both medians and the overhead ratio (1 − engine median ÷ bare median); exits 0
when the overhead is at most the target (3 %), else 1. The median of the rounds' own ratios (each engine
round against the bare round right after it, which ran under the same load from other processes) is printed
beside it: on a shared machine it is the steadier figure; so is the third, output tokens per CPU second of
the whole process (every thread: the engine's, the store writer's, the event loop's) over the same span,
which other processes' load hardly moves. PyTorch's thread count is fixed for both
(``--threads``, default: what PyTorch chose): the engine would otherwise drop to one thread on a busy CPU,
and the comparison would measure that choice instead of the engine.

    .venv/bin/python benchmarks/torch_engine_overhead.py [--rounds 5] [--model dummy:smollm2-135m]
        [--batch 4] [--input-tokens 32] [--output-tokens 32] [--requests 8] [--json-out FILE]
"""

from __future__ import annotations

import argparse
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
from gpuledger.engines.torch.generate import make_prompts
from gpuledger.engines.torch.imports import import_torch
from gpuledger.engines.torch.models import LoadedModel, load_model, plan_model
from gpuledger.kinds.text.options import torch_spec
from gpuledger.store import open_store

TARGET = 0.03


def engine_round(store_dir: Path, args: argparse.Namespace, index: int) -> tuple[float, float]:
    """One measured run through the bench lifecycle: its stored output tok/s, and output tokens per CPU
    second of the process from the window's start to its last request."""
    store = open_store(f"sqlite:///{store_dir / f'round-{index}.sqlite'}")
    cpu: list[float] = []

    def progress(done: int, planned: int | None) -> None:
        if done == 0 or done == planned:
            cpu.append(time.process_time())

    try:
        spec = torch_spec(args.model, device=args.device, dtype=args.dtype, batch_size=args.batch,
                          input_tokens=args.input_tokens, output_tokens=args.output_tokens,
                          num_requests=args.requests, warmup=True, seed=args.seed, telemetry=False)
        run = run_bench(spec, store, hooks=Hooks(on_progress=progress))
    finally:
        store.close()
    rate = run.summary.rate("output_token") if run.summary is not None else None
    tokens = run.summary.work()["output_token"].count if run.summary is not None else None
    if run.status != "complete" or not rate or not tokens or len(cpu) != 2:
        raise SystemExit(f"engine round {index}: run {run.id} is {run.status} with no output tok/s")
    return rate, tokens / (cpu[1] - cpu[0])


def bare_round(loaded: LoadedModel, prompts: Any, args: argparse.Namespace) -> tuple[float, float]:
    """The same work as ``model.generate`` calls alone: output tokens ÷ their wall time, and ÷ the
    process's CPU time."""
    torch = import_torch()
    kwargs: dict[str, Any] = {
        "max_new_tokens": args.output_tokens, "min_new_tokens": args.output_tokens, "do_sample": False,
        "num_beams": 1, "use_cache": True, "pad_token_id": loaded.pad_token_id,
        "eos_token_id": loaded.eos_token_id,
    }
    rows = int(prompts.shape[0])
    tokens = 0
    with torch.inference_mode():
        ids = prompts[: args.batch].to(loaded.device.torch_device)  # warm-up, as the engine's run does
        loaded.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **{**kwargs,
                              "max_new_tokens": 2, "min_new_tokens": 2})
        t0, c0 = time.perf_counter(), time.process_time()
        for start in range(0, rows, args.batch):
            ids = prompts[start:start + args.batch].to(loaded.device.torch_device)
            out = loaded.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **kwargs)
            tokens += int(out.shape[0]) * (int(out.shape[1]) - int(ids.shape[1]))
        if loaded.device.type == "cuda":
            torch.cuda.synchronize(loaded.device.torch_device)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return tokens / wall, tokens / cpu


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(p, model="dummy:smollm2-135m")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--input-tokens", type=int, default=32)
    p.add_argument("--output-tokens", type=int, default=32)
    p.add_argument("--requests", type=int, default=8)
    args = p.parse_args(argv)
    if args.rounds < 5:
        p.error("--rounds must be at least 5")
    torch, threads, dev, dtype = pin_torch(args)
    plan = plan_model(args.model)
    loaded = load_model(plan, dev, dtype, seed=args.seed)
    planned = -(-args.requests // args.batch) * args.batch
    prompts = make_prompts(loaded, planned, args.input_tokens, args.seed)
    print(f"{plan.name} on {dev.text()}, {dtype}, {threads} threads; batch {args.batch}, {planned} requests "
          f"of {args.input_tokens} in / {args.output_tokens} out per round", file=sys.stderr)

    engine: list[float] = []
    bare: list[float] = []
    engine_cpu: list[float] = []
    bare_cpu: list[float] = []
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="gpuledger-overhead-") as tmp:
        for i in range(args.rounds):
            for rates, cpus, (rate, per_cpu) in ((engine, engine_cpu, engine_round(Path(tmp), args, i)),
                                                 (bare, bare_cpu, bare_round(loaded, prompts, args))):
                rates.append(rate)
                cpus.append(per_cpu)
            print(f"round {i + 1}: engine {engine[-1]:.2f} tok/s ({engine_cpu[-1]:.2f} per CPU s), bare "
                  f"generate {bare[-1]:.2f} tok/s ({bare_cpu[-1]:.2f} per CPU s)", file=sys.stderr)
    m_engine, m_bare = statistics.median(engine), statistics.median(bare)
    overhead = 1.0 - m_engine / m_bare
    paired = 1.0 - statistics.median(e / b for e, b in zip(engine, bare, strict=True))
    m_engine_cpu, m_bare_cpu = statistics.median(engine_cpu), statistics.median(bare_cpu)
    cpu_overhead = 1.0 - m_engine_cpu / m_bare_cpu
    doc = {
        "model": plan.name, "device": dev.text(), "dtype": dtype, "threads": threads, "batch": args.batch,
        "requests_per_round": planned, "input_tokens": args.input_tokens, "output_tokens": args.output_tokens,
        "rounds": args.rounds, "engine_tok_s": engine, "bare_tok_s": bare,
        "engine_median_tok_s": m_engine, "bare_median_tok_s": m_bare,
        "engine_tok_per_cpu_s": engine_cpu, "bare_tok_per_cpu_s": bare_cpu,
        "overhead_ratio": overhead, "paired_overhead_ratio": paired, "cpu_overhead_ratio": cpu_overhead,
        "target_ratio": TARGET,
        "met": overhead <= TARGET,
        "load_average_before_after": [load0, os.getloadavg()[0]],
    }
    print(f"median output tok/s: engine {m_engine:.2f}, bare generate {m_bare:.2f}; overhead "
          f"{overhead:+.1%} (target ≤ {TARGET:.0%}: {'met' if doc['met'] else 'NOT met'}); median of the "
          f"rounds' ratios {paired:+.1%}; per CPU second: engine {m_engine_cpu:.2f}, bare {m_bare_cpu:.2f} "
          f"tokens, overhead {cpu_overhead:+.1%}; load average {load0:.1f} -> "
          f"{doc['load_average_before_after'][1]:.1f}")
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(doc, indent=2) + "\n")
    return 0 if doc["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
