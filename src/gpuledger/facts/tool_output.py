"""Reading what a tool printed as hostile input: every failure is one exception type with a short
reason, and nothing a parser does grows faster than the output.

The runner already caps each stream (:data:`gpuledger.facts.runner.MAX_OUTPUT_BYTES`). Here:

- :func:`bounded_text`: lines longer than :data:`MAX_LINE_CHARS` are blanked before any regular
  expression sees them (no real tool prints such a line; a 4 MiB line would make a backtracking
  pattern quadratic);
- :func:`load_json` / :func:`csv_rows`: every error of the ``json`` and ``csv`` modules (syntax, a
  field over the csv field limit, nesting deep enough to exhaust the recursion limit, a number with
  more digits than Python converts) becomes :class:`ToolOutputError`;
- :func:`too_many`: more than :data:`MAX_DEVICES` GPUs (rows, records) is garbage, not a machine;
- :func:`bounded`, :func:`small_int`, :func:`finite_float`, :func:`excerpt`: values and reasons of a
  bounded size; ``isdigit()`` is not used (``"²".isdigit()`` is true and ``int("²")`` raises).
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from typing import Any

MAX_LINE_CHARS = 4096
MAX_VALUE_CHARS = 256
MAX_DEVICES = 1024  # more GPUs (or rows, or records) than any machine has: the output is garbage
_ASCII_INT = re.compile(r"[0-9]{1,18}")


class ToolOutputError(ValueError):
    """A tool printed something that is not what it should print (garbled, truncated, hostile)."""


def excerpt(text: str, limit: int = 80) -> str:
    """``text`` quoted and cut to ``limit`` characters, saying how long it was: for reasons."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}… ({len(text)} characters)"


def bounded_text(text: str) -> str:
    """``text`` with every line longer than :data:`MAX_LINE_CHARS` blanked (line numbers kept)."""
    if len(text) <= MAX_LINE_CHARS:
        return text
    return "\n".join("" if len(line) > MAX_LINE_CHARS else line for line in text.splitlines())


def bounded(value: str | None, limit: int = MAX_VALUE_CHARS) -> str | None:
    """A value cut to ``limit`` characters (a GPU name, a version) with ``…`` when cut."""
    if value is None or len(value) <= limit:
        return value
    return value[: limit - 1] + "…"


def small_int(value: object, *, base: int = 10, max_digits: int = 18) -> int | None:
    """An ASCII integer of at most ``max_digits`` digits (hex with ``base=16``, ``0x`` allowed), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if abs(value) < 16**max_digits else None
    if not isinstance(value, str):
        return None
    text = value.strip()
    if base == 16:
        text = text[2:] if text[:2].lower() == "0x" else text
        ok = re.fullmatch(rf"[0-9a-fA-F]{{1,{max_digits}}}", text) is not None
    else:
        ok = _ASCII_INT.fullmatch(text) is not None and len(text) <= max_digits
    return int(text, base) if ok else None


def finite_float(value: object) -> float | None:
    """A JSON number or numeric text as a finite float, else None (inf, nan, 10**400, "12 W" are None)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        try:
            number = float(value)
        except OverflowError:
            return None
    elif isinstance(value, str) and len(value) <= 64:
        try:
            number = float(value)
        except ValueError:
            return None
    else:
        return None
    return number if math.isfinite(number) else None


def load_json(text: str, what: str) -> Any:
    """``json.loads`` whose every failure is a :class:`ToolOutputError` naming ``what``."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ToolOutputError(f"{what} JSON does not parse: nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, and "Exceeds the limit (4300 digits)"
        raise ToolOutputError(f"{what} JSON does not parse: {str(exc)[:160]}") from None


def csv_rows(text: str, what: str) -> list[list[str]]:
    """The rows of CSV text that are not blank; a :class:`ToolOutputError` naming ``what`` when the csv
    module refuses it (a field over its field limit, a carriage return in an unquoted field)."""
    try:
        rows: list[list[str]] = []
        for row in csv.reader(io.StringIO(text), skipinitialspace=True):
            if any(cell.strip() for cell in row):
                rows.append(row)
                if len(rows) > MAX_DEVICES + 1:  # a header and MAX_DEVICES GPUs
                    break
    except csv.Error as exc:
        raise ToolOutputError(f"{what}: output is not CSV ({exc})") from None
    too_many(len(rows), what, "rows", MAX_DEVICES + 1)
    return rows


def too_many(count: int, what: str, things: str = "GPUs", limit: int = MAX_DEVICES) -> None:
    """A :class:`ToolOutputError` when a tool lists more ``things`` than any machine has."""
    if count > limit:
        raise ToolOutputError(f"{what}: lists more than {limit} {things}; not a real listing")
