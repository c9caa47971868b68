"""What the in-process overhead benchmarks share (``torch_engine_overhead.py``, ``train_overhead.py``,
``diffusers_overhead.py``): their common flags, and PyTorch's thread count fixed for both sides of the
comparison before anything runs, so that they measure the engine, not a thread choice."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from gpuledger.engines.torch.device import DeviceInfo, resolve_dtype, select_device
from gpuledger.engines.torch.imports import import_torch


def add_common_args(p: argparse.ArgumentParser, *, model: str, rounds: int = 5) -> None:
    """``--rounds --model --device --dtype --seed --threads --json-out``."""
    p.add_argument("--rounds", type=int, default=rounds, help="interleaved rounds of each side")
    p.add_argument("--model", default=model)
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="PyTorch intra-op threads for both sides")
    p.add_argument("--json-out", type=Path, default=None)


def pin_torch(args: argparse.Namespace) -> tuple[Any, int, DeviceInfo, str]:
    """PyTorch, the thread count both sides use (``--threads``, default what PyTorch chose), the device and
    the dtype. ``OMP_NUM_THREADS`` is set too: the engines run a busy CPU with one thread unless it says
    otherwise, and the comparison must not turn on that."""
    torch = import_torch()
    threads = args.threads or int(torch.get_num_threads())
    torch.set_num_threads(threads)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    dev = select_device(args.device)
    return torch, threads, dev, resolve_dtype(args.dtype, dev)
