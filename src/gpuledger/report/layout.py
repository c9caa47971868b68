"""Terminal layout: text and tables that fit the console width and never cut a number.

Rich wraps table cells wherever a column runs out of room, which at 80 columns splits ``1,014,225`` into
``1,014,22`` / ``5``. Here every cell, title and paragraph is wrapped before rich sees it:

- a line breaks at a space, except between two numbers ("2025-06-01 12:00" stays together), and a word
  too long for its column breaks only where no digit touches the break (``amortisation_mo`` / ``nths``,
  never ``2,345,40`` / ``9``);
- a column of numbers never wraps (its cells are no wider than they need to be; only its header folds);
- a table whose columns cannot all fit is turned (its columns become rows, one column per row of the
  original: metrics as rows, runs as columns), and a turned table that still does not fit is split into
  several tables that repeat the row's key columns;
- long provenance sentences go into :class:`Notes`, printed once under the output and referred to as
  ``[1]`` where they apply, instead of filling table cells.

Every string is given to rich as ``Text`` (never parsed as markup).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from gpuledger.report.fmt import MISSING, NUMERIC
from gpuledger.textsafe import MAX_DISPLAY_CHARS, clip_suffix

Cell = str | Text

# A run of digits with its decimal and thousands separators, a time's colons and an exponent.
_NUMBER = re.compile(r"\d+(?:[.,:]\d+)*(?:[eE][-+]?\d+)?")
# A number with one short unit after it ("0.986 USD", "549 W", "100%", "0.43x") still reads as a number.
_NUMBER_WITH_UNIT = re.compile(r"^[-+~]?[\d,]*\.?\d+(e[-+]?\d+)?\s?[%xA-Za-z/µ]{0,8}$")
_BLANKS = frozenset({"", MISSING, "n/a", "-"})
_BREAK_AFTER = frozenset("/_-,.;:)]|=+")
# Two numbers side by side ("2025-06-01 12:00:00") stay on one line up to this many cells.
GLUE = 24
# A word up to this long is not folded (a longer one folds, preferably after a separator: "amortisation_").
TEXT_FLOOR = 12
# A cell longer than this that explains where a number came from belongs in the notes, not the table.
NOTE_CELL_LIMIT = 60


# ------------------------------------------------------------------------------------- wrapping


def _number_mask(s: str) -> list[bool]:
    mask = [False] * len(s)
    for m in _NUMBER.finditer(s):
        for i in range(m.start(), m.end()):
            mask[i] = True
    return mask


def _words(s: str, start: int, end: int) -> list[tuple[int, int]]:
    return [(m.start() + start, m.end() + start) for m in re.finditer(r"\S+", s[start:end])]


def _units(s: str, start: int, end: int) -> list[tuple[int, int]]:
    """The units of ``s[start:end]`` a line keeps together when it can: words, with two words on both
    sides of a space between two digits joined (a date and its time; "81.3 / 95.0" breaks at the slash).
    Only two, and at most ``GLUE`` cells: a row of numbers still breaks between them when it must."""
    units: list[tuple[int, int]] = []
    joined = False
    for ws, we in _words(s, start, end):
        if (
            units
            and not joined
            and s[units[-1][1] - 1].isdigit()
            and s[ws].isdigit()
            and cell_len(s[units[-1][0] : we]) <= GLUE
        ):
            units[-1] = (units[-1][0], we)
            joined = True
        else:
            units.append((ws, we))
            joined = False
    return units


def _cuts(s: str, mask: list[bool], start: int, end: int) -> list[int]:
    """Where the unit ``s[start:end]`` may break: between two characters neither of which is part of a
    number (nor a space joining two numbers)."""
    return [
        i
        for i in range(start + 1, end)
        if not mask[i - 1] and not mask[i] and s[i - 1] != " " and s[i] != " "
    ]


def _longest_piece(s: str, mask: list[bool], start: int, end: int) -> int:
    points = [start, *_cuts(s, mask, start, end), end]
    return max(cell_len(s[a:b]) for a, b in zip(points, points[1:], strict=False))


def _break_unit(s: str, mask: list[bool], start: int, end: int, width: int) -> list[tuple[int, int]]:
    cuts = _cuts(s, mask, start, end)
    pieces = []
    pos = start
    while cell_len(s[pos:end]) > width:
        fitting = [c for c in cuts if c > pos and cell_len(s[pos:c]) <= width]
        if not fitting:  # a number wider than the column: only a column too narrow for it gets here
            c = pos + 1
            while c < end and cell_len(s[pos : c + 1]) <= width:
                c += 1
        else:
            after_sep = [c for c in fitting if s[c - 1] in _BREAK_AFTER and (c - pos) * 4 >= width]
            c = max(after_sep) if after_sep else max(fitting)
        pieces.append((pos, c))
        pos = c
    pieces.append((pos, end))
    return pieces


# The note a clipped value ends with ("… (1,500 more characters; the full value is in --json)") stays on
# one line where it fits: it is one message.
_CLIP_NOTE = re.compile(re.escape(clip_suffix(0).lstrip("… ")).replace("0", r"[\d,]+"))


def _kept_together(s: str, units: list[tuple[int, int]], width: int) -> list[tuple[int, int]]:
    for m in _CLIP_NOTE.finditer(s):
        if cell_len(m.group()) > width:
            continue
        inside = [u for u in units if u[0] < m.end() and u[1] > m.start()]
        if len(inside) > 1:
            merged = (inside[0][0], inside[-1][1])
            if cell_len(s[merged[0] : merged[1]]) <= width:
                units = [u for u in units if u not in inside]
                units.append(merged)
                units.sort()
    return units


def wrap_spans(s: str, width: int) -> list[tuple[int, int]]:
    """The lines of ``s`` wrapped at ``width`` cells, as ``(start, end)`` offsets into ``s`` (explicit
    newlines kept, the spaces a line breaks at left out)."""
    width = max(1, width)
    mask = _number_mask(s)
    lines: list[tuple[int, int]] = []
    pos = 0
    for segment in s.split("\n"):
        seg_start, seg_end = pos, pos + len(segment)
        pos = seg_end + 1
        current: tuple[int, int] | None = None
        units = _kept_together(s, _units(s, seg_start, seg_end), width)
        if not units:
            lines.append((seg_start, seg_start))
            continue
        # Two numbers kept together but too wide for the line break between them after all.
        units = [w for u in units for w in (_words(s, *u) if cell_len(s[u[0] : u[1]]) > width else [u])]
        for us, ue in units:
            if current is not None and cell_len(s[current[0] : ue]) <= width:
                current = (current[0], ue)
                continue
            if current is not None:
                lines.append(current)
                current = None
            if cell_len(s[us:ue]) <= width:
                current = (us, ue)
                continue
            pieces = _break_unit(s, mask, us, ue, width)
            lines.extend(pieces[:-1])
            current = pieces[-1]
        if current is not None:
            lines.append(current)
    return lines


def clipped(text: Cell) -> Text:
    """``text`` as ``Text``, cut at the display limit with the note saying how much is left out (a 100 KB
    label costs nothing to lay out; its whole value is in ``--json``)."""
    t = text if isinstance(text, Text) else Text(text)
    if len(t.plain) <= MAX_DISPLAY_CHARS:
        return t
    out = t[:MAX_DISPLAY_CHARS]
    out.append(clip_suffix(len(t.plain) - MAX_DISPLAY_CHARS), style="dim")
    return out


def _clip_cell(c: Cell) -> Cell:
    return clipped(c) if len(_plain(c)) > MAX_DISPLAY_CHARS else c


def wrap(text: Cell, width: int) -> Text:
    """``text`` wrapped at ``width`` as one ``Text`` of lines joined by newlines (styles kept)."""
    t = clipped(text)
    spans = wrap_spans(t.plain, width)
    return Text("\n").join(t[a:b] for a, b in spans)


def min_width(text: str, *, keep_pairs: bool = True) -> int:
    """The narrowest column ``text`` wraps into without cutting a number (``keep_pairs``: nor breaking
    between two numbers side by side)."""
    mask = _number_mask(text)
    widths = [0]
    pos = 0
    units = _units if keep_pairs else _words
    for segment in text.split("\n"):
        start, end = pos, pos + len(segment)
        pos = end + 1
        widths.extend(_longest_piece(text, mask, us, ue) for us, ue in units(text, start, end))
    return max(widths)


def longest_word(text: str) -> int:
    return max((cell_len(w) for w in text.split()), default=0)


def natural_width(text: str) -> int:
    return max((cell_len(line) for line in text.split("\n")), default=0)


def paragraph(
    console: Console,
    text: Cell,
    *,
    lead: Cell = "",
    indent: int | None = None,
    style: str = "",
) -> None:
    """Print ``lead`` + ``text`` wrapped at the console width; continuation lines are indented under the
    text (``indent`` cells, default: the width of ``lead``)."""
    lead_t = lead if isinstance(lead, Text) else Text(lead, style="dim")
    body = clipped(text if isinstance(text, Text) else Text(text, style=style))
    hang = cell_len(lead_t.plain) if indent is None else indent
    width = max(20, console.width)
    first = wrap_spans(body.plain, max(10, width - cell_len(lead_t.plain)))
    if not first:
        console.print(lead_t, soft_wrap=True)
        return
    a, b = first[0]
    console.print(lead_t + body[a:b], soft_wrap=True)
    rest = body[first[1][0] :] if len(first) > 1 else None
    if rest is not None:
        for a, b in wrap_spans(rest.plain, max(10, width - hang)):
            console.print(Text(" " * hang) + rest[a:b], soft_wrap=True)


# ------------------------------------------------------------------------------------- notes


@dataclass
class Notes:
    """Sentences printed once, under the output, each referred to as ``[n]`` where it applies.

    ``file`` makes a long sentence known (a provenance rule several lines will quote); ``shorten``
    replaces every known sentence inside a longer text by its marker (a warning that quotes the power rule
    reads "power is not measured: [1]"); ``cell`` keeps a short text as it is and refers to a long one;
    ``ref`` answers the marker of a sentence. A sentence gets its number when it is first referred to, and
    only sentences referred to are printed."""

    items: list[str] = field(default_factory=list)
    known: list[str] = field(default_factory=list)

    def ref(self, text: str) -> str:
        if text not in self.items:
            self.items.append(text)
        return f"[{self.items.index(text) + 1}]"

    def file(self, *texts: str | None, longer_than: int = NOTE_CELL_LIMIT) -> None:
        for t in texts:
            if t and len(t) > longer_than and t not in self.known:
                self.known.append(t)

    def shorten(self, text: str) -> str:
        for item in sorted({*self.known, *self.items}, key=len, reverse=True):
            if item != text and item in text:
                text = text.replace(item, self.ref(item))
        return text

    def cell(self, text: str, limit: int = NOTE_CELL_LIMIT) -> str:
        text = self.shorten(text)
        return text if len(text) <= limit else self.ref(text)

    def print(self, console: Console) -> None:
        for i, item in enumerate(self.items):
            paragraph(console, item, lead=Text(f"[{i + 1}] ", style="dim"))


# ------------------------------------------------------------------------------------- tables


def is_number_cell(text: str) -> bool:
    t = text.strip()
    return bool(NUMERIC.match(t) or _NUMBER_WITH_UNIT.match(t))


@dataclass(frozen=True, slots=True)
class Grid:
    """A table to lay out: ``keys`` leading columns name a row (they head the columns of the turned
    table and are repeated in each part of a split one)."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Cell, ...], ...]
    caption: str = ""
    keys: int = 1
    align_numbers: bool = True
    compact: bool = False  # a listing: no borders, two spaces between columns
    header: bool = True

    def numeric(self) -> list[bool]:
        out = []
        for i in range(len(self.columns)):
            cells = [_plain(r[i]).strip() for r in self.rows]
            values = [c for c in cells if c not in _BLANKS]
            out.append(self.align_numbers and bool(values) and all(is_number_cell(c) for c in values))
        return out

    def overhead(self) -> int:
        n = len(self.columns)
        return 2 * (n - 1) if self.compact else 3 * n + 1

    def turned(self) -> Grid:
        k = max(1, min(self.keys, len(self.columns) - 1))
        heads = tuple(" · ".join(_plain(c) for c in row[:k]) for row in self.rows)
        label = " · ".join(self.columns[:k])
        rows = tuple(
            (self.columns[j], *(row[j] for row in self.rows)) for j in range(k, len(self.columns))
        )
        return replace(self, columns=(label, *heads), rows=rows, keys=1)

    def part(self, columns: Sequence[int], title: str) -> Grid:
        return replace(
            self,
            title=title,
            columns=tuple(self.columns[i] for i in columns),
            rows=tuple(tuple(row[i] for i in columns) for row in self.rows),
            caption="",
        )


