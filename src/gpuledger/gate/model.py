"""What a gate decides, as types: the verdict, each metric's judgement, the stack diff, the like-for-like
check.

``GateVerdict.model_dump(mode="json")`` is the ``gpuledger gate --json`` document; the terminal, Markdown and
JUnit renderers (``gate/render.py``) take these models. Ratios are fractions (0.05 is 5 %), an error rate's
change is in fractions of the requests too (0.01 is one percentage point); every figure names its unit.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gpuledger.quantity import percent

Status = Literal["pass", "fail", "not_distinguishable", "not_available"]
Overall = Literal["pass", "fail", "not_distinguishable"]
Better = Literal["higher", "lower"]
ThresholdKind = Literal["relative", "points"]
LEVEL = 0.95


class GateModel(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class SideFigure(GateModel):
    """One side's figure of a metric: ``value`` (None: not available, ``reason`` says why), with the standard
    error and degrees of freedom its interval is made of (None: no interval) and how it was found."""

    value: float | None
    unit: str
    n_runs: int = Field(ge=0)
    n_values: int | None = Field(default=None, ge=0)  # the per-request (per-item) values behind a single run
    se: float | None = Field(default=None, ge=0)
    df: float | None = Field(default=None, gt=0)  # None with an se: unbounded (a normal quantile)
    method: str = ""
    reason: str | None = None


class Change(GateModel):
    """The candidate against the baseline. ``relative``: (candidate − baseline) ÷ baseline, or, for a metric
    judged in points (the error rate), candidate − baseline; ``low`` / ``high`` its 95 % interval (None: no
    interval, or an end without bound); ``worse_by`` the change in the metric's worse direction (positive:
    worse); ``distinguishable``: the interval of the difference excludes 0 (None: no interval)."""

    relative: float
    low: float | None
    high: float | None
    worse_by: float
    distinguishable: bool | None
    level: float = LEVEL
    df: float | None = None
    method: str

    def parts(self, points: bool = False) -> tuple[str, str]:
        """(``"+30 %"``, ``"+28 % … +32 %"``): the change and its 95 % interval (``"none"`` without one);
        ``points``: in percentage points (``"+2 pp"``)."""

        def one(x: float) -> str:
            shown = percent(x, signed=True)
            return shown.removesuffix(" %") + " pp" if points else shown

        if self.low is None and self.high is None:
            return one(self.relative), "none"
        low = one(self.low) if self.low is not None else "unbounded"
        high = one(self.high) if self.high is not None else "unbounded"
        return one(self.relative), f"{low} … {high}"

    def text(self, points: bool = False) -> str:
        """``"+30 % (95 % CI +28 % … +32 %)"``, ``"+30 % (no interval)"``."""
        head, interval = self.parts(points)
        return f"{head} (no interval)" if interval == "none" else f"{head} (95 % CI {interval})"


class Threshold(GateModel):
    """How much worse a metric may get: ``pct`` percent of the baseline (``relative``) or percentage points
    (``points``), from the documented default or ``--max-regression``."""

    metric: str
    pct: float = Field(gt=0, le=1000)
    kind: ThresholdKind = "relative"
    source: Literal["default", "--max-regression"] = "default"

    @property
    def fraction(self) -> float:
        return self.pct / 100.0


class MetricJudgement(GateModel):
    """One metric judged: PASS, FAIL (worse by more than its threshold AND distinguishable at 95 %), NOT
    DISTINGUISHABLE (worse by more than its threshold, but the interval of the difference holds 0) or NOT
    AVAILABLE (a side has no figure: ``why`` says which and why)."""

    metric: str
    label: str
    unit: str
    better: Better
    threshold: Threshold
    status: Status
    baseline: SideFigure
    candidate: SideFigure
    change: Change | None = None
    why: str


class StackDrift(GateModel):
    """One difference between the two stacks: ``key`` as ``gpuledger lock --diff`` names it (``torch``,
    ``nvidia_driver``, ``engines.vllm``), or ``server.version`` / ``server.kind`` (the server that answered),
    ``model``, ``model.revision``; the values as text; whether it matters (docs/lock.md's classes)."""

    key: str
    baseline: str | None
    candidate: str | None
    matters: bool
    reason: str


class StackDiff(GateModel):
    """What changed in the stack between the two sides (their first runs' fingerprints, the servers they
    measured). ``known`` is False when a side has no fingerprint (``notes`` say why): nothing is compared."""

    known: bool
    same: bool
    drifts: list[StackDrift] = Field(default_factory=list)
    baseline_hash: str | None = None
    candidate_hash: str | None = None
    notes: list[str] = Field(default_factory=list)


class LikeForLike(GateModel):
    """Whether the two sides ran the same workload with the same settings (``differences`` names each one);
    ``allowed``: ``--allow-different`` was given, so a difference does not fail the gate."""

    same: bool
    differences: list[str] = Field(default_factory=list)
    allowed: bool = False


class GateSide(GateModel):
    """A side as the command line named it: one run, or a group of repeats (``group``)."""

    ref: str
    name: str
    group: str | None = None
    runs: list[str]
    labels: list[str]
    model: str
    kind: str
    headline: str
    status: list[str]


class GateVerdict(GateModel):
    """The gate's answer. ``status`` is FAIL when a metric regressed or the sides are not like for like
    (without ``--allow-different``); NOT DISTINGUISHABLE when none failed but at least one metric got worse
    beyond its threshold within the noise; PASS otherwise. ``exit_code``: 1 for FAIL, else 0."""

    status: Overall
    exit_code: int
    headline: str
    baseline: GateSide
    candidate: GateSide
    metrics: list[MetricJudgement]
    stack: StackDiff
    like_for_like: LikeForLike
    profile: str | None = None
    level: float = LEVEL
    method: str
    notes: list[str] = Field(default_factory=list)

    def failed(self) -> list[MetricJudgement]:
        return [m for m in self.metrics if m.status == "fail"]

    def metric(self, key: str) -> MetricJudgement | None:
        return next((m for m in self.metrics if m.metric == key), None)


__all__ = [
    "LEVEL",
    "Better",
    "Change",
    "GateModel",
    "GateSide",
    "GateVerdict",
    "LikeForLike",
    "MetricJudgement",
    "Overall",
    "SideFigure",
    "StackDiff",
    "StackDrift",
    "Status",
    "Threshold",
    "ThresholdKind",
]
