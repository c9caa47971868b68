"""The terminal layout (gpuledger.report.layout): whatever the cells hold, at any width from 40 columns a
table fits, no number is cut by a line break, and a table too wide for the terminal is turned or split
rather than crushed."""

from __future__ import annotations

import io
import re

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.cells import cell_len
from rich.console import Console

from gpuledger.report.layout import Grid, Notes, layout, paragraph, print_grid, wrap_spans

NUMBER = re.compile(r"\d+(?:[.,:]\d+)*(?:[eE][-+]?\d+)?")
FRAME = re.compile("[\u2500-\u257f]")

numbers = st.one_of(
    st.integers(0, 10**9).map(lambda n: f"{n:,}"),
    st.floats(1e-7, 1e7, allow_nan=False).map(lambda x: f"{x:.4g}"),
    st.floats(0, 1e4, allow_nan=False).map(lambda x: f"{x:.2f} ms"),
)
words = st.text("abcdefghij_-/:", min_size=1, max_size=30)
cells = st.one_of(numbers, words, st.lists(st.one_of(numbers, words), min_size=1, max_size=8).map(" ".join))


def _render(grid: Grid, width: int) -> str:
    out = io.StringIO()
    print_grid(Console(file=out, width=width, color_system=None), grid)
    return out.getvalue()


PART = re.compile(r"\(\d+/\d+\)\s*$")  # "(1/2)": the part of a split table, in its title


def _numbers(text: str) -> set[str]:
    lines = [PART.sub("", FRAME.sub(" ", line)) for line in text.splitlines()]
    return {m.group() for line in lines for m in NUMBER.finditer(line)}


@settings(max_examples=40, deadline=None)
@given(width=st.integers(40, 140), n_cols=st.integers(2, 12), n_rows=st.integers(1, 4), data=st.data())
def test_any_table_fits_and_keeps_every_number_whole(
    width: int, n_cols: int, n_rows: int, data: st.DataObject
) -> None:
    columns = tuple(data.draw(words, label=f"column {i}") for i in range(n_cols))
    rows = tuple(tuple(data.draw(cells) for _ in range(n_cols)) for _ in range(n_rows))
    grid = Grid("Title 2025 of the table", columns, rows, caption="measured over 12.5 s, 1,024 requests")
    narrow, wide = _render(grid, width), _render(grid, 10_000)
    assert all(cell_len(line.rstrip()) <= width for line in narrow.splitlines()), narrow
    assert _numbers(narrow) <= _numbers(wide), _numbers(narrow) - _numbers(wide)


def test_a_wide_table_of_runs_is_turned_metrics_as_rows() -> None:
    columns = ("run", *(f"metric {i} (unit)" for i in range(13)))
    rows = (
        ("h200-vllm", *(f"{1000 + i:,}.5" for i in range(13))),
        ("mi300x", *(f"{i}.25" for i in range(13))),
    )
    (part, widths), = layout(Grid("Runs", columns, rows), 80)
    assert widths is not None
    assert part.columns == ("run", "h200-vllm", "mi300x")
    assert part.rows[0] == ("metric 0 (unit)", "1,000.5", "0.25")


def test_a_table_that_cannot_be_turned_is_split_repeating_its_key_column() -> None:
    columns = ("run", *(f"m{i}" for i in range(12)))
    rows = tuple((f"run-{r}", *(f"{r * 1000 + i:,}.125" for i in range(12))) for r in range(12))
    parts = layout(Grid("Many runs", columns, rows), 80)
    assert len(parts) > 1
    assert all(p.columns[0] == "run" and w is not None for p, w in parts)
    assert [c for p, _ in parts for c in p.columns[1:]] == list(columns[1:])
    assert parts[0][0].title == f"Many runs (1/{len(parts)})"


def test_a_line_breaks_at_a_space_never_between_two_numbers_nor_inside_one() -> None:
    text = "started 2025-06-01 12:00:00 UTC, 1,014,225 tokens in 3.155e-05 s"
    for width in range(10, len(text)):
        lines = [text[a:b] for a, b in wrap_spans(text, width)]
        assert any("2025-06-01 12:00:00" in line for line in lines) or width < 19, lines
        for number in ("1,014,225", "3.155e-05"):
            assert any(number in line for line in lines), (width, lines)


def test_a_long_sentence_is_one_note_referred_to_wherever_it_is_quoted() -> None:
    rule = "estimate: 4 W = 50% of an assumed CPU TDP of 8 W (CodeCarbon's CPU fallback: 50 % of the TDP)"
    notes = Notes()
    notes.file(rule)
    assert notes.shorten(f"power is not measured: {rule}") == "power is not measured: [1]"
    assert notes.cell(rule) == "[1]" and notes.cell("short") == "short"
    out = io.StringIO()
    console = Console(file=out, width=60, color_system=None)
    notes.print(console)
    paragraph(console, "a sentence that is long enough to wrap at sixty columns, twice over, at least")
    text = out.getvalue()
    assert text.count("CodeCarbon") == 1 and text.startswith("[1] estimate: 4 W")
    assert all(len(line) <= 60 for line in text.splitlines())