def _plain(c: Cell) -> str:
    return c.plain if isinstance(c, Text) else c


def _column_widths(g: Grid, hard: bool = False) -> tuple[list[int], list[int]]:
    """Each column's natural width and its minimum: readable (words up to ``TEXT_FLOOR`` whole, a date with
    its time) or, ``hard``, the least that keeps every number whole."""
    numeric = g.numeric()
    natural, minimum = [], []
    for i, header in enumerate(g.columns):
        cells = [_plain(r[i]) for r in g.rows]
        nat_cells = max((natural_width(c) for c in cells), default=0)
        if not g.header:
            header = ""
        nat = max(nat_cells, natural_width(header), 1)
        head_min = max(min_width(header), 0 if hard else min(TEXT_FLOOR, longest_word(header)))
        if numeric[i]:
            low = max(nat_cells, head_min)
        elif hard:
            low = max(max((min_width(c, keep_pairs=False) for c in cells), default=0), head_min)
        else:
            words = max((longest_word(c) for c in cells), default=0)
            low = max(max((min_width(c) for c in cells), default=0), min(TEXT_FLOOR, words), head_min)
        natural.append(nat)
        minimum.append(min(low, nat))
    return natural, minimum


def fit(g: Grid, width: int, hard: bool = False) -> list[int] | None:
    """Column widths (content, without padding and borders) that fit ``width``, or None (``hard``: down
    to the least that keeps every number whole)."""
    natural, minimum = _column_widths(g, hard)
    room = width - g.overhead()
    if sum(natural) <= room:
        return natural
    if sum(minimum) > room:
        return None
    widths = list(minimum)
    spare = room - sum(widths)
    want = [n - m for n, m in zip(natural, minimum, strict=True)]
    total = sum(want)
    if total:
        for i, w in enumerate(want):
            widths[i] += spare * w // total
        left = room - sum(widths)
        for i in sorted(range(len(want)), key=lambda j: natural[j] - widths[j], reverse=True):
            if left <= 0:
                break
            if widths[i] < natural[i]:
                widths[i] += 1
                left -= 1
    return widths


