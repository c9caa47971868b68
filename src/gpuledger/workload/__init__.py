"""Workloads: datasets (what is asked) and load patterns (how requests are released)."""

from __future__ import annotations

from gpuledger.workload.datasets import DATASETS, Dataset, DatasetSpec, Prompt, build_dataset
from gpuledger.workload.load import LoadPattern, Stage, parse_sweep, poisson_gaps

__all__ = [
    "DATASETS",
    "Dataset",
    "DatasetSpec",
    "LoadPattern",
    "Prompt",
    "Stage",
    "build_dataset",
    "parse_sweep",
    "poisson_gaps",
]
