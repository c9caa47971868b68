"""``--since WHEN``: a date or time, or an age, turned into the moment it names — within a range.

``WHEN`` is an ISO date or time (``2025-01-31``, ``2025-01-31T14:00``; local time unless it names a zone)
or an age (``30m``, ``12h``, ``7d``, ``2w``: that long before now). A text that is neither is
``InvalidInputError`` (exit 4, as ever); one that names a moment outside what a store holds is a usage
error (exit 2, one line naming the bound): a date before ``EARLIEST`` (1970-01-01) or after ``LATEST``
(9998-12-31), an age of more than ``MAX_AGE`` (100 years). ``--since 99999999999d`` and ``--since
0001-01-01`` overflowed Python's datetime (exit 70).
"""

from __future__ import annotations

import math
import re
from datetime import date, datetime, timedelta

from gpuledger.errors import InvalidInputError, UsageError

EARLIEST = date(1970, 1, 1)
LATEST = date(9998, 12, 31)
MAX_AGE = timedelta(days=36_525)  # 100 years
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([wdhm])\s*$")
_UNIT_S = {"w": 604_800, "d": 86_400, "h": 3_600, "m": 60}
_UNIT_NAMES = {"w": "weeks", "d": "days", "h": "hours", "m": "minutes"}


def parse_since(text: str | None, now: datetime | None = None) -> datetime | None:
    """The moment ``--since`` names (module docstring), aware; None without one."""
    if text is None:
        return None
    shown = text[:64] + ("…" if len(text) > 64 else "")
    age = _AGE.match(text)
    if age:
        amount, unit = float(age.group(1)), age.group(2)
        seconds = amount * _UNIT_S[unit]
        if not math.isfinite(seconds) or seconds > MAX_AGE.total_seconds():
            most = MAX_AGE.total_seconds() / _UNIT_S[unit]
            raise UsageError(f"--since {shown}: an age is at most 100 years ({most:,.0f}{unit}), "
                             f"got {amount:,g} {_UNIT_NAMES[unit]}")
        base = now or datetime.now().astimezone()
        return base - timedelta(seconds=seconds)
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidInputError(
            f"--since {shown!r}: expected a date or time (2025-01-31, 2025-01-31T14:00, with an optional "
            "zone) or an age (30m, 12h, 7d, 2w)"
        ) from None
    if not EARLIEST <= when.date() <= LATEST:
        raise UsageError(f"--since {shown}: a date from {EARLIEST.isoformat()} to {LATEST.isoformat()}, "
                         f"got {when.date().isoformat()}")
    return when if when.tzinfo is not None else when.astimezone()


__all__ = ["EARLIEST", "LATEST", "MAX_AGE", "parse_since"]
