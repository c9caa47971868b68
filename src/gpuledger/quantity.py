"""A number a user sees: value, unit, and where it came from (or why it is missing).

The one "number with unit and source" type: the GPU catalog's figures (``gpuledger.catalog.model.Figure``)
are Quantities that also carry their document's id, URL and date, a confidence and a range."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Quantity:
    """``value`` in ``unit``; ``source`` says who measured it, ``method`` how.

    ``value is None`` means "not available" and ``reason`` must then say why
    (e.g. ``"NVML NotSupported on this GPU"``): never a silent zero.
    """

    value: float | None
    unit: str
    source: str
    method: str = ""
    reason: str | None = None

    @classmethod
    def missing(cls, unit: str, source: str, reason: str) -> Quantity:
        return cls(None, unit, source, "", reason)

    @property
    def available(self) -> bool:
        return self.value is not None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def text(self, fmt: str = ".3g") -> str:
        """Human text: ``"312 W (nvml, counter)"`` or ``"n/a — NVML NotSupported on this GPU"``."""
        if self.value is None:
            return f"n/a — {self.reason or 'not measured'}"
        how = ", ".join(p for p in (self.source, self.method) if p)
        return f"{self.value:{fmt}} {self.unit}" + (f" ({how})" if how else "")
