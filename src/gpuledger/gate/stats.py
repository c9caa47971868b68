"""The gate's statistics: each side of a metric as an estimate (a value, its standard error, its degrees of
freedom), and the difference of two sides with its 95 % interval.

A side's estimate (docs/gate.md, "Statistics"):

- a group of n ≥ 2 runs (``bench --repeat N``): the arithmetic mean of the runs' figures, se = s/√n with s the
  sample standard deviation (n − 1), df = n − 1;
- one run, from its per-request (per-item) figures — stated as such in the output, because it says how
  precisely the run measured its own figure, not how much a repeat would move it:
  * a percentile q of m values: the distribution-free 95 % interval of a quantile from the order statistics
    x₍l₎ … x₍u₎, l = ⌊mq − z√(mq(1 − q))⌋, u = ⌈mq + z√(mq(1 − q))⌉ (the binomial count of values below the
    quantile, normal approximation; Conover, *Practical Nonparametric Statistics*, §3.2), read as ± z standard
    errors: se = (x₍u₎ − x₍l₎) ÷ 2z, df ∞. When l < 1 or u > m the m values do not bound the percentile: no
    interval (p99 of 64 requests);
  * a rate over the window (throughput, and what is in proportion to it: units per currency unit, joules per
    unit), at a fixed concurrency c (a closed loop; training's steps one after the other: c = 1): by Little's
    law the run does c · ΣW ÷ ΣR units per second (W an item's work, R its duration), so the rate's relative
    standard error is that of the ratio ΣW ÷ ΣR over the n items, by the delta method:
    √((s_W²/W̄² + s_R²/R̄² − 2·s_WR/(W̄·R̄)) ÷ n), df n − 1 (fewer than ``MIN_ITEMS`` = 5 items: none).
    Any other load (a rate, a sweep, a trace): the count of completions in the window read as Poisson,
    relative se 1/√n, df ∞;
  * a share (the error rate) of n requests: the Agresti–Caffo standard error, √(p̃(1 − p̃) ÷ (n + 2)) with
    p̃ = (failed + 1) ÷ (n + 2), df ∞.
- the difference candidate − baseline: d ± t(0.975, ν) · √(se_A² + se_B²), ν from Welch–Satterthwaite,
  (se_A² + se_B²)² ÷ (se_A⁴/df_A + se_B⁴/df_B) (a side of df ∞ adds nothing below the line; both ∞: the normal
  quantile). For two groups this is Welch's t-test; the difference is distinguishable at 95 % when the
  interval excludes 0.

t quantiles are ``gpuledger.cost.comparison.groups.t_quantile`` (the regularised incomplete beta function
inverted by bisection, tested against published tables); the normal quantile is the standard library's
``NormalDist``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

from gpuledger.cost.comparison.groups import t_quantile

LEVEL = 0.95
Z = NormalDist().inv_cdf(0.5 + LEVEL / 2.0)  # 1.959964…
MIN_ITEMS = 5


@dataclass(frozen=True, slots=True)
class Estimate:
    """A side's figure: ``value`` with its standard error ``se`` (None: no interval, ``why`` says why) and
    degrees of freedom ``df`` (None: unbounded, a normal quantile); ``n`` the runs or values it rests on."""

    value: float
    se: float | None
    df: float | None
    n: int
    method: str
    why: str | None = None

    def scaled(self, factor: float, method: str | None = None) -> Estimate:
        """The same estimate of ``factor`` × the figure (its se scaled alike)."""
        se = None if self.se is None else self.se * abs(factor)
        return Estimate(self.value * factor, se, self.df, self.n, method or self.method, self.why)


@dataclass(frozen=True, slots=True)
class Spread:
    """A rate's relative standard error (None, with ``why``, when there is none)."""

    relative_se: float | None
    df: float | None
    n: int
    method: str
    why: str | None = None


@dataclass(frozen=True, slots=True)
class Difference:
    """candidate − baseline with the half width of its 95 % interval (None: a side has no standard error)."""

    value: float
    half_width: float | None
    df: float | None

    @property
    def distinguishable(self) -> bool | None:
        if self.half_width is None:
            return None
        return abs(self.value) > self.half_width


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of sorted values, linear interpolation (``bench.metrics.percentile``'s
    rule)."""
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def group_estimate(values: Sequence[float]) -> Estimate | None:
    """The arithmetic mean of the runs' figures with se = s/√n (s: n − 1), df n − 1; None for no values."""
    v = [float(x) for x in values if math.isfinite(x)]
    n = len(v)
    if n == 0:
        return None
    mean = math.fsum(v) / n
    if n == 1:
        return Estimate(mean, None, None, 1, "one run", "one run: no interval over runs")
    sd = math.sqrt(math.fsum((x - mean) ** 2 for x in v) / (n - 1))
    return Estimate(
        mean,
        sd / math.sqrt(n),
        float(n - 1),
        n,
        f"mean of {n} runs, se = s/√n (s: sample standard deviation, n − 1), df {n - 1}",
    )


