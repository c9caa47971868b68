"""What changed in the stack between the two sides of a gate: the lock diff of their fingerprints
(``gpuledger.lock.diff_stacks``: driver, CUDA/ROCm/HIP, torch and its build, Python, the engines installed,
kernel, GPUs), the server that answered (its kind and version, read when the run started) and the model with
its revision where the server says it (TGI's ``sha``).

Each side is its first run; a group whose runs do not share one stack is said in ``notes``."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from gpuledger.gate.model import StackDiff, StackDrift
from gpuledger.lock import diff_stacks
from gpuledger.records import RunInfo


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value) or "none"
    if isinstance(value, bool | int | float):
        return json.dumps(value)
    return json.dumps(value, sort_keys=True, default=str)


def _fingerprint(run: RunInfo) -> tuple[dict[str, Any] | None, str | None]:
    """The run's stack (None, with why, when it has none)."""
    env = run.environment
    if env.error:
        return None, f"run {run.id} has no stack fingerprint: {env.error}"
    if env.empty:
        return None, f"run {run.id} has no stack fingerprint (stored without one)"
    return env.to_dict(), None


def _server(run: RunInfo) -> Mapping[str, Any]:
    server = run.server if isinstance(run.server, dict) else {}
    return server


def _revision(run: RunInfo) -> str | None:
    details = _server(run).get("details")
    value = details.get("sha") if isinstance(details, dict) else None
    return str(value) if value not in (None, "") else None


def server_drifts(a: RunInfo, b: RunInfo) -> list[StackDrift]:
    """The server and the model: what ``lock`` cannot see when the server runs elsewhere."""
    out: list[StackDrift] = []
    sa, sb = _server(a), _server(b)
    kind_a, kind_b = sa.get("kind"), sb.get("kind")
    if kind_a and kind_b and kind_a != kind_b:
        out.append(
            StackDrift(
                key="server.kind",
                baseline=_text(kind_a),
                candidate=_text(kind_b),
                matters=True,
                reason="another inference server answered",
            )
        )
    ver_a, ver_b = sa.get("version"), sb.get("version")
    if (ver_a or ver_b) and ver_a != ver_b:
        name = kind_b or kind_a or "server"
        reason = (
            f"{name} version changed"
            if ver_a and ver_b
            else f"{name} version {'appeared' if ver_b else 'disappeared'}"
        )
        out.append(
            StackDrift(
                key="server.version",
                baseline=_text(ver_a),
                candidate=_text(ver_b),
                matters=True,
                reason=reason,
            )
        )
    if a.model != b.model:
        out.append(
            StackDrift(
                key="model",
                baseline=a.model or None,
                candidate=b.model or None,
                matters=True,
                reason="another model",
            )
        )
    rev_a, rev_b = _revision(a), _revision(b)
    if (rev_a or rev_b) and rev_a != rev_b:
        out.append(
            StackDrift(
                key="model.revision",
                baseline=rev_a,
                candidate=rev_b,
                matters=True,
                reason="the model's revision changed (the server's sha)",
            )
        )
    return out


def _side_note(name: str, runs: Sequence[RunInfo]) -> str | None:
    hashes = {r.environment.hash for r in runs if r.environment.hash}
    if len(hashes) > 1:
        return (f"the runs of {name} do not share one stack ({len(hashes)} fingerprints): its first run is "
                "compared")
    return None


def stack_diff(
    baseline: Sequence[RunInfo], candidate: Sequence[RunInfo], names: tuple[str, str]
) -> StackDiff:
    """The stack of the baseline's first run against the candidate's (module docstring)."""
    a, b = baseline[0], candidate[0]
    notes = [n for n in (_side_note(names[0], baseline), _side_note(names[1], candidate)) if n]
    drifts = server_drifts(a, b)
    env_a, why_a = _fingerprint(a)
    env_b, why_b = _fingerprint(b)
    known = env_a is not None and env_b is not None
    if env_a is not None and env_b is not None:
        drifts = [
            StackDrift(
                key=d.key,
                baseline=_text(d.locked),
                candidate=_text(d.live),
                matters=d.matters,
                reason=d.reason,
            )
            for d in diff_stacks(env_a, env_b)
        ] + drifts
    notes.extend(w for w in (why_a, why_b) if w)
    return StackDiff(
        known=known,
        same=not drifts,
        drifts=drifts,
        baseline_hash=a.environment.hash,
        candidate_hash=b.environment.hash,
        notes=notes,
    )


__all__ = ["server_drifts", "stack_diff"]
