"""Whether the two sides of a gate ran the same workload with the same settings (like for like).

Compared, each candidate run and each further baseline run against the baseline's first run: the kind of run
and its headline unit, the engine, the model that answered, the workload the run recorded
(``RunInfo.workload``: dataset, lengths, load, counts, seed, warm-up …; a dataset file read from another
place is the same when its SHA-256 is), and the spec's settings (``BenchSpec.settings``: what was asked, not
what the run observed of its machine). Not compared: where the server is (URL, host, port), the label,
files' paths, the store, secrets, which run a ``--like`` repeat copied, the repeat record of a group
(``repeat.*``), what the workload record observed while the prompts were made and sent
(``records.workloads.OBSERVED_WORKLOAD``: waits, tokenizer calls, the server's prompt counts) and the model
name the spec asked for (the model that answered is compared). A run that did not complete is a difference
too."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from gpuledger.cost.pricing.runview import flat
from gpuledger.gate.model import LikeForLike
from gpuledger.records import RunInfo
from gpuledger.records.workloads import observed_workload_key

_IGNORED_WORDS = frozenset(
    {
        "url",
        "host",
        "port",
        "path",
        "file",
        "dir",
        "label",
        "db",
        "store",
        "secret",
        "password",
        "like",
        "key",
    }
)
_IGNORED_KEYS = frozenset({"model", "api_key_env"})
MAX_SHOWN = 6


def _words(key: str) -> set[str]:
    return {w for w in re.split(r"[^a-z0-9]+", key.lower()) if w}



def _listed(what: str, keys: Sequence[str], a: dict[str, Any], b: dict[str, Any]) -> str:
    shown = ", ".join(f"{k} = {a.get(k)!r} vs {b.get(k)!r}" for k in keys[:MAX_SHOWN])
    more = f" (+{len(keys) - MAX_SHOWN} more)" if len(keys) > MAX_SHOWN else ""
    return f"{what}: {shown}{more}"


def run_differences(a: RunInfo, b: RunInfo) -> list[str]:
    """How run ``b`` differs from run ``a`` in workload and settings (module docstring), each in one line."""
    out: list[str] = []
    ka = a.summary.kind if a.summary is not None else None
    kb = b.summary.kind if b.summary is not None else None
    if ka != kb:
        out.append(f"different kinds of run: {ka} vs {kb}")
    elif a.summary is not None and b.summary is not None and a.summary.headline() != b.summary.headline():
        out.append(f"different headline units: {a.summary.headline()} vs {b.summary.headline()}")
    if a.engine != b.engine:
        out.append(f"different engines: {a.engine!r} vs {b.engine!r}")
    if a.model != b.model:
        out.append(f"different models: {a.model!r} vs {b.model!r}")
    wa, wb = flat(a.workload or {}), flat(b.workload or {})
    same_file = wa.get("sha256") is not None and wa.get("sha256") == wb.get("sha256")
    work = sorted(
        k
        for k in set(wa) | set(wb)
        if wa.get(k) != wb.get(k) and not observed_workload_key(k) and not (same_file and k == "path")
    )
    if work:
        out.append(_listed("different workloads", work, wa, wb))
    ca, cb = flat(a.config.settings()), flat(b.config.settings())
    settings = sorted(
        k
        for k in set(ca) | set(cb)
        if ca.get(k) != cb.get(k) and k not in _IGNORED_KEYS and not _words(k) & _IGNORED_WORDS
    )
    if settings:
        out.append(_listed("different run settings", settings, ca, cb))
    return out


def like_for_like(baseline: Sequence[RunInfo], candidate: Sequence[RunInfo], *, allowed: bool) -> LikeForLike:
    """Every difference between the baseline's first run and the other runs of both sides (once each), and
    every run that did not complete."""
    first = baseline[0]
    found: list[str] = []
    for side, runs in (("baseline", baseline[1:]), ("candidate", candidate)):
        for run in runs:
            for diff in run_differences(first, run):
                line = f"{diff} (run {first.id} vs {side} run {run.id})"
                if diff not in {f.split(" (run ", 1)[0] for f in found}:
                    found.append(line)
    for side, runs in (("baseline", baseline), ("candidate", candidate)):
        for run in runs:
            if run.status != "complete":
                found.append(f"{side} run {run.id} is {run.status}, not complete")
    return LikeForLike(same=not found, differences=found, allowed=allowed)


__all__ = ["like_for_like", "run_differences"]
