"""The unit a comparison is made in (``--basis``): one every run measured, by default the first run's headline
unit; aliases such as ``output`` / ``total`` name text-generation units (``records.units``). Used by
``compare`` and by the comparison of repeat groups."""

from __future__ import annotations

from collections.abc import Sequence

from gpuledger.cost.pricing.runcost import RunCost
from gpuledger.errors import UsageError
from gpuledger.records import alias_of, resolve_alias


def resolve_basis(costs: Sequence[RunCost], basis: str | None) -> tuple[str, str]:
    """(basis as named, unit compared): ``None`` -> the first run's headline; the unit must have been
    measured by every run (UsageError naming the units they share otherwise)."""
    name = basis or alias_of(costs[0].headline)
    unit, _ = resolve_alias(name)
    missing = [c.run.id for c in costs if not c.inputs.rate(unit)]
    if missing:
        shared = set(costs[0].inputs.rates)
        for c in costs[1:]:
            shared &= set(c.inputs.rates)
        raise UsageError(
            f"--basis {name}: run(s) {', '.join(missing)} did no work in {unit!r}; the runs share: "
            + (", ".join(sorted(shared)) or "no unit")
        )
    return name, unit


__all__ = ["resolve_basis"]
