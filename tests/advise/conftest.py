"""Fixtures of the advisor and efficiency tests: the cost tests' runs (``tests/cost/cost_runs.py``: summaries
that ``bench.metrics.summarize`` makes of generated requests), the loopback test server
(``tests/bench/stream_server.py``) and the real catalog."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cost"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from cost_runs import MakeRun, build_run

from gpuledger.catalog import Catalog, load_catalog


@pytest.fixture()
def make_run() -> MakeRun:
    return build_run


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return load_catalog()
