"""Repeated runs: groups, the mean of each figure with its 95 % confidence interval, and ratios of groups.

A group is the N runs one ``bench --repeat N`` (or ``run --repeat N``) stored with the same spec: each run's
workload record holds ``repeat = {"group": "g-…", "index": i, "of": N}`` (``REPEAT_KEY``). On the command
line a group is named by its id (``g-`` and 8 characters, or an unambiguous prefix of them): ``gpuledger cost
g-abcd2345``, ``gpuledger compare g-abcd2345 g-efgh6789``; a run id still names one run.

Method (docs/bench.md, "Repeats"):

- Mean of a figure over the group's runs: the arithmetic mean of the runs' figures, with a Student-t
  interval: mean ± t(0.975, n − 1) · s / √n, s the sample standard deviation (n − 1: the spread of the
  measurement estimated from a few repeats); the coefficient of variation is s / mean. The runs are taken
  as independent draws of the same measurement; fewer than two runs give no interval.
- The price of a unit is the one figure that is not an arithmetic mean: it is the reciprocal of the mean
  units per currency unit (the unit's quantum ÷ that mean: the harmonic mean of the runs' prices), its
  interval the reciprocal of that one's ends (exact, not symmetric; unbounded above when the yield's
  interval reaches 0). So the group's price and its units per currency unit are reciprocals, as a run's
  are, and the price is what the mean throughput costs.
- The ratio of two groups (A ÷ B, e.g. output tokens per USD): the ratio of their arithmetic means, with an
  interval
  from the delta method on the log of the ratio — se² = s_A² / (n_A m_A²) + s_B² / (n_B m_B²), Welch–
  Satterthwaite degrees of freedom, ratio · exp(± t · se) — so it is never negative and is symmetric in
  A and B (B ÷ A has the reciprocal interval). The groups are independent (no pairing of repeats). When the
  interval holds 1 the two are "not distinguishable at 95 %".
- t quantiles come from the regularised incomplete beta function (continued fraction), inverted by
  bisection: exact to 1e-10 for any degrees of freedom, tested against published table values.

``fmt_with_interval`` prints a mean to the precision its interval supports, and never rounds it away: a mean
narrower than its interval keeps three significant figures (``"335 ± 4,100"``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Protocol

from pydantic import model_serializer

from gpuledger.cost.comparison.basis import resolve_basis
from gpuledger.cost.pricing.document import CostDocument, Doc
from gpuledger.cost.pricing.runcost import RunCost
from gpuledger.errors import NotFoundError, UsageError
from gpuledger.quantity import percent
from gpuledger.records import RunInfo
from gpuledger.records.workloads import REPEAT_KEY
from gpuledger.store.ids import new_run_id

LEVEL = 0.95
GROUP_PREFIX = "g-"
MIN_GROUP_PREFIX = len(GROUP_PREFIX) + 4


# --------------------------------------------------------------------------------------------------
# The documents (``cost GROUP --json``, ``compare GROUP GROUP --json``)
# --------------------------------------------------------------------------------------------------


class IntervalDoc(Doc):
    """A mean with its 95 % interval (``ci95_half_width`` for a symmetric one, else its ends; the high end
    None and ``ci95_high_unbounded`` true for a reciprocal whose interval reached 0), the sample standard
    deviation and the CV, each saying what it is."""

    mean: float
    mean_of: str
    ci95_half_width: float | None
    ci95_low: float | None
    ci95_high: float | None
    ci95_high_unbounded: bool | None = None
    n: int
    sd: float | None
    sd_of: str | None
    cv: float | None
    cv_of: str | None
    method: str

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        if self.ci95_high_unbounded is None:
            out.pop("ci95_high_unbounded")
        return out


class FigureDoc(Doc):
    """One figure over a group's runs: each run's value and the mean with its interval (``mean`` None and
    ``n`` 0 when no run had it)."""

    label: str
    unit: str
    values: list[float | None]
    interval: IntervalDoc | None

    @model_serializer(mode="plain")
    def _dump(self) -> dict[str, Any]:
        out: dict[str, Any] = {"label": self.label, "unit": self.unit, "values": self.values}
        if self.interval is None:
            return out | {"mean": None, "n": 0}
        return out | self.interval.model_dump(mode="json")


class RatioDoc(Doc):
    ratio: float
    ci95_low: float | None
    ci95_high: float | None
    df: float | None
    distinguishable_at_95: bool | None
    meaning: str
    method: str = (
        "ratio of the groups' arithmetic means; delta method on ln(ratio) with the sample standard "
        "deviations (n − 1), Welch–Satterthwaite df, ratio·exp(±t·se)"
    )


class GroupDocument(Doc):
    """A group of repeats: its runs, each figure's mean with its interval, the runs' verdicts, and — when
    priced (``cost GROUP``) — each run's cost document."""

    group: str
    runs: list[str]
    level: float = LEVEL
    figures: dict[str, FigureDoc]
    verdicts: dict[str, str]
    costs: list[CostDocument] | None = None

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        if self.costs is None:
            out.pop("costs")
        return out


