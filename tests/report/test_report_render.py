"""The three renderings of one report: HTML (self-contained, escaped), its Markdown twin, the terminal."""

from __future__ import annotations

import io
import re
from html.parser import HTMLParser

import orjson
import pytest
from report_factory import XSS_LABEL, Pair, make_run, synth_requests
from rich.console import Console

from gpuledger.report import ReportData, build_report, render_html, render_markdown, render_terminal
from gpuledger.report.markdown import md_escape
from gpuledger.store import Store


class _Tables(HTMLParser):
    """Tables of an HTML page as {caption: [[cell, ...], ...]} (header row first), entities decoded."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: dict[str, list[list[str]]] = {}
        self._caption: str | None = None
        self._rows: list[list[str]] | None = None
        self._cell: list[str] | None = None
        self._in_caption = False
        self.scripts: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self._rows, self._caption = [], ""
        elif tag == "caption":
            self._in_caption = True
        elif tag == "tr" and self._rows is not None:
            self._rows.append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "script":
            self.scripts.append(dict(attrs))

    def handle_endtag(self, tag: str) -> None:
        if tag == "table" and self._rows is not None:
            self.tables[self._caption or ""] = self._rows
            self._rows = None
        elif tag == "caption":
            self._in_caption = False
        elif tag in ("td", "th") and self._cell is not None and self._rows is not None:
            self._rows[-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._in_caption:
            self._caption = (self._caption or "") + data
        elif self._cell is not None:
            self._cell.append(data)


def _md_unescape(text: str) -> str:
    text = re.sub(r"\\(.)", r"\1", text)
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _md_tables(md: str) -> dict[str, list[list[str]]]:
    tables: dict[str, list[list[str]]] = {}
    lines = md.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("| ") and (i == 0 or not lines[i - 1].startswith("|")):
            title = _md_unescape(lines[i - 2].strip("*"))
            rows = []
            for row_line in lines[i:]:
                if not row_line.startswith("|"):
                    break
                if row_line.startswith("|---"):
                    continue
                cells = re.split(r"(?<!\\)\|", row_line)[1:-1]
                rows.append([_md_unescape(c.strip()) for c in cells])
            tables[title] = rows
    return tables


@pytest.fixture()
def comparison(store: Store, pair: Pair) -> ReportData:
    return build_report(store, [pair.h200, pair.mi300x])


def test_markdown_twin_has_exactly_the_tables_and_numbers_of_the_html(comparison: ReportData) -> None:
    html_tables = _Tables()
    html_tables.feed(render_html(comparison))
    md_tables = _md_tables(render_markdown(comparison))
    assert len(html_tables.tables) >= 10
    assert md_tables == html_tables.tables


def test_markdown_lists_every_not_measured_line_and_names_the_plots(comparison: ReportData) -> None:
    md = render_markdown(comparison)
    for section in comparison.sections:
        assert f"## {section.title}" in md
        for line in section.not_measured:
            assert f"> - {md_escape(line)}" in md
        for fig in section.figures:
            assert md_escape(fig.title) in md
    assert "**TTFT**: first content token received − request sent." in md


def test_html_is_one_self_contained_file_without_network_references(comparison: ReportData) -> None:
    html = render_html(comparison)
    parser = _Tables()
    parser.feed(html)
    # plotly.js inlined once, then the figure data (JSON, not executed) and the drawing script
    assert len(parser.scripts) == 3
    assert all("src" not in attrs for attrs in parser.scripts)
    assert html.count("plotly.js v") == 1 or html.count("* plotly.js") == 1
    markup = re.sub(r"<script>.*?</script>", "", html, flags=re.S)  # the page without the plotly.js library
    assert "<link" not in markup and "<img" not in markup and "<iframe" not in markup
    assert not re.search(r"(https?:)?//", markup)
    assert "cdn.plot.ly" not in markup
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html)
    assert (
        csp
        and "default-src &#x27;none&#x27;" in csp.group(1)
        and "connect-src &#x27;none&#x27;" in csp.group(1)
    )


def test_every_figure_has_a_placeholder_and_its_data(comparison: ReportData) -> None:
    html = render_html(comparison)
    figures = [f for s in comparison.sections for f in s.figures]
    assert len(figures) == 9  # with the comparison's "what the ratio is made of" (log-factors)
    for f in figures:
        assert f'id="fig-{f.key}"' in html
    blob = re.search(r'<script type="application/json" id="gl-figures">(.*?)</script>', html, re.S)
    assert blob is not None
    specs = orjson.loads(blob.group(1))
    assert [s["id"] for s in specs] == [f"fig-{f.key}" for f in figures]
    for spec, f in zip(specs, figures, strict=True):
        assert len(spec["data"]) == len(f.series) and spec["layout"]["xaxis"]["title"]["text"]


def test_user_controlled_text_is_escaped_everywhere(store: Store) -> None:
    run = make_run(
        store,
        synth_requests(10),
        label=XSS_LABEL,
        model="<b>bold</b> | model",
        environment={"hostname": "h", "driver": "<script>alert(2)</script>"},
    )
    data = build_report(store, [run])
    html = render_html(data)
    assert XSS_LABEL not in html
    assert "<script>alert(2)" not in html and "<b>bold</b>" not in html
    assert "&lt;script&gt;window.__xss=1&lt;/script&gt;" in html
    md = render_markdown(data)
    assert "<script>" not in md and "<img" not in md and "<b>" not in md
    # a pipe in a name does not add a column: every table row keeps the header's cell count
    for rows in _md_tables(md).values():
        assert len({len(r) for r in rows}) == 1


def test_markdown_escaping_round_trips_through_a_markdown_reader() -> None:
    raw = "a|b *c* _d_ `e` [f](g) <h> & #i ~j~ \\k"
    assert _md_unescape(md_escape(raw)) == raw
    assert "|" not in md_escape(raw).replace("\\|", "")
    assert md_escape("two\nlines") == "two lines"


def test_terminal_shows_the_headline_tables_and_prints_labels_literally(store: Store) -> None:
    run = make_run(store, synth_requests(10), label="[bold red]not markup[/bold red]")
    data = build_report(store, [run])
    out = io.StringIO()
    render_terminal(data, Console(file=out, width=240, color_system=None))
    text = out.getvalue()
    assert "[bold red]not markup[/bold red]" in text
    for title in ("Runs", "Latency (ms)", "Per device over the measured window", "Cost per run"):
        assert title in text
    assert "not measured:" in text and "one load level only" in text
    assert "plot(s) in the HTML report" in text
    # the environment's detail rows stay in the files
    assert "env: torch_build" not in text and "server: version_source" not in text
    md = render_markdown(data)
    assert "env: torch\\_build" in md and "server: version\\_source" in md
