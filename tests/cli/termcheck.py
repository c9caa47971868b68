"""Checks on what a command printed for a terminal of a given width (used by the tests in this folder).

- ``too_wide``: lines wider than the terminal.
- ``cut_numbers``: numbers that exist only because a line break cut one (``1,014,22`` + ``5``): the digit
  runs of the narrow output that the same output at a width where nothing wraps does not have.
- ``split_in_cells``: the test the issue names: inside one cell of a drawn table (between two row rules),
  a line ending in a digit directly above a line starting with a digit; and a wrapped paragraph line
  (the next line indented under it) ending in a digit above a continuation starting with one.
- ``missing_whole``: figures (as the command formats them) that do not appear whole on any one line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from rich.cells import cell_len

NUMBER = re.compile(r"\d+(?:[.,:]\d+)*(?:[eE][-+]?\d+)?")
FRAME = re.compile("[\u2500-\u257f]")  # box-drawing characters
_RULE = re.compile(r"^[\s\u2500-\u257f]+$")
_VERTICAL = "│┃"


_PART = re.compile(r"\(\d+/\d+\)\s*$")  # "(1/2)": the part of a table split in two, in its title


def numbers(text: str) -> set[str]:
    lines = [_PART.sub("", FRAME.sub(" ", line)) for line in text.splitlines()]
    return {m.group() for line in lines for m in NUMBER.finditer(line)}


def too_wide(text: str, width: int) -> list[str]:
    return [line for line in text.splitlines() if cell_len(line.rstrip()) > width]


def cut_numbers(narrow: str, wide: str) -> set[str]:
    return numbers(narrow) - numbers(wide)


def _cells(line: str) -> list[tuple[int, str]]:
    """(column start, text) of each cell of a drawn table's line."""
    out = []
    start = None
    for i, ch in enumerate(line):
        if ch in _VERTICAL:
            if start is not None:
                out.append((start, line[start:i].strip()))
            start = i + 1
    return out


def _blocks(lines: list[str]) -> list[list[str]]:
    """The drawn tables of the output: runs of lines with box-drawing characters."""
    blocks: list[list[str]] = []
    current: list[str] = []
    for line in lines:
        if FRAME.search(line):
            current.append(line)
        elif current:
            blocks.append(current)
            current = []
    if current:
        blocks.append(current)
    return blocks


def split_in_cells(text: str) -> list[str]:
    lines = text.splitlines()
    problems = []
    for block in _blocks(lines):
        # A table draws a rule between its rows when one of them takes several lines; without such rules
        # every line of its body is a row of its own, and only the header's lines belong together.
        ruled = any(line.lstrip().startswith("├") for line in block)
        for above, below in zip(block, block[1:], strict=False):
            if _RULE.match(above) or _RULE.match(below):
                continue
            if not ruled and not (above.lstrip().startswith("┃") and below.lstrip().startswith("┃")):
                continue
            upper = dict(_cells(above))
            for start, cell in _cells(below):
                top = upper.get(start, "")
                if top and cell and top[-1].isdigit() and cell[0].isdigit():
                    problems.append(f"{above!r} / {below!r}")
    for above, below in zip(lines, lines[1:], strict=False):
        if (
            not FRAME.search(above)
            and not FRAME.search(below)
            and below.startswith(" ")
            and len(below) - len(below.lstrip()) > len(above) - len(above.lstrip())
            and above.rstrip()[-1:].isdigit()
            and below.lstrip()[:1].isdigit()
        ):
            problems.append(f"{above!r} / {below!r}")
    return problems


def missing_whole(text: str, figures: Iterable[str]) -> list[str]:
    lines = [FRAME.sub(" ", line) for line in text.splitlines()]
    missing = []
    for fig in figures:
        pattern = re.compile(r"(?<![\d.,])" + re.escape(fig) + r"(?![\d,]|\.\d)")
        if not any(pattern.search(line) for line in lines):
            missing.append(fig)
    return missing
