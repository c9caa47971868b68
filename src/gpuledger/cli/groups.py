"""Groups of repeats on the command line: ``bench --repeat N`` makes one; ``cost GROUP``, ``compare GROUP
GROUP`` and ``report GROUP`` read it.

A group id (``g-…``, from ``bench --repeat N``) stands wherever a run id is taken; ``cost.groups.resolve``
says what an argument names. These helpers are called by the commands in ``cost_cmds`` and ``report_cmd``
when an argument is a group, so the commands' run paths stay as they were.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from gpuledger.cli.common import console, print_json, warn
from gpuledger.errors import StoreError

if TYPE_CHECKING:
    from gpuledger.cost import RunCost
    from gpuledger.records import RunInfo
    from gpuledger.store import Store


def any_group(refs: Sequence[str]) -> bool:
    from gpuledger.cost.comparison.groups import is_group_ref

    return any(is_group_ref(r) for r in refs)


def cost_group(
    store: Store, ref: str, price: Callable[[RunInfo], RunCost], *, save: bool, json_out: bool
) -> None:
    """Price every run of the group and print the group: each figure's mean with its 95 % interval."""
    from gpuledger.cost.comparison.groups import resolve, summarize_group
    from gpuledger.report.groups import print_group

    found = resolve(store, ref)
    costs = [price(run) for run in found.runs]
    if save:
        for run, c in zip(found.runs, costs, strict=True):
            try:
                store.save_cost_evaluation(run.id, c.profile.name, c.profile.to_dict(),
                                           c.document().model_dump(mode="json"))
            except StoreError as exc:
                warn(f"cost evaluation of run {run.id} not saved: {exc.message}")
    group = summarize_group(found.name, found.runs, costs)
    if json_out:
        print_json(group.document().model_dump(mode="json"))
    else:
        print_group(group, console)


def run_repeats(n: int, one: Callable[[Mapping[str, Any]], RunInfo]) -> tuple[str, list[RunInfo]]:
    """``bench --repeat N``: ``one(workload_extra)`` N times, each run's workload recording the group and
    its index; a run that did not end as planned (interrupted, aborted, failed) ends the repeats there."""
    from gpuledger.cost.comparison.groups import REPEAT_KEY, new_group_id, repeat_record

    group = new_group_id()
    runs: list[RunInfo] = []
    for i in range(1, n + 1):
        info = one({REPEAT_KEY: repeat_record(group, i, n)})
        runs.append(info)
        summary = info.summary
        if info.status != "complete" or (summary is not None and (summary.interrupted or summary.aborted)):
            break
    return group, runs


def print_repeats(group: str, runs: Sequence[RunInfo], render: Callable[[RunInfo], None], *,
                  json_out: bool) -> None:
    """The runs of ``bench --repeat N`` and their group: each run as ``bench`` prints one, then the mean
    of every figure with its 95 % interval (measured figures: ``cost GROUP`` prices them)."""
    from gpuledger.cost.comparison.groups import summarize_group
    from gpuledger.report.groups import group_answer
    from gpuledger.report.terminal import print_answer

    summary = summarize_group(group, runs)
    if json_out:
        figures = summary.document().figures
        print_json({"group": group, "runs": list(runs), "figures": {k: f.model_dump(mode="json") for k, f in
                                                                    figures.items()}})
        return
    for run in runs:
        render(run)
        console.print()
    print_answer(group_answer(summary), console)
    console.print(f"  price it: gpuledger cost {group} [--profile NAME]", markup=False, highlight=False)


def expand(store: Store, refs: Sequence[str]) -> list[str]:
    """Every argument as run ids: a group gives its runs in repeat order (``report GROUP``)."""
    from gpuledger.cost.comparison.groups import resolve_all

    return [run.id for found in resolve_all(store, refs) for run in found.runs]


__all__ = ["any_group", "cost_group", "expand", "print_repeats", "run_repeats"]
