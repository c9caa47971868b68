"""The warnings of a comparison: how the two runs were set up and measured — the workload's and the run
settings' keys that differ, runs not complete or not equally trustworthy, one at saturation, a software stack
that drifted, the power basis and the utilisation assumed. ``comparison_warnings`` lists them for
``compare`` and the reports.

What each run *is*, in the aspects that change the ratio — the model, the size of a unit of work (mean
lengths per request, tokens per step), the serving stack and its version, the hardware generation, the
precision, the scenario — is the pair's like-for-like ``differences`` (``cost/comparison/likeness.py``),
each with both sides; a warning does not repeat one (docs/cost.md, "Compare")."""

from __future__ import annotations

import re
from typing import Any

from gpuledger.bench.server_state import QUEUE_NOTE_MS
from gpuledger.cost.pricing.runcost import RunCost
from gpuledger.cost.pricing.runview import flat
from gpuledger.records import RunInfo
from gpuledger.records.workloads import observed_workload_key

# Environment/config keys are compared by their words (``torch.cuda_version`` -> torch, cuda, version).
_VENDOR_STACK_WORDS = frozenset(
    {"driver", "cuda", "rocm", "hip", "nvml", "amdsmi", "nccl", "rccl", "cudnn", "miopen", "amdgpu", "kfd"}
)
_SOFTWARE_WORDS = frozenset(
    {
        "torch",
        "vllm",
        "sglang",
        "llama",
        "llamacpp",
        "ollama",
        "tgi",
        "transformers",
        "engine",
        "tensorrt",
        "triton",
        "xformers",
        "flash",
        "python",
    }
)
_IGNORED_ENV_WORDS = frozenset(
    {
        "hash",
        "time",
        "timestamp",
        "date",
        "host",
        "hostname",
        "machine",
        "uuid",
        "serial",
        "pid",
        "collected",
        "created",
        "duration",
        "at",
    }
)
_IGNORED_CONFIG_WORDS = frozenset(
    {"url", "host", "port", "path", "file", "dir", "label", "db", "store", "secret", "password", "seed",
     "like", "metrics"}
)


def _words(key: str) -> set[str]:
    return {w for w in re.split(r"[^a-z0-9]+", key.lower()) if w}


def _strip_local(version: Any) -> Any:
    """``"2.5.1+cu121"`` -> ``"2.5.1"``: builds for different vendors differ by design."""
    return version.split("+", 1)[0] if isinstance(version, str) else version


def _vendor(cost: RunCost) -> str:
    vendors = {d.vendor for d in cost.run.telemetry_summary if d.is_gpu}
    return ",".join(sorted(vendors)) or cost.kind


def environment_differences(a: RunCost, b: RunCost) -> tuple[list[str], list[str]]:
    """(warnings, notes) about environment keys that differ."""
    env_a, env_b = flat(a.run.environment.to_dict()), flat(b.run.environment.to_dict())
    same_vendor = _vendor(a) == _vendor(b)
    warns: list[str] = []
    notes: list[str] = []
    for key in sorted(set(env_a) | set(env_b)):
        low = key.lower()
        words = _words(low)
        if words & _IGNORED_ENV_WORDS:
            continue
        va, vb = env_a.get(key), env_b.get(key)
        is_stack = bool(words & _VENDOR_STACK_WORDS)
        is_software = bool(words & _SOFTWARE_WORDS)
        if not (is_stack or is_software):
            continue
        if is_stack and not same_vendor:
            if va != vb:
                notes.append(f"environment {key}: {va!r} vs {vb!r} (different vendor stacks; expected)")
            continue
        if _strip_local(va) != _strip_local(vb):
            warns.append(f"environments differ: {key} = {va!r} (A) vs {vb!r} (B)")
    return warns, notes


def _queueing(run: RunInfo) -> str | None:
    """How the run's server queued requests (``server.state``, read from its /metrics): a phrase, "" when
    it did not, None when unknown."""
    state = (run.server or {}).get("state") or {}
    if not isinstance(state, dict):
        return None
    waiting = state.get("waiting")
    peak = waiting.get("max") if isinstance(waiting, dict) else None
    queue = state.get("queue_time_ms_mean")
    known = False
    if isinstance(peak, int | float):
        known = True
        if peak > 0:
            return f"up to {peak:g} waiting"
    if isinstance(queue, int | float):
        known = True
        if queue >= QUEUE_NOTE_MS:
            return f"{queue:.0f} ms mean queue time"
    return "" if known else None


