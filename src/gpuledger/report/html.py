"""The self-contained HTML report: one file, plotly.js inlined once, no request leaves the file.

Safety: every user-controlled string (labels, model names, environment values) is HTML-escaped
in the markup and in figure texts, with control characters neutralised and huge values clipped;
figure data travels as JSON inside a non-executed ``<script type="application/json">`` element
(``<`` ``>`` ``/`` escaped by plotly's encoder), and a Content-Security-Policy allows only this
file's own scripts (by hash) and no network at all.
Light and dark: CSS follows ``prefers-color-scheme`` and the plots are re-coloured to match.
"""

from __future__ import annotations

import base64
import hashlib
import re
from html import escape as _html_escape

from gpuledger.report.fmt import NUMERIC
from gpuledger.report.model import Answer, Figure, ReportData, Section, Series, Table
from gpuledger.textsafe import display


def escape(value: str, quote: bool = True) -> str:
    """Text for the page: HTML-escaped, control characters neutralised and a huge value clipped
    (``gpuledger.textsafe``: what the terminal shows, the page shows)."""
    return _html_escape(display(value), quote=quote)

# The report's style and its figure script: inlined here, served as files by ``gpuledger serve``.
REPORT_CSS = """
:root { color-scheme: light dark; --bg: #ffffff; --fg: #1f2328; --muted: #59636e; --line: #d1d9e0;
  --card: #f6f8fa; --warn-bg: #fff8c5; --warn-fg: #5c4a00; --accent: #0969da; }
@media (prefers-color-scheme: dark) {
  :root { --bg: #0d1117; --fg: #e6edf3; --muted: #9198a1; --line: #3d444d; --card: #151b23;
    --warn-bg: #2e2a14; --warn-fg: #e3c979; --accent: #4493f8; }
}
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--fg);
  font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Noto Sans", sans-serif; }
main { max-width: 1180px; margin: 0 auto; padding: 24px 20px 64px; }
h1 { font-size: 1.6em; margin: 0 0 4px; } h2 { font-size: 1.3em; margin: 40px 0 8px;
  padding-bottom: 4px; border-bottom: 1px solid var(--line); } h3 { font-size: 1.05em; margin: 20px 0 6px; }
a { color: var(--accent); }
.meta, .prov, figcaption, .intro { color: var(--muted); }
.prov, figcaption { font-size: 0.85em; margin: 4px 0 16px; }
nav ol { columns: 2; padding-left: 20px; margin: 8px 0 0; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; margin: 6px 0 2px; font-size: 0.9em; }
caption { text-align: left; font-weight: 600; padding: 4px 0; }
th, td { border: 1px solid var(--line); padding: 4px 8px; vertical-align: top; }
th { background: var(--card); text-align: left; }
td.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.missing { background: var(--warn-bg); color: var(--warn-fg); border-radius: 6px; padding: 8px 12px;
  margin: 8px 0; } .missing ul { margin: 0; padding-left: 20px; }
figure { margin: 16px 0; border: 1px solid var(--line); border-radius: 8px; padding: 8px;
  background: var(--card); }
.plot { width: 100%; height: 420px; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: 4px 16px; }
dt { font-weight: 600; } dd { margin: 0; }
.contact-sheet { display: flex; flex-wrap: wrap; gap: 8px; }
.contact-sheet figure.thumb { margin: 0; padding: 4px; }
.contact-sheet img { image-rendering: pixelated; display: block; }
.answer { border: 1px solid var(--line); border-radius: 8px; padding: 12px 16px; margin: 12px 0;
  background: var(--card); }
.answer h3 { margin: 0 0 4px; }
.headline { font-size: 1.9em; font-weight: 700; margin: 0; font-variant-numeric: tabular-nums; }
.subline { color: var(--muted); margin: 2px 0 10px; }
.why ul { margin: 4px 0 0; padding-left: 20px; }
details > summary { cursor: pointer; list-style: revert; } details > summary h2 { display: inline; }
"""

FIGURES_JS = """
(function () {
  "use strict";
  var figs = JSON.parse(document.getElementById("gl-figures").textContent);
  var mq = window.matchMedia("(prefers-color-scheme: dark)");
  function colours() {
    return mq.matches ? { fg: "#e6edf3", grid: "#30363d", axis: "#6e7681" }
                      : { fg: "#1f2328", grid: "#e4e8ec", axis: "#8c959f" };
  }
  function themed() {
    var c = colours();
    return { "font.color": c.fg, "xaxis.gridcolor": c.grid, "yaxis.gridcolor": c.grid,
             "xaxis.linecolor": c.axis, "yaxis.linecolor": c.axis,
             "xaxis.zerolinecolor": c.axis, "yaxis.zerolinecolor": c.axis };
  }
  function apply(layout) {
    var t = themed();
    Object.keys(t).forEach(function (path) {
      var parts = path.split("."), o = layout;
      for (var i = 0; i < parts.length - 1; i++) { o[parts[i]] = o[parts[i]] || {}; o = o[parts[i]]; }
      o[parts[parts.length - 1]] = t[path];
    });
    return layout;
  }
  var config = { displaylogo: false, responsive: true, showSendToCloud: false, showLink: false,
                 modeBarButtonsToRemove: ["sendDataToCloud"] };
  figs.forEach(function (f) { Plotly.newPlot(f.id, f.data, apply(f.layout), config); });
  var relayout = function () { figs.forEach(function (f) { Plotly.relayout(f.id, themed()); }); };
  if (mq.addEventListener) { mq.addEventListener("change", relayout); }
})();
"""


