"""The headline pairs of the shipped public sets, and next to each the closest like-for-like pair gpuledger
holds (``gpuledger public``): a "5x" of one page set beside a pair of the same generation, precision, model
and scenario (cost/comparison/likeness.py).

A set's headline pair is its first operating point (interactivity target, or scenario) that has points of
two vendors; A is the one with the higher output rate per GPU, the side the headline favours. A pair that
is like for like already needs no offer; every other gets one: the pair's differences, and the closest
like-for-like pair among all shipped points with its throughput ratio — and, when the headline names its
publisher's price tier and both GPUs of the offered pair have a preset of that tier, the cost ratio at it.
"""

from __future__ import annotations

from dataclasses import replace

from pydantic import BaseModel, ConfigDict, Field

from gpuledger.catalog import Catalog, load_catalog
from gpuledger.cost.comparison.likeness import ClosestPair, Likeness, closest_like_for_like, likeness
from gpuledger.cost.pricing.presets import builtin_presets
from gpuledger.cost.published.published import public_points, public_sets
from gpuledger.kinds.text.published import PublishedSummary
from gpuledger.records import RunInfo


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class HeadlinePoint(_Model):
    run_id: str  # public:SET:N, the N-th point of the set
    label: str
    gpu: str
    gpus: int = Field(ge=1)
    output_tokens_per_s_per_gpu: float = Field(gt=0)


class TierRatio(_Model):
    """A pair's cost ratio (A's tokens per dollar ÷ B's) at one price tier of the headline's publisher."""

    tier: str
    profile_a: str
    profile_b: str
    ratio: float = Field(gt=0)


class HeadlineOffer(_Model):
    """A headline pair, what makes it not like for like, and the like-for-like pair offered next to it."""

    set: str
    operating_point: str
    a: HeadlinePoint
    b: HeadlinePoint
    throughput_ratio_per_gpu: float = Field(gt=0)
    published_cost_ratio: float | None = Field(
        default=None, gt=0, description="B's printed cost per 1M tokens ÷ A's: A's advantage per token")
    likeness: Likeness
    like_for_like: ClosestPair | None
    like_for_like_cost: TierRatio | None = None
    why: str = Field(max_length=2_000)


def _rate(run: RunInfo) -> float:
    s = run.summary
    assert isinstance(s, PublishedSummary)
    return s.output_tokens_per_s / s.gpus


def _point(run: RunInfo) -> HeadlinePoint:
    s = run.summary
    assert isinstance(s, PublishedSummary)
    return HeadlinePoint(run_id=run.id, label=run.label, gpu=s.gpu, gpus=s.gpus,
                         output_tokens_per_s_per_gpu=_rate(run))


def _where(s: PublishedSummary) -> str:
    if s.tokens_per_s_per_user is not None:
        return f"{s.tokens_per_s_per_user:g} tok/s per user"
    return s.scenario or "the set's one operating point"


def _headline(runs: list[RunInfo], cat: Catalog) -> tuple[RunInfo, RunInfo, str] | None:
    """The set's first operating point with points of two vendors: (A, B, where)."""
    seen: dict[str, list[RunInfo]] = {}
    for run in runs:
        s = run.summary
        if isinstance(s, PublishedSummary):
            seen.setdefault(_where(s), []).append(run)
    for where, group in seen.items():
        by_vendor: dict[str, RunInfo] = {}
        for run in group:
            s = run.summary
            assert isinstance(s, PublishedSummary)
            spec = cat.find(s.gpu)
            if spec is not None:
                by_vendor.setdefault(spec.vendor, run)
        if len(by_vendor) >= 2:
            x, y = sorted(by_vendor.values(), key=_rate, reverse=True)[:2]
            return x, y, where
    return None


def _tier_ratio(head: RunInfo, pair: ClosestPair, points: dict[str, RunInfo]) -> TierRatio | None:
    s = head.summary
    if not isinstance(s, PublishedSummary) or s.publisher_profile is None or "-inferencex-" not in (
            s.publisher_profile):
        return None
    tier = s.publisher_profile.rsplit("-inferencex-", 1)[1]
    presets = builtin_presets()
    sa, sb = points[pair.a].summary, points[pair.b].summary
    assert isinstance(sa, PublishedSummary) and isinstance(sb, PublishedSummary)
    pa, pb = presets.get(f"{sa.gpu}-inferencex-{tier}"), presets.get(f"{sb.gpu}-inferencex-{tier}")
    if pa is None or pb is None or pa.rental_per_gpu_hour is None or pb.rental_per_gpu_hour is None:
        return None
    ratio = pair.throughput_ratio_per_gpu * pb.rental_per_gpu_hour / pa.rental_per_gpu_hour
    return TierRatio(tier=tier, profile_a=pa.name, profile_b=pb.name, ratio=ratio)


def shipped_runs(catalog: Catalog | None = None) -> dict[str, list[RunInfo]]:
    """Every shipped set's points as runs, ids ``public:SET:N`` (as the estimate's pool names them)."""
    return {name: [replace(r, id=f"public:{name}:{i}") for i, r in enumerate(public_points(name, catalog),
                                                                             start=1)]
            for name in public_sets()}


def headline_offers(catalog: Catalog | None = None) -> list[HeadlineOffer]:
    """For every shipped set whose headline pair is not like for like: that pair and the offer."""
    cat = catalog if catalog is not None else load_catalog()
    sets = shipped_runs(cat)
    every = [r for runs in sets.values() for r in runs]
    by_id = {r.id: r for r in every}
    out: list[HeadlineOffer] = []
    for name, runs in sets.items():
        found = _headline(runs, cat)
        if found is None:
            continue
        a, b, where = found
        like = likeness(a, b, catalog=cat)
        if like.like_for_like:
            continue
        sa, sb = a.summary, b.summary
        assert isinstance(sa, PublishedSummary) and isinstance(sb, PublishedSummary)
        printed = None
        if sa.published_usd_per_1m_total_tokens and sb.published_usd_per_1m_total_tokens:
            printed = sb.published_usd_per_1m_total_tokens / sa.published_usd_per_1m_total_tokens
        closest = closest_like_for_like((a, b), every, catalog=cat)
        tier = _tier_ratio(a, closest, by_id) if closest is not None else None
        why = (f"{like.summary}; the closest like-for-like pair gpuledger holds: "
               + (f"{closest.label_a} vs {closest.label_b}, {closest.likeness.summary}" if closest is not None
                  else "none (no shipped pair of these two vendors)"))
        out.append(HeadlineOffer(set=name, operating_point=where, a=_point(a), b=_point(b),
                                 throughput_ratio_per_gpu=_rate(a) / _rate(b), published_cost_ratio=printed,
                                 likeness=like, like_for_like=closest, like_for_like_cost=tier, why=why))
    return out
