"""Benchmark runs: the runner (asyncio; the one run lifecycle of every engine), the drivers of its stages,
the run writer, the spec a command line asks for, and the metrics (pure functions over stored timestamps)."""

from __future__ import annotations

from gpuledger.bench.metrics import parse_slo, summarize
from gpuledger.bench.options import spec_of
from gpuledger.bench.runner import Hooks, run_bench, run_bench_async
from gpuledger.bench.writer import RunWriter

__all__ = [
    "Hooks",
    "RunWriter",
    "parse_slo",
    "run_bench",
    "run_bench_async",
    "spec_of",
    "summarize",
]