def _split(g: Grid, width: int, hard: bool = False) -> list[Grid] | None:
    """``g`` cut into consecutive groups of columns, each with the key columns, that each fit."""
    k = max(1, min(g.keys, len(g.columns) - 1))
    keys = list(range(k))
    groups: list[list[int]] = []
    current: list[int] = []
    for j in range(k, len(g.columns)):
        trial = [*keys, *current, j]
        if fit(g.part(trial, ""), width, hard) is not None:
            current.append(j)
            continue
        if not current:
            return None
        groups.append(current)
        current = [j]
        if fit(g.part([*keys, j], ""), width, hard) is None:
            return None
    if current:
        groups.append(current)
    # The same number of parts, with the columns shared out evenly when that fits too.
    rest = list(range(k, len(g.columns)))
    n = len(groups)
    size = -(-len(rest) // n)
    even = [rest[i : i + size] for i in range(0, len(rest), size)]
    if len(even) == n and all(fit(g.part([*keys, *grp], ""), width, hard) is not None for grp in even):
        groups = even
    return [
        g.part([*keys, *grp], f"{g.title} ({i + 1}/{n})" if g.title else "") for i, grp in enumerate(groups)
    ]


def layout(g: Grid, width: int) -> list[tuple[Grid, list[int] | None]]:
    """The table(s) to print for ``g`` at ``width``: as it is, turned, or split — readably if it can,
    else at the least width that keeps every number whole (None: not even that fits; printed as it is)."""
    turnable = len(g.rows) >= 1 and len(g.columns) > 2
    for hard in (False, True):
        widths = fit(g, width, hard)
        if widths is not None:
            return [(g, widths)]
        if turnable:
            t = g.turned()
            widths = fit(t, width, hard)
            if widths is not None:
                return [(t, widths)]
        for grid in (g, g.turned()) if turnable else (g,):
            parts = _split(grid, width, hard)
            if parts is not None:
                return [(p, fit(p, width, hard)) for p in parts]
    return [(g, None)]


def _rich(g: Grid, widths: list[int] | None) -> RichTable:
    numeric = g.numeric()
    wrapped_rows = [
        [wrap(cell, widths[i]) if widths is not None else Text(_plain(cell)) for i, cell in enumerate(row)]
        for row in g.rows
    ]
    multi = any(len(c.plain.split("\n")) > 1 for row in wrapped_rows for c in row)
    kwargs: dict[str, object] = (
        {"box": box.SIMPLE_HEAD, "show_edge": False, "pad_edge": False, "collapse_padding": True}
        if g.compact
        else {"box": box.HEAVY_HEAD}
    )
    # Rows of several lines: a rule (or a blank line) between them; a key-value list needs none.
    kwargs["show_lines"] = multi and len(g.rows) > 1 and g.header
    table = RichTable(show_header=g.header, **kwargs)  # type: ignore[arg-type]
    for i, header in enumerate(g.columns):
        w = widths[i] if widths is not None else None
        table.add_column(
            wrap(header, w) if w is not None else Text(header),
            justify="right" if numeric[i] else "left",
            width=w,
            no_wrap=w is not None,
            overflow="fold",
        )
    for row in wrapped_rows:
        table.add_row(*row)
    return table


def print_grid(console: Console, g: Grid) -> None:
    """Print ``g`` (its title above, its caption under it) at the console's width."""
    g = replace(
        g,
        columns=tuple(_plain(_clip_cell(c)) for c in g.columns),
        rows=tuple(tuple(_clip_cell(c) for c in row) for row in g.rows),
    )
    for part, widths in layout(g, console.width):
        if part.title:
            paragraph(console, Text(part.title, style="bold"))
        if part.rows:
            console.print(_rich(part, widths))
    if g.caption:
        paragraph(console, Text(g.caption, style="dim"))


def print_table(
    console: Console,
    title: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[Cell]],
    *,
    caption: str = "",
    keys: int = 1,
    align_numbers: bool = True,
    compact: bool = False,
    header: bool = True,
) -> None:
    """Print a table of cells (``str`` or styled ``Text``) fitted to the console width."""
    print_grid(
        console,
        Grid(title, tuple(columns), tuple(map(tuple, rows)), caption, keys, align_numbers, compact, header),
    )
