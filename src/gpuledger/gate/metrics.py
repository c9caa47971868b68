"""The metrics a gate judges, which way is worse for each, and their default thresholds (docs/gate.md).

| metric | what | worse when | default threshold |
|---|---|---|---|
| ``throughput`` | the headline rate in its unit (output tok/s, images/s, training tok/s) | lower | 5 % |
| ``cost`` | the price of the headline unit under ``--profile`` (USD per 1M output tokens) | higher | 5 % |
| ``energy`` | joules per headline unit (measured energy only) | higher | 10 % |
| ``error_rate`` | failed requests ÷ requests | higher | 1 percentage point |
| ``ttft_pNN`` ``tpot_pNN`` ``itl_pNN`` ``e2e_pNN`` | text generation's latencies (ms) | higher | below |
| ``step_time_pNN`` | training's step time percentiles (s) | higher | below |
| ``image_s_pNN`` | image generation's seconds per image percentiles (s) | higher | below |

A percentile's default threshold: p50 10 %, p90 and p95 15 %, p99 20 %.

``pNN`` is one of p50, p90, p95, p99; p50 and p99 are judged unless asked otherwise, p90 and p95 when
``--max-regression`` names them. ``cost`` is judged only under ``--profile`` (one profile for both sides).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gpuledger.errors import UsageError
from gpuledger.gate.figures import FAMILIES, Family
from gpuledger.gate.model import Better, Threshold, ThresholdKind

PERCENTILES = ("p50", "p90", "p95", "p99")
JUDGED_PERCENTILES = ("p50", "p99")
PERCENTILE_PCT = {"p50": 10.0, "p90": 15.0, "p95": 15.0, "p99": 20.0}
MAX_PCT = 1000.0
MAX_POINTS = 100.0


@dataclass(frozen=True, slots=True)
class MetricDef:
    """One metric: its key (``--max-regression KEY=PCT``), label, which way is better, its default threshold
    and kind, and for a latency percentile its family and percentile (``kind``: the summaries that have
    it)."""

    key: str
    label: str
    better: Better
    default_pct: float
    threshold_kind: ThresholdKind = "relative"
    family: Family | None = None
    pct: str | None = None
    judged_by_default: bool = True

    @property
    def kind(self) -> str | None:
        return self.family.kind if self.family is not None else None

    def applies_to(self, summary_kind: str) -> bool:
        return self.kind is None or self.kind == summary_kind


def _catalogue() -> dict[str, MetricDef]:
    out = {
        "throughput": MetricDef("throughput", "throughput", "higher", 5.0),
        "cost": MetricDef("cost", "cost per unit", "lower", 5.0),
        "energy": MetricDef("energy", "energy per unit", "lower", 10.0),
        "error_rate": MetricDef("error_rate", "error rate", "lower", 1.0, "points"),
    }
    for fam in FAMILIES:
        for pct in PERCENTILES:
            key = f"{fam.key}_{pct}"
            out[key] = MetricDef(
                key,
                f"{fam.label} {pct}",
                "lower",
                PERCENTILE_PCT[pct],
                family=fam,
                pct=pct,
                judged_by_default=pct in JUDGED_PERCENTILES,
            )
    return out


CATALOGUE: dict[str, MetricDef] = _catalogue()


def default_threshold(metric: MetricDef) -> Threshold:
    return Threshold(metric=metric.key, pct=metric.default_pct, kind=metric.threshold_kind)


def parse_thresholds(values: Sequence[str]) -> dict[str, Threshold]:
    """``--max-regression METRIC=PCT`` (repeatable; ``PCT`` may end in ``%``): a known metric, 0 < PCT ≤ 1000
    (an error rate: percentage points, 0 < PCT ≤ 100). One ``UsageError`` line naming the value otherwise."""
    out: dict[str, Threshold] = {}
    for value in values:
        key, sep, text = value.partition("=")
        key = key.strip().lower()
        if not sep or not key or not text.strip():
            raise UsageError(f"--max-regression {value!r}: expected METRIC=PCT, e.g. tpot_p99=10")
        metric = CATALOGUE.get(key)
        if metric is None:
            raise UsageError(
                f"--max-regression {key!r} is not a metric the gate judges; one of: " + ", ".join(CATALOGUE)
            )
        try:
            pct = float(text.strip().removesuffix("%").strip())
        except ValueError:
            raise UsageError(f"--max-regression {key}={text!r}: PCT must be a number (percent)") from None
        top = MAX_POINTS if metric.threshold_kind == "points" else MAX_PCT
        what = "percentage points" if metric.threshold_kind == "points" else "percent"
        if not math.isfinite(pct) or not 0 < pct <= top:
            raise UsageError(
                f"--max-regression {key}={text}: PCT must be more than 0 and at most {top:g} ({what})"
            )
        if key in out:
            raise UsageError(f"--max-regression names {key} twice")
        out[key] = Threshold(metric=key, pct=pct, kind=metric.threshold_kind, source="--max-regression")
    return out


def selected(
    summary_kind: str, asked: dict[str, Threshold], *, priced: bool
) -> list[tuple[MetricDef, Threshold]]:
    """The metrics judged for runs of ``summary_kind``: those judged by default that apply to it (``cost``
    only when ``priced``), and every one ``--max-regression`` names (one that does not apply to these runs is
    judged "not available", saying so), in the catalogue's order, each with its threshold."""
    if "cost" in asked and not priced:
        raise UsageError(
            "--max-regression cost=… needs --profile NAME: the cost per unit is judged under one "
            "profile for both sides"
        )
    out: list[tuple[MetricDef, Threshold]] = []
    for key, metric in CATALOGUE.items():
        if key in asked:
            out.append((metric, asked[key]))
        elif metric.judged_by_default and metric.applies_to(summary_kind) and (key != "cost" or priced):
            out.append((metric, default_threshold(metric)))
    return out


__all__ = ["CATALOGUE", "MetricDef", "default_threshold", "parse_thresholds", "selected"]
