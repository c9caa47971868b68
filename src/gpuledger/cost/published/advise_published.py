"""Published points of one model on one GPU, interpolated along their Pareto front: the throughput per GPU a
publisher's points give at an interactivity (tokens/s per user) between the ones they measured — the way
InferenceX's compare pages read their curves. Never extrapolated: outside the published range there is no
published figure (the advisor falls back to the roofline)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpuledger.catalog import normalise_dtype
from gpuledger.cost.pricing.modelarch import ModelArch, find_known
from gpuledger.kinds.text.published import PublishedSummary
from gpuledger.records import RunInfo


@dataclass(frozen=True, slots=True)
class FrontPoint:
    run_id: str
    tokens_per_s_per_user: float
    output_tokens_per_s_per_gpu: float
    total_tokens_per_s_per_gpu: float
    label: str  # "published by SOURCE (DATE), not measured here"
    output_published: bool = True  # the publisher gave the output rate (else gpuledger derived it)


@dataclass(frozen=True, slots=True)
class Interpolated:
    output_tokens_per_s_per_gpu: float
    total_tokens_per_s_per_gpu: float
    tokens_per_s_per_user: float
    between: tuple[FrontPoint, FrontPoint]
    how: str
    exact: bool = False  # at a published point whose output rate was published: no arithmetic of ours

    @property
    def origin(self) -> str:
        """"published" at a point as published; "derived from published" between points (interpolated) or
        where the output rate was derived from another published rate."""
        return "published" if self.exact else "derived from published"


def points_for(
    runs: Iterable[RunInfo], arch: ModelArch, gpu: str, input_len: int, output_len: int, dtype: str
) -> list[FrontPoint]:
    """The published points of ``arch`` on catalog GPU ``gpu`` at exactly these lengths and precision (a
    point that names none is taken as any) that publish an interactivity."""
    out: list[FrontPoint] = []
    seen: set[tuple[float, float]] = set()
    for run in runs:
        s = run.summary
        if not isinstance(s, PublishedSummary) or s.gpu != gpu or not s.tokens_per_s_per_user:
            continue
        if (s.input_len, s.output_len) != (input_len, output_len) or s.total_tokens_per_s is None:
            continue
        if s.precision and normalise_dtype(s.precision) != dtype:
            continue
        known = find_known(run.model)
        if known is None or known.name != arch.name:
            continue
        key = (s.tokens_per_s_per_user, s.total_tokens_per_s / s.gpus)
        if key in seen:  # a stored copy of a shipped point
            continue
        seen.add(key)
        out.append(FrontPoint(run.id, s.tokens_per_s_per_user, s.output_tokens_per_s / s.gpus,
                              s.total_tokens_per_s / s.gpus, s.origin().label,
                              "output_tokens_per_s" in s.published_rates))
    return out


def pareto_front(points: Sequence[FrontPoint]) -> list[FrontPoint]:
    """The points no other point beats on both interactivity and throughput, by interactivity."""
    front = [p for p in points if not any(
        q is not p and q.tokens_per_s_per_user >= p.tokens_per_s_per_user
        and q.total_tokens_per_s_per_gpu >= p.total_tokens_per_s_per_gpu
        and (q.tokens_per_s_per_user, q.total_tokens_per_s_per_gpu)
        != (p.tokens_per_s_per_user, p.total_tokens_per_s_per_gpu)
        for q in points)]
    return sorted(front, key=lambda p: p.tokens_per_s_per_user)


def interpolate(points: Sequence[FrontPoint], tokens_per_s_per_user: float) -> Interpolated | str:
    """The front's throughput at ``tokens_per_s_per_user`` (linear between the two front points around
    it), or why there is none."""
    front = pareto_front(points)
    if not front:
        return "no published point of this model, GPU and lengths"
    lo, hi = front[0].tokens_per_s_per_user, front[-1].tokens_per_s_per_user
    u = tokens_per_s_per_user
    if not lo <= u <= hi:
        return f"{u:g} tok/s/user is outside the published range {lo:g} … {hi:g} (not extrapolated)"
    for a, b in zip(front, front[1:] or front, strict=False):
        if a.tokens_per_s_per_user <= u <= b.tokens_per_s_per_user:
            span = b.tokens_per_s_per_user - a.tokens_per_s_per_user
            t = 0.0 if span == 0 else (u - a.tokens_per_s_per_user) / span
            out = _between(a.output_tokens_per_s_per_gpu, b.output_tokens_per_s_per_gpu, t)
            total = _between(a.total_tokens_per_s_per_gpu, b.total_tokens_per_s_per_gpu, t)
            how = (f"derived from published: interpolated along the published Pareto front between "
                   f"{a.tokens_per_s_per_user:g} and {b.tokens_per_s_per_user:g} tok/s/user ({a.label})")
            at = a if t == 0.0 else b if t == 1.0 else None
            if at is not None:
                rate = "" if at.output_published else (
                    "; its output rate derived from the published total rate")
                how = f"the published point at {at.tokens_per_s_per_user:g} tok/s/user ({at.label}{rate})"
            exact = at is not None and at.output_published
            return Interpolated(out, total, u, (a, b), how, exact)
    return "no published point brackets this interactivity"


def _between(a: float, b: float, t: float) -> float:
    return a + t * (b - a)