def _plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    js: str = get_plotlyjs()
    return js


def _script_hash(source: str) -> str:
    digest = hashlib.sha256(source.encode("utf-8")).digest()
    return "'sha256-" + base64.b64encode(digest).decode("ascii") + "'"


def _cell(value: str, align: bool) -> str:
    cls = ' class="n"' if align and NUMERIC.match(value) else ""
    return f"<td{cls}>{escape(value)}</td>"


def _table(t: Table) -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in t.columns)
    body = "".join("<tr>" + "".join(_cell(v, t.align_numbers) for v in row) + "</tr>" for row in t.rows)
    prov = f'<p class="prov">{escape(t.provenance)}</p>' if t.provenance else ""
    return (
        f'<div class="scroll"><table id="table-{escape(t.key)}"><caption>{escape(t.title)}</caption>'
        f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>{prov}"
    )


def _figure_div(f: Figure) -> str:
    return (
        f'<figure><div class="plot" id="fig-{escape(f.key)}" role="img" aria-label="{escape(f.title)}"></div>'
        f"<figcaption><strong>{escape(f.title)}</strong> — x: {escape(f.x_title)}; y: {escape(f.y_title)}. "
        f"{escape(f.provenance)}</figcaption></figure>"
    )


# plotly's default colourway: readable on light and dark backgrounds.
PALETTE = (
    "#636efa",
    "#ef553b",
    "#00cc96",
    "#ab63fa",
    "#ffa15a",
    "#19d3f3",
    "#ff6692",
    "#b6e880",
    "#ff97ff",
    "#fecb52",
)


def _pe(text: str) -> str:
    """Escape a text plotly will draw: ``<``, ``>`` and ``&`` (plotly decodes these entities back)."""
    return escape(text, quote=False)


# A plotly.js object (a trace, a layout): plotly's own JSON, validated by ``go.Figure`` in ``render_html``.
PlotlyJson = dict[str, object]


def _trace(f: Figure, s: Series) -> PlotlyJson:
    """One trace of ``f``: a bar of categories, or a scatter (lines, markers or both) in its colour."""
    group: PlotlyJson = {"legendgroup": s.group} if s.group else {}
    if f.kind == "bar":
        return {"type": "bar", "name": _pe(s.name), "x": [_pe(str(x)) for x in s.x], "y": list(s.y)} | group
    colour = PALETTE[s.color % len(PALETTE)] if s.color is not None else None
    line: PlotlyJson = {"shape": s.shape, "dash": s.dash} | ({"color": colour} if colour else {})
    marker: PlotlyJson = ({"size": 8} if s.mode != "lines" else {}) | ({"color": colour} if colour else {})
    trace: PlotlyJson = {
        "type": "scatter",
        "mode": "markers" if f.kind == "scatter" and s.mode == "markers" else s.mode,
        "name": _pe(s.name),
        "x": list(s.x),
        "y": list(s.y),
        "line": line,
    }
    return trace | ({"marker": marker} if marker else {}) | group


def plotly_figure(f: Figure) -> tuple[list[PlotlyJson], PlotlyJson]:
    """The plotly.js ``data`` (its traces) and ``layout`` of a figure. Texts are HTML-escaped: plotly renders
    a few HTML tags inside labels, escaping makes it show them as the literal characters instead."""
    bar = f.kind == "bar"
    layout: PlotlyJson = {
        "title": {"text": _pe(f.title), "x": 0.01, "xanchor": "left"},
        "xaxis": {
            "title": {"text": _pe(f.x_title)},
            "type": "category" if bar else "log" if f.x_log else "linear",
            "automargin": True,
        },
        "yaxis": {
            "title": {"text": _pe(f.y_title)},
            "automargin": True,
            "rangemode": "tozero" if f.y_range_zero else "normal",
        },
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)",
        "margin": {"l": 60, "r": 20, "t": 50, "b": 50},
        "legend": {"orientation": "h", "y": -0.2},
        "hovermode": "closest",
    } | ({"barmode": "stack"} if bar else {})
    return [_trace(f, s) for s in f.series], layout


def _answer(a: Answer) -> str:
    facts = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in a.facts)
    why = "".join(f"<li>{escape(w)}</li>" for w in a.why)
    return (
        f'<div class="answer"><h3>{escape(a.title)}</h3>'
        f'<p class="headline">{escape(a.headline)}</p>'
        + (f'<p class="subline">{escape(a.subline)}</p>' if a.subline else "")
        + (f"<dl>{facts}</dl>" if facts else "")
        + (f'<div class="why"><strong>Why</strong><ul>{why}</ul></div>' if why else "")
        + "</div>"
    )


