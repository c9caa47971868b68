"""What does the diffusers engine cost over a bare pipeline call? The same built-in pipeline, sizes, steps
and seeds, in the same process, measured in interleaved rounds (engine, bare, engine, bare, …):

- engine: a whole ``gpuledger bench --task image --engine diffusers`` run as the library runs it
  (``bench.runner.run_bench`` with a throwaway SQLite store, telemetry off): the stored run's measured
  window ÷ its images (every stage timed with the device synchronised, the step callback, the store writes).
- bare: the pipeline's own ``__call__`` on a pipeline built the same way (``engines.image.pipelines``), the
  same prompts, sizes, steps and generators, call after call: wall time ÷ images.

Prints one line per round, both medians and the overhead (engine ÷ bare − 1); exits 0 when the overhead is
at most the target (3 %), else 1. PyTorch's thread count is fixed for both (``--threads``, default: what
PyTorch chose), so the comparison measures the engine, not a thread choice.

    .venv/bin/python benchmarks/diffusers_overhead.py [--rounds 5] [--model dummy:tiny-sd] [--images 6]
        [--steps 4] [--size 64] [--batch 1] [--device auto] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _inprocess import add_common_args, pin_torch

from gpuledger.bench.runner import run_bench
from gpuledger.engines.image.base import request_for
from gpuledger.engines.image.catalog import dummy_pipeline
from gpuledger.engines.image.imports import import_torch
from gpuledger.engines.image.pipelines import build_dummy
from gpuledger.engines.torch.device import TORCH_DTYPE_NAMES
from gpuledger.kinds.image.options import image_spec
from gpuledger.kinds.image.summary import ImageSummary
from gpuledger.store import open_store

TARGET = 0.03


def engine_round(store_dir: Path, args: argparse.Namespace, index: int) -> float:
    """One measured run through the bench lifecycle: seconds per image over its window."""
    store = open_store(f"sqlite:///{store_dir / f'round-{index}.sqlite'}")
    try:
        spec = image_spec(
            "diffusers",
            model=args.model,
            device=args.device,
            dtype=args.dtype,
            steps=args.steps,
            height=args.size,
            width=args.size,
            batch_size=args.batch,
            num_images=args.images,
            warmup=1,
            seed=args.seed,
            telemetry=False,
            keep_images=False,
        )
        run = run_bench(spec, store)
    finally:
        store.close()
    s = run.summary
    if run.status != "complete" or not isinstance(s, ImageSummary) or not s.images_total:
        raise SystemExit(f"engine round {index}: run {run.id} is {run.status} with no images")
    if args.verbose:
        print(
            f"  engine: window {s.window_s:.3f} s, Σ request {(s.request_s.mean or 0) * s.num_ok:.3f} s, "
            f"{s.num_ok} requests",
            flush=True,
        )
    return s.window_s / s.images_total


def bare_round(pipe: Any, args: argparse.Namespace, device: str) -> float:
    """The same work as bare pipeline calls: wall time ÷ images."""
    torch = import_torch()
    calls = -(-args.images // args.batch)
    sync = (lambda: torch.cuda.synchronize(device)) if device.startswith("cuda") else (lambda: None)
    gen_device = device if device.startswith("cuda") else "cpu"
    images = 0
    sync()
    t0 = time.perf_counter()
    for i in range(calls):
        req = request_for(
            i,
            seed=args.seed,
            steps=args.steps,
            height=args.size,
            width=args.size,
            batch_size=args.batch,
            guidance=None,
        )
        with torch.inference_mode():
            out = pipe(
                prompt=req.prompt,
                num_inference_steps=args.steps,
                height=args.size,
                width=args.size,
                num_images_per_prompt=args.batch,
                output_type="pil",
                generator=[torch.Generator(gen_device).manual_seed(req.seed + k) for k in range(args.batch)],
            )
        images += len(out.images)
    sync()
    return (time.perf_counter() - t0) / images


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(ap, model="dummy:tiny-sd")
    ap.add_argument("--images", type=int, default=6)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    torch, threads, dev, dtype = pin_torch(args)
    args.device, args.dtype = dev.type, dtype
    torch.manual_seed(args.seed)
    built = build_dummy(
        dummy_pipeline(args.model), getattr(torch, TORCH_DTYPE_NAMES[dtype]), dev.torch_device
    )
    bare_round(
        built.pipe, argparse.Namespace(**{**vars(args), "images": args.batch}), dev.torch_device
    )  # warm
    engine_s: list[float] = []
    bare_s: list[float] = []
    with tempfile.TemporaryDirectory(prefix="gpuledger-overhead-") as tmp:
        for i in range(args.rounds):
            e = engine_round(Path(tmp), args, i)
            b = bare_round(built.pipe, args, dev.torch_device)
            engine_s.append(e)
            bare_s.append(b)
            print(
                f"round {i + 1}: engine {e * 1000:.1f} ms/image, bare {b * 1000:.1f} ms/image "
                f"({(e / b - 1) * 100:+.1f} %)",
                flush=True,
            )
    me, mb = statistics.median(engine_s), statistics.median(bare_s)
    overhead = me / mb - 1
    print(
        f"median: engine {me * 1000:.1f} ms/image, bare {mb * 1000:.1f} ms/image, "
        f"overhead {overhead * 100:+.2f} % (target ≤ {TARGET * 100:.0f} %) on {dev.name}, "
        f"{args.model} {args.size}×{args.size}, {args.steps} steps, batch {args.batch}, "
        f"{torch.get_num_threads()} threads"
    )
    if args.json_out is not None:
        args.json_out.write_text(
            json.dumps(
                {
                    "model": args.model,
                    "device": dev.name,
                    "dtype": dtype,
                    "size": args.size,
                    "steps": args.steps,
                    "batch": args.batch,
                    "images_per_round": args.images,
                    "threads": torch.get_num_threads(),
                    "engine_s_per_image": engine_s,
                    "bare_s_per_image": bare_s,
                    "overhead": overhead,
                    "target": TARGET,
                },
                indent=2,
            )
            + "\n"
        )
    return 0 if overhead <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
