"""Number and text formatting shared by every renderer (so all of them print the same strings)."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime

MISSING = "—"
# A cell that holds a number (or "a / b"): right-aligned by the renderers.
NUMERIC = re.compile(r"^[-+]?[\d,]*\.?\d+(e[-+]?\d+)?( / [-+]?[\d,]*\.?\d+(e[-+]?\d+)?)?$")


def num(value: object, digits: int = 3) -> str:
    """A number for a table cell: ``digits`` significant figures, thousands separated, no
    exponent for everyday magnitudes; ``—`` for missing values (the table's note says why)."""
    if value is None or isinstance(value, bool):
        return MISSING
    if not isinstance(value, int | float):
        return str(value)
    x = float(value)
    if math.isnan(x) or math.isinf(x):
        return MISSING
    if isinstance(value, int) or (x.is_integer() and abs(x) < 1e15):
        return f"{int(x):,}"
    if abs(x) >= 10**digits:
        return f"{x:,.0f}"
    if x == 0:
        return "0"
    if abs(x) < 1e-4:
        return f"{x:.{digits - 1}e}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    return f"{x:,.{decimals}f}"  # thousands separated also when rounding reaches 1,000


def pct(ratio: object) -> str:
    """A 0..1 ratio as a percentage with one decimal."""
    if ratio is None or isinstance(ratio, bool) or not isinstance(ratio, int | float):
        return MISSING
    if math.isnan(ratio):
        return MISSING
    return f"{ratio * 100:.1f}"


def gib(n_bytes: object) -> str:
    if n_bytes is None or isinstance(n_bytes, bool) or not isinstance(n_bytes, int | float):
        return MISSING
    return num(n_bytes / 2**30)


def when(dt: datetime | None) -> str:
    if dt is None:
        return MISSING
    if dt.tzinfo is not None:
        return dt.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return dt.strftime("%Y-%m-%d %H:%M:%S")


def text(value: object) -> str:
    """Any stored value as one line of text (user-controlled: renderers escape it)."""
    if value is None:
        return MISSING
    if isinstance(value, float):
        return num(value)
    if isinstance(value, list | tuple):
        return ", ".join(text(v) for v in value) if value else MISSING
    return " ".join(str(value).split()) or MISSING