def _section(s: Section) -> str:
    if s.collapsed:
        return (
            f'<section id="{escape(s.key)}"><details><summary><h2>{escape(s.title)}</h2></summary>'
            + _section_body(s)
            + "</details></section>"
        )
    return f'<section id="{escape(s.key)}"><h2>{escape(s.title)}</h2>' + _section_body(s) + "</section>"


def _section_body(s: Section) -> str:
    parts = ["".join(_answer(a) for a in s.answers)]
    if s.intro:
        parts.append(f'<p class="intro">{escape(s.intro)}</p>')
    if s.not_measured:
        items = "".join(f"<li>{escape(m)}</li>" for m in s.not_measured)
        parts.append(f'<div class="missing"><strong>Not measured</strong><ul>{items}</ul></div>')
    for t in s.tables:
        parts.append(_table(t))
    for f in s.figures:
        parts.append(_figure_div(f))
    if s.images:
        parts.append(_contact_sheet(s))
    if s.notes:
        parts.append('<ul class="notes">' + "".join(f"<li>{escape(n)}</li>" for n in s.notes) + "</ul>")
    if s.definitions:
        parts.append(
            "<dl>" + "".join(f"<dt>{escape(t)}</dt><dd>{escape(d)}</dd>" for t, d in s.definitions) + "</dl>"
        )
    return "".join(parts)


_BASE64 = re.compile(r"^[A-Za-z0-9+/=]+$")


def _contact_sheet(s: Section) -> str:
    """The section's thumbnails as ``<img src="data:image/png;base64,…">`` (the CSP allows ``img-src data:``
    and nothing else); a value that is not plain base64 is left out."""
    cells = "".join(
        f'<figure class="thumb"><img src="data:image/png;base64,{t.png_base64}" width="{int(t.width)}" '
        f'height="{int(t.height)}" alt="{escape(t.caption)}">'
        f"<figcaption>{escape(t.caption)}</figcaption></figure>"
        for t in s.images
        if _BASE64.match(t.png_base64)
    )
    return f'<div class="contact-sheet">{cells}</div>'


def figures_json(data: ReportData) -> str:
    """Every figure of the report as plotly.js JSON (``[{id, data, layout}]``), for ``FIGURES_JS`` to draw
    from a non-executed ``<script type="application/json" id="gl-figures">``."""
    import plotly.graph_objects as go
    from plotly.io.json import to_json_plotly

    figures = [f for s in data.sections for f in s.figures]
    # go.Figure validates every property name and value: a typo fails here, not silently in a browser.
    fig_json = [
        {"id": f"fig-{f.key}", **go.Figure(data=traces, layout=layout).to_plotly_json()}
        for f, (traces, layout) in ((f, plotly_figure(f)) for f in figures)
    ]
    out: str = to_json_plotly(fig_json)
    return out


def report_main(data: ReportData) -> str:
    """The report's content after its title: the answer first, then the runs, the contents and every
    section (the figures as empty ``.plot`` boxes that ``FIGURES_JS`` fills)."""
    runs = "".join(
        f"<li><strong>{escape(r.name)}</strong> — id {escape(r.id)}, model {escape(r.model or '—')}, "
        f"engine {escape(r.engine or '—')}, status {escape(r.status)}</li>"
        for r in data.runs
    )
    toc = "".join(f'<li><a href="#{escape(s.key)}">{escape(s.title)}</a></li>' for s in data.sections)
    # The answer comes straight after the title; the run list and the contents follow it.
    first, rest = (data.sections[0], data.sections[1:]) if data.sections else (None, ())
    lead = _section(first) if first is not None and first.answers else ""
    if not lead:
        rest = data.sections
    body = "".join(_section(s) for s in rest)
    listed = f"<ul>{runs}</ul>" if runs else ""  # a page of its own document (a matrix) lists no runs
    return f"{lead}{listed}<nav><strong>Contents</strong><ol>{toc}</ol></nav>{body}"


def render_html(data: ReportData) -> str:
    """The report as one self-contained HTML document (about 5 MB: plotly.js is inlined once)."""
    plotly_js = _plotly_js()
    csp = (
        "default-src 'none'; "
        f"script-src {_script_hash(plotly_js)} {_script_hash(FIGURES_JS)}; "
        "style-src 'unsafe-inline'; img-src data:; font-src data:; connect-src 'none'; "
        "base-uri 'none'; form-action 'none'"
    )
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_html_escape(csp)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="color-scheme" content="light dark">'
        '<meta name="generator" content="gpuledger">'
        f"<title>{escape(data.title)}</title><style>{REPORT_CSS}</style>"
        f"<script>{plotly_js}</script></head><body><main>"
        f"<h1>{escape(data.title)}</h1>"
        f'<p class="meta">Generated {escape(data.generated_at.strftime("%Y-%m-%d %H:%M:%S UTC"))} '
        "from the gpuledger store. Works offline; nothing is loaded from the network.</p>"
        f"{report_main(data)}</main>"
        f'<script type="application/json" id="gl-figures">{figures_json(data)}</script>'
        f"<script>{FIGURES_JS}</script></body></html>\n"
    )
