"""Benchmark runs: the runner (asyncio; the one run lifecycle of every engine), the drivers of its stages,
the run writer, the spec a command line asks for, and the metrics (pure functions over stored timestamps)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuledger.lazy import exports

if TYPE_CHECKING:
    from gpuledger.bench.metrics import parse_slo, summarize
    from gpuledger.bench.options import spec_of
    from gpuledger.bench.runner import Hooks, run_bench, run_bench_async
    from gpuledger.bench.writer import RunWriter

__getattr__, __dir__ = exports(__name__, {
    "parse_slo": "gpuledger.bench.metrics",
    "summarize": "gpuledger.bench.metrics",
    "spec_of": "gpuledger.bench.options",
    "Hooks": "gpuledger.bench.runner",
    "run_bench": "gpuledger.bench.runner",
    "run_bench_async": "gpuledger.bench.runner",
    "RunWriter": "gpuledger.bench.writer",
})

__all__ = [
    "Hooks",
    "RunWriter",
    "parse_slo",
    "run_bench",
    "run_bench_async",
    "spec_of",
    "summarize",
]
