"""A number a user sees: value, unit, and where it came from (or why it is missing).

The one "number with unit and source" type: the GPU catalog's figures (``gpuledger.catalog.model.Figure``)
are Quantities that also carry their document's id, URL and date, a confidence and a range."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from decimal import ROUND_HALF_UP, Decimal
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


# The most decimals a percentage is printed with: 0.01 % resolves one failure in 10,000.
PERCENT_MAX_DECIMALS = 2


def percent(share: float, *thresholds: float | None, signed: bool = False) -> str:
    """``share`` (a ratio: 0.05 is 5 %) as a percentage with the decimals it needs, up to
    ``PERCENT_MAX_DECIMALS``: whole percent unless the rounding would move the figure by more than a tenth
    of its distance to zero or to one of ``thresholds`` (ratios too: the rule's ``warn_at`` / ``fail_at``).
    So a share never reads as on the other side of its rule than it is, its distance to the rule reads
    right to a tenth, and a nonzero share never reads as 0: 1 of 200 is ``"0.5 %"`` beside "warn at > 0 %",
    19 of 400 ``"4.75 %"`` beside "fail at ≥ 5 %" (not "5 %", nor "4.8 %"), 97 of 100 ``"97 %"``. Zero is
    ``"0 %"`` (never ``"-0 %"``); a share still too close to a threshold at the finest decimals says which
    side of it it is on (``"< 5 %"``), a nonzero one too small for them ``"< 0.01 %"``. ``signed``: a
    positive share gets a ``+``. This is the one rule every share shown beside a validity rule, a cost share
    or a spread follows."""
    if not math.isfinite(share):
        return "n/a"
    x = Decimal(repr(float(share))) * 100
    if x == 0:
        return "0 %"
    limits = [Decimal(0)] + [
        Decimal(repr(float(t))) * 100 for t in thresholds if t is not None and math.isfinite(t)
    ]
    shown = x
    for decimals in range(PERCENT_MAX_DECIMALS + 1):
        shown = x.quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP)
        if all(10 * abs(shown - x) <= abs(x - t) for t in limits):
            return _percent_text(shown, signed)
    crossed = [t for t in limits if (shown > t) != (x > t) or (shown < t) != (x < t)]
    if not crossed:
        return _percent_text(shown, signed)
    t = min(crossed, key=lambda t: abs(x - t))
    if t == 0:
        finest = Decimal(1).scaleb(-PERCENT_MAX_DECIMALS)
        return f"< {finest:f} %" if x > 0 else f"> -{finest:f} %"
    return f"{'<' if x < t else '>'} {_percent_text(t.normalize(), signed=False)}"


def _percent_text(value: Decimal, signed: bool) -> str:
    if value == 0:
        return "0 %"
    text = f"{value:f}"
    if "." in text and value == value.to_integral_value():
        text = text.split(".", 1)[0]
    return f"{'+' if signed and value > 0 else ''}{text} %"
