"""The test data of the published-results tests (figures and their sources: data/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
INFERENCEX_CSV = DATA / "inferencex_deepseek_r1_b200_vs_mi300x.csv"