class GroupComparisonDocument(Doc):
    a: GroupDocument
    b: GroupDocument
    unit: str
    currency: str
    ratio: RatioDoc | None
    throughput_ratio: RatioDoc | None
    meaning: str


# --------------------------------------------------------------------------------------------------
# Student's t
# --------------------------------------------------------------------------------------------------


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T ≤ t) for Student's t with ``df`` degrees of freedom (any df > 0, not only whole numbers)."""
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (``t_quantile(0.975, 4)`` = 2.776)."""
    if not 0.0 < p < 1.0 or not df > 0:
        raise ValueError(f"t quantile needs 0 < p < 1 and df > 0, got p={p}, df={df}")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 2.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


# --------------------------------------------------------------------------------------------------
# Intervals and how they are printed
# --------------------------------------------------------------------------------------------------


ARITHMETIC = "the arithmetic mean of the runs' figures"
SAMPLE_SD = "the sample standard deviation of the runs' figures (n − 1)"


@dataclass(frozen=True, slots=True)
class Interval:
    """The mean of ``n`` values with its ``level`` confidence interval (``half_width`` None: fewer than two
    values, no interval), the sample standard deviation (n − 1) and the coefficient of variation.

    ``mean_of`` says which mean it is (``ARITHMETIC`` unless made otherwise). ``bounds`` is an interval
    that is not symmetric about the mean (``reciprocal``: the low and high ends, ``math.inf`` for an end
    without bound); ``half_width`` is then half its width (what its digits are printed to), or the distance
    from the mean to its low end when it has no high one."""

    mean: float
    half_width: float | None
    n: int
    sd: float | None = None
    cv: float | None = None
    df: float | None = None
    level: float = LEVEL
    mean_of: str = ARITHMETIC
    bounds: tuple[float, float] | None = None
    cv_of: str = "s ÷ mean"

    @property
    def low(self) -> float | None:
        if self.bounds is not None:
            return self.bounds[0]
        return None if self.half_width is None else self.mean - self.half_width

    @property
    def high(self) -> float | None:
        """The high end (``math.inf`` when it has none: a reciprocal whose interval reached 0)."""
        if self.bounds is not None:
            return self.bounds[1]
        return None if self.half_width is None else self.mean + self.half_width

    def text(self, unit: str = "") -> str:
        """``"12 ± 4 output tok/s"``: the mean to the precision the interval supports; an interval that is
        not symmetric about its mean as ``"0.622 USD (95 % CI 0.608 … 0.637)"``."""
        if self.bounds is None:
            return f"{fmt_with_interval(self.mean, self.half_width)} {unit}".rstrip()
        return f"{fmt_at(self.mean, self._digits())} {unit}".rstrip() + f" ({self.range_text()})"

    def _digits(self) -> float | None:
        """The half width the figures are printed to: none (three significant figures) for an interval
        without a high end — it supports no place."""
        high = self.high
        return None if high is not None and math.isinf(high) else self.half_width

    def range_text(self) -> str:
        """``"95 % CI 0.608 … 0.637"`` (``"… unbounded"`` without a high end); ``""`` without an interval."""
        low, high = self.low, self.high
        if low is None or high is None:
            return ""
        top = "unbounded" if math.isinf(high) else fmt_at(high, self._digits())
        return f"{percent(self.level)} CI {fmt_at(low, self._digits())} … {top}"

    def method(self) -> str:
        if self.half_width is None:
            return f"one value: no interval ({self.mean_of})"
        if self.bounds is not None:
            return self.mean_of
        return (
            f"{self.mean_of} ± t(0.975, n − 1)·s/√n (Student-t over runs), s {SAMPLE_SD}; CV = {self.cv_of}"
        )

    def document(self) -> IntervalDoc:
        high = self.high
        return IntervalDoc(
            mean=self.mean,
            mean_of=self.mean_of,
            ci95_half_width=self.half_width if self.bounds is None else None,
            ci95_low=self.low,
            ci95_high=None if high is None or math.isinf(high) else high,
            ci95_high_unbounded=math.isinf(high) if self.bounds and high is not None else None,
            n=self.n,
            sd=self.sd,
            sd_of=SAMPLE_SD if self.sd is not None else None,
            cv=self.cv,
            cv_of=self.cv_of if self.cv is not None else None,
            method=self.method(),
        )

    def reciprocal(self, mean_of: str, scale: float = 1.0) -> Interval:
        """``scale`` ÷ this mean, with the interval ``scale`` ÷ its ends (exact: the same coverage), the high
        end unbounded when this interval reaches 0; its CV is this one's (the relative spread of the values
        it inverts). This mean must be positive."""
        if self.mean <= 0 or scale <= 0:
            raise ValueError(f"a reciprocal needs a positive mean and scale, got {self.mean} and {scale}")
        mean = scale / self.mean
        cv_of = "the CV of the figures it is the reciprocal of"
        if self.half_width is None or self.low is None or self.high is None:
            return Interval(mean, None, self.n, None, self.cv, self.df, self.level, mean_of, None, cv_of)
        low = scale / self.high
        high = scale / self.low if self.low > 0 else math.inf
        half = (high - low) / 2.0 if math.isfinite(high) else mean - low
        return Interval(mean, half, self.n, None, self.cv, self.df, self.level, mean_of, (low, high), cv_of)


def mean_interval(values: Iterable[float], level: float = LEVEL) -> Interval | None:
    """The arithmetic mean of ``values`` with its Student-t interval (s: the sample standard deviation,
    n − 1); None for no values."""
    v = [float(x) for x in values if math.isfinite(x)]
    n = len(v)
    if n == 0:
        return None
    mean = math.fsum(v) / n
    if n == 1:
        return Interval(mean, None, 1)
    sd = math.sqrt(math.fsum((x - mean) ** 2 for x in v) / (n - 1))
    half = t_quantile(0.5 + level / 2.0, n - 1) * sd / math.sqrt(n)
    return Interval(mean, half, n, sd, sd / mean if mean else None, float(n - 1), level)


@dataclass(frozen=True, slots=True)
class RatioInterval:
    """A ÷ B of two means with its interval (``low``/``high`` None: a side with fewer than two runs)."""

    ratio: float
    low: float | None
    high: float | None
    df: float | None = None
    level: float = LEVEL

    @property
    def known(self) -> bool:
        return self.low is not None and self.high is not None

    @property
    def distinguishable(self) -> bool | None:
        """True when the interval excludes 1; None without an interval."""
        if self.low is None or self.high is None:
            return None
        return not self.low <= 1.0 <= self.high

    def text(self) -> str:
        """``"1.9x (95 % CI 1.6x … 2.3x)"``, to the precision the interval supports."""
        if self.low is None or self.high is None:
            return f"{_sig(self.ratio, 3)}x (no interval: a side has one run)"
        half = (self.high - self.low) / 2.0
        r, lo, hi = (fmt_at(v, half) for v in (self.ratio, self.low, self.high))
        return f"{r}x (95 % CI {lo}x … {hi}x)"

    def meaning(self) -> str:
        """Whether the two differ at 95 %, in words."""
        d = self.distinguishable
        if d is None:
            return "no interval: repeat each side at least twice (--repeat N)"
        if d:
            return "distinguishable at 95 %: the interval excludes 1"
        return "not distinguishable at 95 %: the interval spans 1"

    def document(self) -> RatioDoc:
        return RatioDoc(ratio=self.ratio, ci95_low=self.low, ci95_high=self.high, df=self.df,
                        distinguishable_at_95=self.distinguishable, meaning=self.meaning())


def ratio_interval(a: Sequence[float], b: Sequence[float], level: float = LEVEL) -> RatioInterval | None:
    """mean(a) ÷ mean(b) with its interval (module docstring); None when a side has no positive mean."""
    ia, ib = mean_interval(a, level), mean_interval(b, level)
    if ia is None or ib is None or ia.mean <= 0 or ib.mean <= 0:
        return None
    ratio = ia.mean / ib.mean
    if ia.sd is None or ib.sd is None:
        return RatioInterval(ratio, None, None, None, level)
    va = (ia.sd / ia.mean) ** 2 / ia.n
    vb = (ib.sd / ib.mean) ** 2 / ib.n
    se = math.sqrt(va + vb)
    if se == 0:
        return RatioInterval(ratio, ratio, ratio, math.inf, level)
    df = (va + vb) ** 2 / (va**2 / (ia.n - 1) + vb**2 / (ib.n - 1))
    t = t_quantile(0.5 + level / 2.0, df)
    return RatioInterval(ratio, ratio * math.exp(-t * se), ratio * math.exp(t * se), df, level)


def _sig(value: float, digits: int) -> str:
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    return f"{value:,.{decimals}f}"


def _place(half_width: float) -> int:
    """The decimal place (10**place) an interval of ``half_width`` supports: its leading digit, or the
    digit after it when the leading one is a 1."""
    exp = math.floor(math.log10(half_width))
    return exp - 1 if half_width / 10**exp < 2 else exp


def _round(value: float, place: int) -> float:
    """``value`` rounded half away from zero to a multiple of 10**place (25 -> 30, not 20)."""
    return float(Decimal(repr(value)).quantize(Decimal(1).scaleb(place), rounding=ROUND_HALF_UP))


# A half width this small against the value is the floating point's rounding, not a spread (identical runs).
_RESOLUTION = 1e-9


def _wider(value: float, place: int) -> bool:
    """Rounding ``value`` to 10**``place`` would take its leading digit: the interval is wider than it."""
    return value != 0 and math.isfinite(value) and math.floor(math.log10(abs(value))) < place


def _significant(value: float, digits: int) -> str:
    """``value`` rounded to ``digits`` significant figures: 334.55 -> ``"335"``, 832441 -> ``"832,000"``."""
    if value == 0 or not math.isfinite(value):
        return _sig(value, digits)
    place = math.floor(math.log10(abs(value))) - (digits - 1)
    return f"{_round(value, place):,.{max(0, -place)}f}"


def _resolved(value: float, half_width: float | None) -> float | None:
    """``half_width``, or 0 when it is below the floating point's resolution of ``value``."""
    if half_width is not None and math.isfinite(half_width) and half_width <= _RESOLUTION * abs(value):
        return 0.0
    return half_width


