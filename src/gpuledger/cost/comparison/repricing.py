"""A published comparison re-priced: the publisher's ratio next to the user's, and what moved it.

Two published points (``kinds/text/published.py``) that name the tier their publisher priced them with
(``publisher_profile``, e.g. ``b200-inferencex-hyperscaler``) are priced twice: with the publisher's tiers
(the published ratio) and with the user's profiles (the user's ratio). Their rates are the same both times,
so the two ratios differ only by what an hour costs and how much of it serves:

    ratio(A, B) = (rate_A x u_A / H_A) / (rate_B x u_B / H_B)

``steps`` swaps the publisher's pricing for the user's one part at a time, in the order price (hardware
amortisation or rental), utilisation, labour, energy, other opex, and says how much each swap moved the
ratio (``factor``); the factors multiply to user ratio ÷ published ratio. The attribution depends on that
order (a swap is measured with the parts before it already swapped); the order is stated with the result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import model_serializer

from gpuledger.catalog import Catalog
from gpuledger.cost.comparison.breakeven import ratio_of
from gpuledger.cost.comparison.compare import Comparison, PairComparison
from gpuledger.cost.pricing.document import Doc
from gpuledger.cost.pricing.model import money_prefix
from gpuledger.cost.pricing.presets import load_profile
from gpuledger.cost.pricing.runcost import RunCost, cost_of_run
from gpuledger.kinds.text.published import PublishedSummary

# The parts of an hour's cost swapped one at a time, in this order: (name, HourlyCost components).
PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("price", ("capex", "rental")),
    ("utilisation", ()),
    ("labour", ("labour",)),
    ("energy", ("energy",)),
    ("other", ("other",)),
)
ORDER = (
    "each step swaps one part of the publisher's pricing for the user's, in the order price (hardware "
    "amortisation or rental), utilisation, labour, energy, other opex; factor = the ratio after the step "
    "÷ the ratio before it (the factors multiply to user ratio ÷ published ratio; another order would "
    "split the same total differently)"
)


class Step(Doc):
    """One part of the pricing swapped for the user's: the ratio after it, and how much it moved it."""

    part: str
    ratio: float  # A/B after this part is the user's (dumped as ``ratio_after``)
    factor: float  # ratio after ÷ ratio before
    what: str

    @model_serializer(mode="plain")
    def _dump(self) -> dict[str, Any]:
        return {"part": self.part, "ratio_after": self.ratio, "factor": self.factor, "what": self.what}


@dataclass(frozen=True, slots=True)
class Repricing:
    """One pair of published points priced with the publisher's tiers and with the user's profiles."""

    pair: PairComparison  # the user's comparison
    publisher_a: RunCost
    publisher_b: RunCost
    published_ratio: float  # priced with the publisher's tiers, by gpuledger
    as_published_ratio: float | None  # from the publisher's own printed costs
    as_published_note: str
    steps: list[Step] = field(default_factory=list)
    steps_note: str = ORDER

    @property
    def user_ratio(self) -> float:
        return self.pair.ratio

    @property
    def change(self) -> float:
        return self.user_ratio / self.published_ratio

    def document(self) -> RepricedPair:
        a, b = self.pair.a, self.pair.b
        sa, sb = a.summary, b.summary
        origin = sa.origin()
        return RepricedPair(
            a=a.run.id,
            b=b.run.id,
            basis=self.pair.basis,
            published_by=origin.by if origin is not None else None,
            publisher_profiles=Sides(a=self.publisher_a.profile.name, b=self.publisher_b.profile.name),
            published_ratio=self.published_ratio,
            published_ratio_meaning=f"A/B {self.pair.words()} per {self.publisher_a.currency} with the "
            "publisher's tiers, priced by gpuledger from the published rates",
            as_published_ratio=self.as_published_ratio,
            as_published_note=self.as_published_note,
            user_profiles=Sides(a=a.profile.name, b=b.profile.name),
            user_ratio=self.user_ratio,
            change=self.change,
            steps=self.steps,
            steps_note=self.steps_note,
            rates=Rates(a=a.rate_source, b=b.rate_source),
            published_cost=PrintedCosts(a=_printed(sa), b=_printed(sb)),
        )


class Sides(Doc):
    a: str
    b: str


class Rates(Doc):
    a: str
    b: str
    note: str = "the same published rates in both pricings: only the cost of an hour and its use differ"


class PrintedCost(Doc):
    """The costs a publisher printed for its point (USD, as published), when it printed them."""

    usd_per_1m_total_tokens: float | None
    usd_per_1m_output_tokens: float | None


class PrintedCosts(Doc):
    a: PrintedCost | None
    b: PrintedCost | None

    @model_serializer(mode="plain")
    def _dump(self) -> dict[str, Any]:
        return {side: (p.model_dump() if p is not None else {}) for side, p in (("a", self.a), ("b", self.b))}


class RepricedPair(Doc):
    """One pair of published points priced with the publisher's tiers and with the user's profiles: both
    ratios, the one the publisher printed, and the steps between them."""

    a: str
    b: str
    basis: str
    published_by: str | None
    publisher_profiles: Sides
    published_ratio: float
    published_ratio_meaning: str
    as_published_ratio: float | None
    as_published_note: str
    user_profiles: Sides
    user_ratio: float
    change: float
    change_meaning: str = "user ratio ÷ published ratio"
    steps: list[Step]
    steps_note: str
    rates: Rates
    published_cost: PrintedCosts