def quantile_estimate(values: Sequence[float], q: float, what: str) -> Estimate | None:
    """The ``q`` quantile of one run's ``values`` (``what`` they are: "requests") with the standard error of
    its order-statistic interval (module docstring); None for no values."""
    v = sorted(float(x) for x in values if math.isfinite(x))
    m = len(v)
    if m == 0:
        return None
    point = quantile(v, q)
    centre = m * q
    spread = Z * math.sqrt(m * q * (1.0 - q))
    lo, hi = math.floor(centre - spread), math.ceil(centre + spread)
    method = (
        f"p{q * 100:g} of {m} {what}: order statistics x({lo}) … x({hi}) as its 95 % interval "
        "(distribution-free), se = width ÷ 2z"
    )
    if lo < 1 or hi > m:
        return Estimate(
            point,
            None,
            None,
            m,
            method,
            f"{m} {what} do not bound p{q * 100:g} (its interval needs order statistics "
            f"{lo} … {hi} of 1 … {m})",
        )
    return Estimate(point, (v[hi - 1] - v[lo - 1]) / (2.0 * Z), None, m, method)


def ratio_spread(work: Sequence[float], durations: Sequence[float], concurrency: int) -> Spread:
    """The relative standard error of a rate a closed loop of ``concurrency`` items in flight measured, from
    its finished items' ``work`` and ``durations`` (pairs, seconds): Little's law and the delta method."""
    pairs = [(w, r) for w, r in zip(work, durations, strict=True) if math.isfinite(w) and math.isfinite(r)]
    n = len(pairs)
    method = (
        f"Little's law at concurrency {concurrency}: the rate is c·ΣW/ΣR over the run's {n} finished "
        f"items (W work, R duration); its relative se by the delta method, df {max(n - 1, 1)}"
    )
    if n < MIN_ITEMS:
        return Spread(None, None, n, method, f"{n} finished items: a rate's interval needs {MIN_ITEMS}")
    mw = math.fsum(w for w, _ in pairs) / n
    mr = math.fsum(r for _, r in pairs) / n
    if mw <= 0 or mr <= 0:
        return Spread(None, None, n, method, "the items did no work or took no time")
    vw = math.fsum((w - mw) ** 2 for w, _ in pairs) / (n - 1)
    vr = math.fsum((r - mr) ** 2 for _, r in pairs) / (n - 1)
    cov = math.fsum((w - mw) * (r - mr) for w, r in pairs) / (n - 1)
    rel_var = (vw / mw**2 + vr / mr**2 - 2.0 * cov / (mw * mr)) / n
    return Spread(math.sqrt(max(rel_var, 0.0)), float(n - 1), n, method)


def count_spread(completions: int) -> Spread:
    """The relative standard error of a rate of ``completions`` in a window, read as a Poisson count."""
    method = f"the run's {completions} completions in its window as a Poisson count: relative se 1/√n"
    if completions < MIN_ITEMS:
        return Spread(
            None, None, completions, method, f"{completions} completions: a rate's interval needs {MIN_ITEMS}"
        )
    return Spread(1.0 / math.sqrt(completions), None, completions, method)


def rate_estimate(value: float, spread: Spread) -> Estimate:
    """One run's rate ``value`` with the standard error its completions give it."""
    se = None if spread.relative_se is None else value * spread.relative_se
    return Estimate(value, se, spread.df, spread.n, spread.method, spread.why)


def share_estimate(failed: int, total: int) -> Estimate | None:
    """One run's share ``failed`` ÷ ``total`` with the Agresti–Caffo standard error; None for no items."""
    if total <= 0:
        return None
    adjusted = (failed + 1) / (total + 2)
    se = math.sqrt(adjusted * (1.0 - adjusted) / (total + 2))
    return Estimate(
        failed / total,
        se,
        None,
        total,
        f"{failed} of {total} requests failed; Agresti–Caffo se √(p̃(1 − p̃)/(n + 2)), "
        "p̃ = (failed + 1)/(n + 2)",
    )


def difference(a: Estimate, b: Estimate) -> Difference:
    """b − a with its 95 % interval (Welch–Satterthwaite degrees of freedom; module docstring)."""
    d = b.value - a.value
    if a.se is None or b.se is None:
        return Difference(d, None, None)
    va, vb = a.se**2, b.se**2
    if va + vb == 0:
        return Difference(d, 0.0, None)
    below = sum(v * v / df for v, df in ((va, a.df), (vb, b.df)) if df is not None)
    df = (va + vb) ** 2 / below if below > 0 else None
    t = Z if df is None else t_quantile(0.5 + LEVEL / 2.0, df)
    return Difference(d, t * math.sqrt(va + vb), df)


__all__ = [
    "LEVEL",
    "MIN_ITEMS",
    "Z",
    "Difference",
    "Estimate",
    "Spread",
    "difference",
    "group_estimate",
    "quantile",
    "quantile_estimate",
    "count_spread",
    "rate_estimate",
    "ratio_spread",
    "share_estimate",
]