def fmt_at(value: float, half_width: float | None) -> str:
    """``value`` rounded to the place an interval of ``half_width`` supports (three significant figures
    without one — and when the interval is wider than the value's leading digit: the value keeps its
    significant digits whatever the interval's size)."""
    half_width = _resolved(value, half_width)
    if half_width is None or not math.isfinite(half_width) or half_width <= 0:
        return _sig(value, 3)
    place = _place(half_width)
    if _wider(value, place):
        return _significant(value, 3)
    return f"{_round(value, place):,.{max(0, -place)}f}"


def fmt_with_interval(mean: float, half_width: float | None) -> str:
    """``mean ± half_width`` rounded to the interval's leading digit (two digits when it is a 1): 12.13 ±
    3.61 -> ``"12 ± 4"``, 0.6224 ± 0.0143 -> ``"0.622 ± 0.014"``, 2034 ± 340 -> ``"2,000 ± 300"``. An
    interval wider than the mean's leading digit does not round the mean away: the mean keeps three
    significant figures and the half width two (334.55 ± 4122 -> ``"335 ± 4,100"``, not ``"0 ± 4,000"``).
    Without an interval (None) the mean with three significant figures; a zero interval (or one below the
    floating point's resolution of the mean: identical runs) prints ``± 0``."""
    half_width = _resolved(mean, half_width)
    if half_width is None or not math.isfinite(half_width):
        return _sig(mean, 3)
    if half_width <= 0:
        return f"{_sig(mean, 3)} ± 0"
    place = _place(half_width)
    if _wider(mean, place):
        return f"{_significant(mean, 3)} ± {_significant(half_width, 2)}"
    shown = _round(half_width, place) or 10.0**place
    return f"{fmt_at(mean, half_width)} ± {shown:,.{max(0, -place)}f}"


