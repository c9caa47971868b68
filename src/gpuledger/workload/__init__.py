"""Workloads: datasets (what is asked), the prompt sources that make a run's prompts as it asks for them,
and load patterns (how requests are released)."""

from __future__ import annotations

from gpuledger.workload.datasets import DATASETS, Dataset, DatasetSpec, Prompt, TokenIdDataset
from gpuledger.workload.load import LOAD_KINDS, load_from_flags, parse_sweep, poisson_gaps
from gpuledger.workload.prompts import ChatTokenizer, Prompts, PromptSource, build_dataset, open_source

__all__ = [
    "DATASETS",
    "LOAD_KINDS",
    "ChatTokenizer",
    "Dataset",
    "DatasetSpec",
    "Prompt",
    "PromptSource",
    "Prompts",
    "TokenIdDataset",
    "build_dataset",
    "load_from_flags",
    "open_source",
    "parse_sweep",
    "poisson_gaps",
]