def _saturation_warnings(ra: RunInfo, rb: RunInfo) -> list[str]:
    """Two runs at different operating points: one server queued requests, the other did not."""
    qa, qb = _queueing(ra), _queueing(rb)
    if qa is None or qb is None or bool(qa) == bool(qb):
        return []
    busy, idle, how = ("A", "B", qa) if qa else ("B", "A", qb)
    return [
        f"{busy}'s server kept requests waiting in its queue ({how}) while {idle}'s did not: "
        f"{busy} was measured at saturation, {idle} below it — its latency includes queueing and its "
        "throughput is its ceiling; compare at the same operating point (a --sweep shows both)"
    ]


def verdict_differences(ra: RunInfo, rb: RunInfo) -> list[str]:
    """The checks of the two runs' stored validity verdicts (``bench.validity``) that came out differently:
    one run passed what the other warned or failed, so their figures are not equally trustworthy. Runs
    stored before the verdict existed are not judged here (``show`` and ``report`` compute theirs from
    their requests), so what ``compare`` prints for them stays what it was."""
    va = ra.summary.verdict if ra.summary is not None else None
    vb = rb.summary.verdict if rb.summary is not None else None
    if va is None or vb is None:
        return []
    out = []
    for ca in va.checks:
        cb = vb.check(ca.name)
        if cb is not None and cb.status != ca.status:
            out.append(
                f"the runs' validity differs on {ca.name}: A {ca.status} ({ca.why}) vs B {cb.status} "
                f"({cb.why})"
            )
    return out


def comparison_warnings(a: RunCost, b: RunCost) -> list[str]:
    ra, rb = a.run, b.run
    out: list[str] = []
    # The model, the mean size of a unit of work and the serving stack (engine, version) are the pair's
    # like-for-like differences (likeness.py), with both sides: not warned about again here.
    wa, wb = flat(ra.workload or {}), flat(rb.workload or {})
    same_file = wa.get("sha256") is not None and wa.get("sha256") == wb.get("sha256")
    # A dataset file read from another place is the same workload when its bytes are the same.
    # Repeats of one spec differ in their group and index only: that is not another workload.
    # A published point's workload record is what was published of it (lengths, dataset, interactivity,
    # precision), not settings: the differences judge each of those, so it is not listed key by key.
    published = any(r.summary is not None and r.summary.origin() is not None for r in (ra, rb))
    # What a run observed while it made and sent its prompts (waits, tokenizer calls) is no setting either.
    diff = [] if published else sorted(
        k
        for k in set(wa) | set(wb)
        if wa.get(k) != wb.get(k) and not (same_file and k == "path") and not observed_workload_key(k)
    )
    if diff:
        out.append(
            "different workloads: "
            + ", ".join(f"{k} = {wa.get(k)!r} vs {wb.get(k)!r}" for k in diff[:6])
            + (f" (+{len(diff) - 6} more)" if len(diff) > 6 else "")
        )
    # Run settings are what was asked (and follows from it); what a run observed of its machine — free
    # memory, the device's name, the telemetry sources found — is not (records.spec: BenchSpec.settings).
    ca, cb = flat(ra.config.settings()), flat(rb.config.settings())
    cdiff = sorted(
        k
        for k in set(ca) | set(cb)
        if ca.get(k) != cb.get(k) and not (_words(k) & _IGNORED_CONFIG_WORDS) and "api_key" not in k.lower()
    )
    if cdiff:
        out.append(
            "different run settings: " + ", ".join(f"{k} = {ca.get(k)!r} vs {cb.get(k)!r}" for k in cdiff[:6])
        )
    for side, run in (("A", ra), ("B", rb)):
        for note in run.summary.fidelity_notes() if run.summary is not None else ():
            out.append(f"run {run.id} ({side}): {note}")
        if run.status != "complete":
            out.append(f"run {run.id} ({side}) is {run.status}, not complete")
    out.extend(_saturation_warnings(ra, rb))
    out.extend(verdict_differences(ra, rb))
    sa, sb = flat(ra.server or {}), flat(rb.server or {})
    for key in sorted(set(sa) & set(sb)):
        # The server's own version is the framework difference; a component's version is warned here.
        if key != "version" and "version" in key.lower() and sa[key] != sb[key] and ra.engine == rb.engine:
            out.append(f"different {ra.engine or 'engine'} versions: {sa[key]!r} (A) vs {sb[key]!r} (B)")
    env_warns, _ = environment_differences(a, b)
    out.extend(env_warns)
    if a.power.estimate != b.power.estimate:
        out.append(f"power basis differs: A {a.power.source}; B {b.power.source}")
    if a.inputs.utilisation != b.inputs.utilisation:
        out.append(
            f"the profiles assume different utilisation: {a.inputs.utilisation:.0%} (A) vs "
            f"{b.inputs.utilisation:.0%} (B)"
        )
    return out