# --------------------------------------------------------------------------------------------------
# Groups of runs
# --------------------------------------------------------------------------------------------------


def new_group_id() -> str:
    return GROUP_PREFIX + new_run_id()


def repeat_record(group: str, index: int, of: int) -> dict[str, Any]:
    """``RunInfo.workload[REPEAT_KEY]`` of the ``index``-th (1-based) of ``of`` repeats."""
    return {"group": group, "index": index, "of": of}


def repeat_of(info: RunInfo) -> tuple[str, int, int] | None:
    """(group id, index, of) of a run stored by ``--repeat``, else None."""
    rec = info.workload.get(REPEAT_KEY) if isinstance(info.workload, dict) else None
    if not isinstance(rec, dict):
        return None
    group, index, of = rec.get("group"), rec.get("index"), rec.get("of")
    if isinstance(group, str) and isinstance(index, int) and isinstance(of, int):
        return group, index, of
    return None


def is_group_ref(ref: str) -> bool:
    return ref.strip().lower().startswith(GROUP_PREFIX)


class RunSource(Protocol):
    def get_run(self, id_or_prefix: str) -> RunInfo: ...

    def list_runs(self) -> Sequence[RunInfo]: ...


@dataclass(frozen=True, slots=True)
class RunSet:
    """What one command-line argument names: a group of repeats (``group`` set) or one run."""

    name: str
    runs: list[RunInfo]
    group: str | None = None


