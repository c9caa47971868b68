"""The cost commands over a store: a stored run priced as ``gpuledger cost`` prices it, and stored runs or
groups of repeats compared as ``gpuledger compare`` compares them. The CLI and ``gpuledger serve`` both call
these, so ``compare --json`` and the dashboard's ``/api/compare`` are one document.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gpuledger.catalog import Catalog
from gpuledger.cost.comparison.compare import CLOSEST_SEARCH_LIMIT, Comparison, compare, with_closest
from gpuledger.cost.comparison.groups import (
    GroupComparison,
    compare_groups,
    is_group_ref,
    resolve_all,
    summarize_group,
)
from gpuledger.cost.comparison.repricing import Repricing, reprice, repricing_document
from gpuledger.cost.pricing.operating import DEFAULT_ATTAINMENT
from gpuledger.cost.pricing.presets import default_profile_for, load_profile
from gpuledger.cost.pricing.profile import CostProfile
from gpuledger.cost.pricing.runcost import RunCost, cost_of_run
from gpuledger.errors import UsageError
from gpuledger.records import RunInfo
from gpuledger.store import Store


def profile_for(run: RunInfo, name: str | None, catalog: Catalog) -> CostProfile:
    """The profile ``name`` (a preset or a YAML file), else the catalog preset of the run's hardware."""
    return load_profile(name, catalog) if name else default_profile_for(run, catalog)


def price_run(
    store: Store,
    run: RunInfo,
    profile_name: str | None,
    catalog: Catalog,
    *,
    stage: str | None = None,
    slo_attainment: float | None = None,
    gpus: int | None = None,
    gpu: str | None = None,
) -> RunCost:
    """``gpuledger cost RUN``'s cost of a stored run (a profile that takes its setup hours from the doctor's
    ledger reads it from the store)."""
    profile = profile_for(run, profile_name, catalog)
    return cost_of_run(
        run,
        profile,
        catalog=catalog,
        doctor_records=store.list_doctor_runs() if profile.from_doctor_history else None,
        stage=stage,
        slo_attainment=DEFAULT_ATTAINMENT if slo_attainment is None else slo_attainment,
        gpus=gpus,
        gpu=gpu,
    )


@dataclass(frozen=True, slots=True)
class StoredComparison:
    """What ``gpuledger compare`` found: for runs, their ``comparison`` and its pairs of published points
    re-priced (``repricing``); for groups of repeats (a run stands as a group of one), ``groups``."""

    comparison: Comparison | None = None
    repricing: tuple[Repricing, ...] = ()
    groups: GroupComparison | None = None

    def to_dict(self) -> dict[str, Any]:
        """``compare --json``."""
        if self.groups is not None:
            return self.groups.document().model_dump(mode="json")
        if self.comparison is None:
            raise ValueError("a StoredComparison holds runs' comparison or groups'")
        doc = self.comparison.document().model_dump(mode="json")
        if not self.repricing:
            return doc
        return {**doc, "published_repricing": repricing_document(self.repricing).model_dump(mode="json")}


def compare_stored(
    store: Store,
    refs: Sequence[str],
    profile_of: Callable[[str], str | None],
    catalog: Catalog,
    basis: str | None = None,
) -> StoredComparison:
    """``gpuledger compare REF REF...``: run ids (or prefixes), the first the reference, each priced with
    ``profile_of(ref)`` (None: its hardware's preset), and for a pair that is not like for like the closest
    like-for-like pair of the store's newest runs; or two groups of repeats (``g-…``; a run beside a group
    stands as a group of one): the ratio of their means with its 95 % interval."""
    if len(refs) < 2:
        raise UsageError("compare needs at least two runs")
    if any(is_group_ref(r) for r in refs):
        if len(refs) != 2:
            raise UsageError(f"compare of groups takes two arguments (groups or runs), got {len(refs)}")
        sides = [
            summarize_group(found.name, found.runs,
                            [price_run(store, run, profile_of(ref), catalog) for run in found.runs])
            for ref, found in zip(refs, resolve_all(store, refs), strict=True)
        ]
        return StoredComparison(groups=compare_groups(sides[0], sides[1], basis))
    costs = [price_run(store, store.get_run(ref), profile_of(ref), catalog) for ref in refs]
    comp = compare(costs, basis=basis, catalog=catalog)
    if not all(p.likeness.like_for_like for p in comp.pairs):
        # A pair that is not like for like: the closest like-for-like pair among the store's newest runs.
        stored = list(store.list_runs(limit=CLOSEST_SEARCH_LIMIT))
        comp = with_closest(comp, stored, limit=CLOSEST_SEARCH_LIMIT, catalog=catalog)
    return StoredComparison(comparison=comp, repricing=tuple(reprice(comp, catalog)))
