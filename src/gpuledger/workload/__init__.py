"""Workloads: datasets (what is asked) and load patterns (how requests are released)."""

from __future__ import annotations

from gpuledger.workload.datasets import DATASETS, Dataset, DatasetSpec, Prompt, TokenIdDataset, build_dataset
from gpuledger.workload.load import LOAD_KINDS, load_from_flags, parse_sweep, poisson_gaps

__all__ = [
    "DATASETS",
    "LOAD_KINDS",
    "Dataset",
    "DatasetSpec",
    "Prompt",
    "TokenIdDataset",
    "build_dataset",
    "load_from_flags",
    "parse_sweep",
    "poisson_gaps",
]