class RepricingDocument(Doc):
    """The ``published_repricing`` section of ``compare --json``."""

    meaning: str = "published points priced with their publisher's tiers and with the user's profiles"
    pairs: list[RepricedPair]


def _printed(summary: object) -> PrintedCost | None:
    if not isinstance(summary, PublishedSummary):
        return None
    return PrintedCost(usd_per_1m_total_tokens=summary.published_usd_per_1m_total_tokens,
                       usd_per_1m_output_tokens=summary.published_usd_per_1m_output_tokens)


def _as_published(a: RunCost, b: RunCost, unit: str) -> tuple[float | None, str]:
    """A/B from the costs the publisher printed (cost of B ÷ cost of A per unit), when it printed both."""
    sa, sb = a.summary, b.summary
    if not isinstance(sa, PublishedSummary) or not isinstance(sb, PublishedSummary):
        return None, "not a pair of published points"
    same_lengths = (sa.input_len, sa.output_len) == (sb.input_len, sb.output_len)
    choices = {
        "output_token": [("published_usd_per_1m_output_tokens", True),
                         ("published_usd_per_1m_total_tokens", same_lengths)],
        "token": [("published_usd_per_1m_total_tokens", True),
                  ("published_usd_per_1m_output_tokens", same_lengths)],
    }
    for key, valid in choices.get(unit, []):
        ca, cb = getattr(sa, key), getattr(sb, key)
        if valid and ca is not None and cb is not None:
            return cb / ca, f"{key}: B's {cb:g} ÷ A's {ca:g}" + (
                "" if key.endswith("output_tokens" if unit == "output_token" else "total_tokens")
                else " (the same ratio for every token unit: both points have the same input/output lengths)"
            )
    return None, "the publisher's own cost figures for both points, per this unit, were not imported"


def _mixed(publisher: RunCost, user: RunCost, swapped: set[str], use_util: bool) -> tuple[float, float]:
    """(hourly cost, utilisation) of one side with the parts in ``swapped`` (and utilisation, when
    ``use_util``) taken from the user's pricing, the rest from the publisher's."""
    theirs = publisher.evaluation.hourly.components()
    mine = user.evaluation.hourly.components()
    hourly = sum(mine[k] if k in swapped else theirs[k] for k in theirs)
    return hourly, (user.inputs.utilisation if use_util else publisher.inputs.utilisation)


def _steps(pair: PairComparison, pa: RunCost, pb: RunCost) -> tuple[list[Step], str]:
    a, b = pair.a, pair.b
    if a.currency != pa.currency or b.currency != pb.currency:
        return [], (
            f"the user's profiles are in {a.currency}, the publisher's in {pa.currency}: the change is not "
            "split by part (gpuledger does no currency conversion)"
        )
    rate_a, rate_b = a.inputs.rate(pair.unit) or 0.0, b.inputs.rate(pair.unit) or 0.0
    swapped: set[str] = set()
    use_util = False

    def state() -> tuple[float, tuple[float, float], tuple[float, float]]:
        (ha, ua), (hb, ub) = _mixed(pa, a, swapped, use_util), _mixed(pb, b, swapped, use_util)
        return (rate_a * ua / ha) / (rate_b * ub / hb), (ha, hb), (ua, ub)

    p = money_prefix(a.currency)
    before, hours, utils = state()
    steps = []
    for part, keys in PARTS:
        if part == "utilisation":
            use_util = True
        else:
            swapped.update(keys)
        after, new_hours, new_utils = state()
        if part == "utilisation":
            what = (f"utilisation A {utils[0]:.0%} -> {new_utils[0]:.0%}, "
                    f"B {utils[1]:.0%} -> {new_utils[1]:.0%}")
        else:
            what = (f"{part} {p}/h: A {_part(pa, keys):.4g} -> {_part(a, keys):.4g}, "
                    f"B {_part(pb, keys):.4g} -> {_part(b, keys):.4g}")
        if part != "other" or (new_hours, new_utils) != (hours, utils):
            steps.append(Step(part=part, ratio=after, factor=after / before, what=what))
        before, hours, utils = after, new_hours, new_utils
    return steps, ORDER


def _part(c: RunCost, keys: Sequence[str]) -> float:
    comps = c.evaluation.hourly.components()
    return sum(comps[k] for k in keys)


def publisher_cost(cost: RunCost, catalog: Catalog | None = None) -> RunCost | None:
    """The run priced with the tier its publisher used (None: not a published point naming one)."""
    summary = cost.summary
    if not isinstance(summary, PublishedSummary) or summary.publisher_profile is None:
        return None
    return cost_of_run(cost.run, load_profile(summary.publisher_profile, catalog), catalog=catalog)


def reprice(comp: Comparison, catalog: Catalog | None = None) -> list[Repricing]:
    """For each pair of the comparison made of two published points that name their publisher's tier:
    the published ratio, the user's, and the steps between them. [] when no pair is such."""
    out = []
    for pair in comp.pairs:
        pa, pb = publisher_cost(pair.a, catalog), publisher_cost(pair.b, catalog)
        if pa is None or pb is None:
            continue
        published = ratio_of(pa.evaluation, pb.evaluation, pair.unit)
        as_pub, note = _as_published(pair.a, pair.b, pair.unit)
        steps, steps_note = _steps(pair, pa, pb)
        out.append(Repricing(pair, pa, pb, published, as_pub, note, steps, steps_note))
    return out


def repricing_document(found: Sequence[Repricing]) -> RepricingDocument:
    """The ``published_repricing`` section of ``compare --json``."""
    return RepricingDocument(pairs=[r.document() for r in found])