def resolve(store: RunSource, ref: str) -> RunSet:
    """A group id (``g-…``, or an unambiguous prefix of at least 4 of its characters) -> its runs in repeat
    order; anything else -> the one run it names (``store.get_run``)."""
    key = ref.strip().lower()
    if not is_group_ref(key):
        run = store.get_run(ref)
        return RunSet(run.id, [run])
    if len(key) < MIN_GROUP_PREFIX:
        raise NotFoundError(f"no group {key!r} (a group prefix needs g- and at least 4 characters)")
    found: dict[str, list[tuple[int, RunInfo]]] = {}
    for run in store.list_runs():
        rep = repeat_of(run)
        if rep is not None and rep[0].startswith(key):
            found.setdefault(rep[0], []).append((rep[1], run))
    if not found:
        raise NotFoundError(f"no group {key!r} in this store", hint="`gpuledger bench --repeat N` makes one")
    if len(found) > 1:
        raise NotFoundError(f"group prefix {key!r} is ambiguous: {', '.join(sorted(found))}")
    ((group, members),) = found.items()
    return RunSet(group, [r for _, r in sorted(members, key=lambda p: p[0])], group)


def resolve_all(store: RunSource, refs: Sequence[str]) -> list[RunSet]:
    """Every argument resolved; a run named twice (directly or through a group) is a UsageError."""
    sets = [resolve(store, r) for r in refs]
    seen: set[str] = set()
    for s in sets:
        for run in s.runs:
            if run.id in seen:
                raise UsageError(f"run {run.id} is given twice")
            seen.add(run.id)
    return sets


