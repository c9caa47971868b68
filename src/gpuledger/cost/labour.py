"""Setup labour: the profile's ``setup_hours``, or the doctor's setup-labour ledger (``from_doctor_history``).

The ledger is ``gpuledger.doctor.setup_labour_hours(records)`` over ``store.list_doctor_runs()``: per machine,
the wall-clock time from the first doctor run with an error to the first all-clear run after it. It is
imported lazily; if this installation has no such function, a profile asking for it is an input error
(set ``setup_hours`` instead) rather than a silent zero.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import Any

from gpuledger.cost.profile import CostProfile
from gpuledger.cost.runview import machine_name
from gpuledger.errors import InvalidInputError
from gpuledger.records import DoctorRunRecord, RunInfo


def _as_mapping(entry: Any) -> dict[str, Any]:
    if isinstance(entry, bool):
        return {}
    if isinstance(entry, int | float):
        return {"hours": float(entry)}
    to_dict = getattr(entry, "to_dict", None)
    if callable(to_dict):
        entry = to_dict()
    if isinstance(entry, Mapping):
        return dict(entry)
    return {
        k: getattr(entry, k)
        for k in ("machine", "hours", "setup_hours", "reason", "status")
        if hasattr(entry, k)
    }


def _per_machine(result: Any) -> dict[str, dict[str, Any]]:
    """Normalise the ledger's answer to ``{machine: {"hours": ..., "reason": ...}}``."""
    if isinstance(result, Mapping):
        if "hours" in result or "setup_hours" in result:
            data = _as_mapping(result)
            return {str(data.get("machine", "")): data}
        return {str(k): _as_mapping(v) | {"machine": str(k)} for k, v in result.items()}
    if isinstance(result, int | float) and not isinstance(result, bool):
        return {"": {"hours": float(result)}}
    out: dict[str, dict[str, Any]] = {}
    if isinstance(result, Sequence | list):
        for item in result:
            data = _as_mapping(item)
            out[str(data.get("machine", ""))] = data
    return out


def ledger_function() -> Any:
    try:
        module = importlib.import_module("gpuledger.doctor")
    except ImportError as exc:
        raise InvalidInputError(
            f"from_doctor_history: the doctor's setup-labour ledger cannot be loaded ({exc})",
            hint="set setup_hours in the cost profile instead",
        ) from exc
    func = getattr(module, "setup_labour_hours", None)
    if not callable(func):
        raise InvalidInputError(
            "from_doctor_history: this gpuledger has no setup-labour ledger "
            "(gpuledger.doctor.setup_labour_hours is missing)",
            hint="set setup_hours in the cost profile instead",
        )
    return func


def resolve_setup_hours(
    profile: CostProfile, doctor_records: Sequence[DoctorRunRecord] | None, run: RunInfo
) -> tuple[float, str]:
    """(setup hours, where they came from)."""
    if not profile.from_doctor_history:
        if profile.setup_hours == 0 and "setup_hours" not in profile.sources:
            return 0.0, "profile: no setup_hours given (setup labour not priced)"
        return profile.setup_hours, profile.source_of("setup_hours")
    if doctor_records is None:
        raise InvalidInputError("from_doctor_history: the doctor history was not provided to the cost model")
    if not doctor_records:
        raise InvalidInputError(
            "from_doctor_history: no doctor runs are stored",
            hint="run `gpuledger doctor` while setting up, or set setup_hours",
        )
    per_machine = _per_machine(ledger_function()(list(doctor_records)))
    machine = machine_name(run)
    if machine is not None and machine in per_machine:
        chosen = machine
    elif len(per_machine) == 1:
        chosen = next(iter(per_machine))
    else:
        known = ", ".join(sorted(m for m in per_machine if m)) or "none"
        raise InvalidInputError(
            f"from_doctor_history: cannot tell which machine run {run.id} was measured on "
            f"(run machine: {machine or 'not recorded'}; ledger machines: {known})",
            hint="set setup_hours in the cost profile",
        )
    data = per_machine[chosen]
    hours = data.get("hours", data.get("setup_hours"))
    if not isinstance(hours, int | float) or isinstance(hours, bool):
        reason = data.get("reason") or data.get("status") or "no setup interval measured"
        raise InvalidInputError(
            f"from_doctor_history: machine {chosen or '(unnamed)'}: {reason}",
            hint="set setup_hours in the cost profile",
        )
    source = (
        f"doctor history: machine {chosen or '(unnamed)'}, first error to first all-clear "
        "(gpuledger.doctor.setup_labour_hours)"
    )
    open_hours = data.get("open_hours")
    if data.get("resolved") is False and isinstance(open_hours, int | float):
        source += f"; a setup episode is still open ({open_hours:.1f} h so far, not counted)"
    return float(hours), source
