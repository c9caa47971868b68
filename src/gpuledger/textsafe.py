"""Text that came from outside (labels, model names, server bodies, profile files, imported runs), made
safe to display: control characters neutralised, huge values clipped.

Every renderer uses these two functions (the CLI's consoles, the Markdown and HTML reports), so a label
prints the same everywhere. JSON output never goes through them: it stays complete and exact (JSON
escapes control characters itself).

- ``neutralise``: C0 controls except newline and tab become their visible Control Pictures
  (ESC -> "␛", CR -> "␍", BEL -> "␇"), DEL becomes "␡", C1 controls (U+0080..U+009F) and the bidi
  embedding/override/isolate controls (U+202A..U+202E, U+2066..U+2069) become "�". One character for
  one character, so the width and the positions of styled spans do not change.
- ``clip``: a value longer than ``MAX_DISPLAY_CHARS`` keeps its first ``MAX_DISPLAY_CHARS`` characters
  and says how many more there are.
- ``csv_cell`` / ``csv_text``: values as CSV a spreadsheet will not run (every CSV gpuledger writes). A
  text that begins with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is a formula to Excel,
  LibreOffice and Google Sheets (``=cmd|' /C calc'!A0``, ``=HYPERLINK(...)``): per OWASP's CSV-injection
  guidance it is written with a ``'`` in front, which those programs show as text, and every text cell is
  written in double quotes (a quote inside doubled), so a carriage return or newline inside a text cannot
  begin a row of its own. Numbers stay numbers, unquoted (``-3.5`` is a number, not a formula; a float
  exactly as ``repr`` writes it).
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable

# The longest string gpuledger itself prints is ~330 characters (a formula caption); 500 leaves room
# for long paths and messages while bounding what a hostile 100 KB label or 10 MB profile name prints.
MAX_DISPLAY_CHARS = 500

_REPLACEMENT = "\ufffd"
_TABLE: dict[int, str] = {c: chr(0x2400 + c) for c in range(0x20) if c not in (0x09, 0x0A)}
_TABLE[0x7F] = "\u2421"
_TABLE.update({c: _REPLACEMENT for c in range(0x80, 0xA0)})
_TABLE.update({c: _REPLACEMENT for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))})
_UNSAFE = re.compile("[" + "".join(re.escape(chr(c)) for c in sorted(_TABLE)) + "]")


def neutralise(text: str) -> str:
    """``text`` with every control character that a terminal (or a bidi-aware viewer) would act on
    replaced by a visible stand-in; newline and tab are kept."""
    if _UNSAFE.search(text) is None:
        return text
    return text.translate(_TABLE)


def clip_suffix(more: int) -> str:
    """What replaces the clipped tail of a displayed value."""
    return f"… ({more:,} more characters; the full value is in --json)"


def clip(text: str, limit: int = MAX_DISPLAY_CHARS) -> str:
    """``text`` if it is at most ``limit`` characters long, else its head and how much was left out."""
    if len(text) <= limit:
        return text
    return text[:limit] + clip_suffix(len(text) - limit)


def display(text: str, limit: int = MAX_DISPLAY_CHARS) -> str:
    """Neutralised and clipped: a value from outside, ready for a terminal or a document."""
    return neutralise(clip(text, limit))


def one_line(text: str, limit: int = MAX_DISPLAY_CHARS) -> str:
    """``display`` on one line (newlines and tabs become spaces): for error and warning lines."""
    return display(text.replace("\n", " ").replace("\t", " "), limit)


# What a spreadsheet takes as the start of a formula (OWASP, "CSV Injection").
CSV_FORMULA_LEADS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: object) -> str | int | float:
    """``value`` as a CSV cell (module docstring): None → empty, a number as itself, a text that a
    spreadsheet would run as a formula prefixed with ``'``, any other text as it is."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int | float):
        return value
    text = str(value)
    return "'" + text if text.startswith(CSV_FORMULA_LEADS) else text


def csv_text(rows: Iterable[Iterable[object]]) -> str:
    """``rows`` (the header first) as CSV text, ``\n`` after each row: every cell through
    :func:`csv_cell`, every text cell in double quotes, numbers bare."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n", quoting=csv.QUOTE_NONNUMERIC)
    for row in rows:
        writer.writerow([csv_cell(v) for v in row])
    return buf.getvalue()