# --------------------------------------------------------------------------------------------------
# A group's figures
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupFigure:
    """One figure over a group's runs: its label and unit, each run's value (None: that run had none, with
    the reason in the run) and the mean with its interval over the runs that had it."""

    key: str
    label: str
    unit: str
    values: tuple[float | None, ...]
    interval: Interval | None

    def text(self) -> str:
        return self.interval.text(self.unit) if self.interval is not None else f"n/a {self.unit}"

    def document(self) -> FigureDoc:
        return FigureDoc(label=self.label, unit=self.unit, values=list(self.values),
                         interval=self.interval.document() if self.interval is not None else None)


def _figure(key: str, label: str, unit: str, values: Sequence[float | None]) -> GroupFigure:
    present = [v for v in values if v is not None]
    return GroupFigure(key, label, unit, tuple(values), mean_interval(present))


def measured_figures(runs: Sequence[RunInfo]) -> list[GroupFigure]:
    """The key measured figures of the runs (the headline rate, latency percentiles ...: each summary's
    ``key_figures``) over the group."""
    labels: dict[str, str] = {}
    per_run: list[dict[str, float | None]] = []
    for run in runs:
        row: dict[str, float | None] = {}
        for label, q in run.summary.key_figures() if run.summary is not None else []:
            labels.setdefault(label, q.unit)
            row[label] = q.value
        per_run.append(row)
    return [
        _figure(label, label, unit, [row.get(label) for row in per_run]) for label, unit in labels.items()
    ]


def cost_figures(costs: Sequence[RunCost]) -> list[GroupFigure]:
    """The price of each run's headline unit and what one currency unit buys, over the group: what one
    currency unit buys is the arithmetic mean of the runs' figures (with its Student-t interval), and the
    price is its reciprocal — the unit's quantum ÷ that mean, the harmonic mean of the runs' prices, with
    the interval the reciprocal of its ends — so the two figures agree (the group's price buys its yield)."""
    if not costs:
        return []
    first = costs[0]
    head = first.inputs.unit(first.headline)
    per_money = f"{head.plural} per {first.currency}"
    yield_ = _figure(
        "per_money", per_money, head.plural, [c.evaluation.per_money(first.headline) for c in costs]
    )
    prices = [c.evaluation.cost_per(first.headline) for c in costs]
    mean_of = (
        f"1 ÷ the arithmetic mean of the runs' {per_money}, {head.per_text()}: the harmonic mean of the "
        f"runs' prices, the reciprocal of the group's {per_money}"
    )
    iv = yield_.interval
    price = GroupFigure(
        "cost_per_unit",
        f"cost {head.per_text()}",
        first.currency,
        tuple(prices),
        iv.reciprocal(mean_of, head.price_per) if iv is not None and iv.mean > 0 else None,
    )
    return [price, yield_]


