"""Workloads: datasets (what is asked), the prompt sources that make a run's prompts as it asks for them,
and load patterns (how requests are released) — sessions of multi-turn conversations, shared prefixes and
trace replay included."""

from __future__ import annotations

from gpuledger.workload.composer import ChatTokenizer
from gpuledger.workload.datasets import DATASETS, Dataset, DatasetSpec, Prompt, Session, TokenIdDataset, Turn
from gpuledger.workload.load import LOAD_KINDS, load_from_flags, parse_sweep, poisson_gaps
from gpuledger.workload.prompts import Prompts, PromptSource, build_dataset, open_source

__all__ = [
    "DATASETS",
    "LOAD_KINDS",
    "ChatTokenizer",
    "Dataset",
    "DatasetSpec",
    "Prompt",
    "PromptSource",
    "Prompts",
    "Session",
    "TokenIdDataset",
    "Turn",
    "build_dataset",
    "load_from_flags",
    "open_source",
    "parse_sweep",
    "poisson_gaps",
]
