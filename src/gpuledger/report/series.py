"""Pure helpers that turn stored timings and samples into plottable series of bounded size.

A 100k-request run must still give a small, fast HTML file: CDFs keep at most ``max_points``
points chosen at evenly spaced ranks (exact values, exact cumulative fractions), and time
series are averaged over equal buckets of consecutive samples. Every figure says which was done.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

CDF_MAX_POINTS = 600
TIMESERIES_MAX_POINTS = 1200


def cdf_points(values: Sequence[float], max_points: int = CDF_MAX_POINTS) -> tuple[list[float], list[float]]:
    """Empirical CDF of ``values``: ``(x, y)`` with ``y`` = fraction of values ≤ ``x`` (0..1].

    With more than ``max_points`` values the points are taken at evenly spaced ranks, always
    including the smallest and the largest value, so the curve's shape and tails are exact where
    drawn. NaN values are dropped.
    """
    if max_points < 2:
        raise ValueError("max_points must be at least 2")
    data = sorted(v for v in values if not math.isnan(v))
    n = len(data)
    if n == 0:
        return [], []
    if n <= max_points:
        return data, [(i + 1) / n for i in range(n)]
    ranks = sorted({round(j * (n - 1) / (max_points - 1)) for j in range(max_points)})
    return [data[r] for r in ranks], [(r + 1) / n for r in ranks]


def bucket_means(
    t: Sequence[float], v: Sequence[float], max_points: int = TIMESERIES_MAX_POINTS
) -> tuple[list[float], list[float], int]:
    """Downsample a time series (sorted by ``t``) to at most ``max_points`` by averaging equal
    buckets of consecutive samples. Returns ``(t, v, bucket_size)``; bucket size 1 = unchanged."""
    if len(t) != len(v):
        raise ValueError("t and v differ in length")
    n = len(t)
    if n <= max_points:
        return list(t), list(v), 1
    size = math.ceil(n / max_points)
    out_t: list[float] = []
    out_v: list[float] = []
    for start in range(0, n, size):
        tt = t[start : start + size]
        vv = v[start : start + size]
        out_t.append(sum(tt) / len(tt))
        out_v.append(sum(vv) / len(vv))
    return out_t, out_v, size


def stride_for(total: int, budget: int) -> int:
    """Smallest step k such that taking every k-th of ``total`` items keeps at most ``budget``."""
    if total <= budget or budget <= 0:
        return 1
    return math.ceil(total / budget)


def pareto_front(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points not dominated by another (higher or equal in both coordinates, higher in one),
    sorted by x. Both coordinates are "more is better"."""
    front: list[tuple[float, float]] = []
    for x, y in sorted(points, key=lambda p: (-p[0], -p[1])):
        if not front or y > front[-1][1]:
            front.append((x, y))
    return sorted(front)