@dataclass(frozen=True, slots=True)
class GroupSummary:
    """A group of repeats: its runs, each figure's mean with interval and CV, and the runs' verdicts."""

    name: str
    runs: list[RunInfo]
    figures: list[GroupFigure]
    costs: list[RunCost] = field(default_factory=list)

    def figure(self, key: str) -> GroupFigure | None:
        return next((f for f in self.figures if f.key == key), None)

    def verdicts(self) -> list[tuple[str, str]]:
        """(run id, verdict status) of each run with a stored verdict."""
        return [
            (r.id, r.summary.verdict.status) for r in self.runs if r.summary is not None and r.summary.verdict
        ]

    def document(self) -> GroupDocument:
        """The group as ``cost GROUP --json`` prints it (with the runs' cost documents when priced)."""
        return GroupDocument(
            group=self.name,
            runs=[r.id for r in self.runs],
            figures={f.label: f.document() for f in self.figures},
            verdicts=dict(self.verdicts()),
            costs=[c.document() for c in self.costs] if self.costs else None,
        )


def summarize_group(name: str, runs: Sequence[RunInfo], costs: Sequence[RunCost] = ()) -> GroupSummary:
    return GroupSummary(name, list(runs), [*cost_figures(costs), *measured_figures(runs)], list(costs))


@dataclass(frozen=True, slots=True)
class GroupComparison:
    """Group A against group B: the ratio of their means of one unit per currency unit (the cost
    efficiency ``compare`` gives for two runs) and of the headline rate, each with its interval."""

    a: GroupSummary
    b: GroupSummary
    unit: str
    words: str
    currency: str
    ratio: RatioInterval | None
    throughput: RatioInterval | None

    def headline(self) -> str:
        if self.ratio is None:
            return f"no ratio: a group has no {self.words} per {self.currency}"
        return f"{self.ratio.text()} the {self.words} per {self.currency}"

    def document(self) -> GroupComparisonDocument:
        """``compare GROUP GROUP --json``."""
        return GroupComparisonDocument(
            a=self.a.document().model_copy(update={"costs": None}),
            b=self.b.document().model_copy(update={"costs": None}),
            unit=self.unit,
            currency=self.currency,
            ratio=self.ratio.document() if self.ratio is not None else None,
            throughput_ratio=self.throughput.document() if self.throughput is not None else None,
            meaning=f"{self.a.name} gets the ratio x the {self.words} per {self.currency} of {self.b.name}",
        )


def compare_groups(a: GroupSummary, b: GroupSummary, basis: str | None = None) -> GroupComparison:
    """A ÷ B of units per currency unit (``basis``: the unit compared, default the headline unit of A's
    first run; every run must have measured it) and of their rate; every run priced in one currency."""
    if not a.costs or not b.costs:
        raise UsageError("a group comparison needs priced runs on both sides")
    _, unit = resolve_basis([*a.costs, *b.costs], basis)
    currencies = {c.currency for c in [*a.costs, *b.costs]}
    if len(currencies) > 1:
        raise UsageError(
            f"the groups are priced in different currencies ({', '.join(sorted(currencies))}); "
            "gpuledger does no currency conversion"
        )
    words = a.costs[0].inputs.unit(unit).plural

    def values(g: GroupSummary, per_money: bool) -> list[float]:
        out = [c.evaluation.per_money(unit) if per_money else c.inputs.rate(unit) for c in g.costs]
        return [v for v in out if v is not None and v > 0]

    return GroupComparison(
        a,
        b,
        unit,
        words,
        a.costs[0].currency,
        ratio_interval(values(a, True), values(b, True)),
        ratio_interval(values(a, False), values(b, False)),
    )


__all__ = [
    "GROUP_PREFIX",
    "LEVEL",
    "REPEAT_KEY",
    "FigureDoc",
    "GroupComparison",
    "GroupComparisonDocument",
    "GroupDocument",
    "GroupFigure",
    "GroupSummary",
    "Interval",
    "IntervalDoc",
    "RatioDoc",
    "RatioInterval",
    "RunSet",
    "betainc",
    "compare_groups",
    "cost_figures",
    "fmt_at",
    "fmt_with_interval",
    "is_group_ref",
    "mean_interval",
    "measured_figures",
    "new_group_id",
    "ratio_interval",
    "repeat_of",
    "repeat_record",
    "resolve",
    "resolve_all",
    "summarize_group",
    "t_cdf",
    "t_quantile",
]
