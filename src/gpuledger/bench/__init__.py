"""Benchmark runs: the runner (asyncio, HTTP engines), the run writer (every engine), and the metrics
(pure functions over stored timestamps)."""

from __future__ import annotations

from gpuledger.bench.metrics import parse_slo, summarize
from gpuledger.bench.runner import BenchConfig, run_bench, run_bench_async
from gpuledger.bench.writer import RunWriter

__all__ = ["BenchConfig", "RunWriter", "parse_slo", "run_bench", "run_bench_async", "summarize"]
