"""The dashboard's pages as HTML text, rendered on the server.

Every string that comes from the store (labels, model names, GPU names, server answers, error messages) goes
through ``report.html.escape`` (HTML-escaped, control characters neutralised, huge values clipped) in text and
in attributes, and through ``urllib.parse.quote`` in URLs. A page has no inline script and no inline style:
its scripts and style sheets are the package's static files (``serve/static``, plotly.js from the plotly
package), which the Content-Security-Policy (``serve.security.CSP``) allows alone. A report-like page (a
run, a comparison, a trend, a matrix) is a ``report.model.ReportData`` laid out by the report's own HTML
renderer (``report.html.report_main``), so the dashboard shows the sections ``report --html`` shows; its
figures travel as JSON in a non-executed ``<script type="application/json">`` element.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import quote, urlencode

from gpuledger.report.fmt import MISSING, num
from gpuledger.report.html import escape, figures_json, report_main
from gpuledger.report.model import ReportData
from gpuledger.store.listing import SORT_KEYS, RunPage, RunQuery, RunRow

PER_PAGE_CHOICES = (25, 50, 100, 200)
SORT_WORDS = {
    "created": "created", "label": "label", "model": "model", "engine": "engine", "gpu": "GPU",
    "kind": "kind", "requests": "requests", "duration": "duration", "rate": "rate",
}


@dataclass(frozen=True, slots=True)
class StyleLink:
    """A style sheet linked under the element id (and class) plotly.js looks for before it would write the
    same rules inline (``serve.app.plotly_styles``)."""

    href: str
    element_id: str
    css_class: str | None = None


@dataclass(frozen=True, slots=True)
class Assets:
    """The URLs of the static files a page links (content-addressed: they may be cached for ever)."""

    css: tuple[str, ...]
    plotly: str
    figures: str
    script: str
    plotly_styles: tuple[StyleLink, ...] = ()


@dataclass(frozen=True, slots=True)
class Chrome:
    """What every page shows around its content: where the data comes from, whether to offer logging out."""

    assets: Assets
    store: str
    logout: bool = False


def _attr(value: str) -> str:
    return escape(value, quote=True)


def _href(path: str, params: Mapping[str, object] | None = None) -> str:
    query = urlencode({k: str(v) for k, v in (params or {}).items() if v is not None and v != ""})
    return _attr(path + (f"?{query}" if query else ""))


def _run_href(run_id: str) -> str:
    return _attr("/runs/" + quote(run_id, safe=""))


def shell(chrome: Chrome, title: str, main: str, *, figures: str | None = None, status: int = 200) -> str:
    """A whole page: the navigation, ``main`` and the scripts (plotly.js and the figure script only when the
    page has ``figures``, the JSON of ``report.html.figures_json``)."""
    a = chrome.assets
    styles = "".join(f'<link rel="stylesheet" href="{_attr(u)}">' for u in a.css)
    scripts = [a.script]
    if figures is not None:
        scripts = [a.plotly, a.figures, a.script]
        for link in a.plotly_styles:  # plotly.js then writes no <style> of its own (the CSP refuses one)
            cls = f' class="{_attr(link.css_class)}"' if link.css_class else ""
            styles += f'<link rel="stylesheet" id="{_attr(link.element_id)}"{cls} href="{_attr(link.href)}">'
    tags = "".join(f'<script src="{_attr(u)}" defer></script>' for u in scripts)
    data = "" if figures is None else f'<script type="application/json" id="gl-figures">{figures}</script>'
    logout = ('<form class="logout" method="post" action="/logout"><button type="submit">Log out</button>'
              "</form>" if chrome.logout else "")
    nav = (
        '<header class="bar"><nav><a class="brand" href="/">gpuledger</a>'
        '<a href="/">Runs</a><a href="/published">Published</a><a href="/trend">Trend</a>'
        f'<a href="/matrix">Matrices</a></nav><span class="store">store {escape(chrome.store)} · '
        f"read-only</span>{logout}</header>"
    )
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="color-scheme" content="light dark"><meta name="generator" content="gpuledger serve">'
        '<link rel="icon" href="data:,">'
        f"<title>{escape(title)} — gpuledger</title>{styles}{tags}</head>"
        f'<body data-status="{status}">{nav}<main>{main}</main>{data}</body></html>\n'
    )


# ---- the list of runs ---------------------------------------------------------------------------------


def _options(values: Sequence[str], chosen: str | None, blank: str) -> str:
    out = [f'<option value="">{escape(blank)}</option>']
    listed = list(values)
    if chosen is not None and chosen not in listed:
        listed.insert(0, chosen)
    for v in listed:
        sel = " selected" if v == chosen else ""
        out.append(f'<option value="{_attr(v)}"{sel}>{escape(v)}</option>')
    return "".join(out)


def _select(name: str, label: str, values: Sequence[str], chosen: str | None, blank: str = "any") -> str:
    return f'<label>{escape(label)} <select name="{name}">{_options(values, chosen, blank)}</select></label>'


@functools.lru_cache(maxsize=4)
def _datalist(values: tuple[str, ...]) -> str:
    """The label box's suggestions (up to 500 labels: made once per set of labels, not per page)."""
    return "".join(f'<option value="{_attr(v)}">' for v in values)


def _filters(action: str, q: RunQuery, facets: Mapping[str, Sequence[str]], fixed: Sequence[str]) -> str:
    parts = [f'<form class="filters" method="get" action="{_attr(action)}">']
    if "label" not in fixed:
        labels = _datalist(tuple(facets.get("label", ())))
        parts.append(f'<label>label <input name="label" list="labels" value="{_attr(q.label or "")}" '
                     f'maxlength="512" autocomplete="off"></label><datalist id="labels">{labels}</datalist>')
    for name, label in (("model", "model"), ("gpu", "GPU"), ("engine", "engine"), ("kind", "kind")):
        if name not in fixed:
            parts.append(_select(name, label, facets.get(name, ()), getattr(q, name)))
    for name, words in (("since", "from"), ("until", "to")):
        day = getattr(q, name)
        value = day.isoformat() if day else ""
        parts.append(f'<label>{words} <input type="date" name="{name}" value="{value}"></label>')
    sorts = "".join(
        f'<option value="{k}"{" selected" if k == q.sort else ""}>{escape(SORT_WORDS[k])}</option>'
        for k in SORT_KEYS)
    parts.append(f'<label>sort <select name="sort">{sorts}</select></label>')
    orders = "".join(f'<option value="{o}"{" selected" if o == q.order else ""}>{w}</option>'
                     for o, w in (("desc", "descending"), ("asc", "ascending")))
    parts.append(f'<label>order <select name="order">{orders}</select></label>')
    per = "".join(f'<option value="{n}"{" selected" if n == q.per_page else ""}>{n}</option>'
                  for n in PER_PAGE_CHOICES)
    parts.append(f'<label>per page <select name="per_page">{per}</select></label>')
    parts.append(f'<button type="submit">Filter</button> <a href="{_attr(action)}">clear</a></form>')
    return "".join(parts)


def _query_params(q: RunQuery, fixed: Sequence[str], **changes: object) -> dict[str, object]:
    params: dict[str, object] = {k: (v.isoformat() if hasattr(v, "isoformat") else v)
                                 for k, v in q.filters().items() if k not in fixed}
    params |= {"sort": q.sort, "order": q.order, "per_page": q.per_page, "page": q.page}
    params |= changes
    defaults = {"sort": "created", "order": "desc", "per_page": 50, "page": 1}
    return {k: v for k, v in params.items() if defaults.get(k) != v}


def _sort_link(action: str, q: RunQuery, key: str, words: str, fixed: Sequence[str]) -> str:
    order = "asc" if q.sort == key and q.order == "desc" else "desc"
    mark = (" ▼" if q.order == "desc" else " ▲") if q.sort == key else ""
    href = _href(action, _query_params(q, fixed, sort=key, order=order, page=1))
    return f'<a href="{href}">{escape(words)}{mark}</a>'


def _when(dt: datetime | None) -> str:
    return MISSING if dt is None else dt.strftime("%Y-%m-%d %H:%M UTC")


def _rate(row: RunRow) -> str:
    return MISSING if row.rate is None else f"{num(row.rate)} {row.rate_unit or ''}".strip()


def _duration(row: RunRow) -> str:
    return MISSING if row.duration_s is None else f"{num(row.duration_s)} s"


def _pager(action: str, page: RunPage, fixed: Sequence[str]) -> str:
    q = page.query
    links = []
    def link(rel: str, number: int, words: str) -> str:
        return f'<a rel="{rel}" href="{_href(action, _query_params(q, fixed, page=number))}">{words}</a>'

    if q.page > 1:
        links += [link("first", 1, "« first"), link("prev", q.page - 1, "‹ previous")]
    links.append(f"<span>page {q.page:,} of {page.pages:,}</span>")
    if q.page < page.pages:
        links += [link("next", q.page + 1, "next ›"), link("last", page.pages, "last »")]
    return f'<nav class="pager">{" ".join(links)}</nav>'


def runs_page(
    chrome: Chrome,
    page: RunPage,
    facets: Mapping[str, Sequence[str]],
    *,
    action: str = "/",
    title: str = "Runs",
    intro: str = "",
    fixed: Sequence[str] = (),
    published_by: Mapping[str, str] | None = None,
) -> str:
    """A page of runs with the filters, the sort links, the pager and the pick-two-to-compare form.
    ``fixed``: filters this page sets itself (the published points' engine); ``published_by``: a column
    saying who published each run's figures."""
    q = page.query
    columns: list[tuple[str | None, str]] = [
        ("created", "created"), ("label", "label"), ("kind", "kind"), ("model", "model"),
        ("engine", "engine"), ("gpu", "GPU"), (None, "status"), ("requests", "requests"), ("rate", "rate"),
        ("duration", "duration"),
    ]
    head = ['<th scope="col" title="the reference run (A)">A</th>',
            '<th scope="col" title="the run compared with it (B)">B</th>', '<th scope="col">run</th>']
    for key, words in columns:
        if key is not None and key in fixed:
            continue
        cell = _sort_link(action, q, key, words, fixed) if key is not None else escape(words)
        head.append(f'<th scope="col">{cell}</th>')
    if published_by is not None:
        head.append('<th scope="col">published by</th>')
    body = []
    for r in page.rows:
        rid = _attr(r.id)
        cells = {
            "created": _when(r.created_at), "label": escape(r.label or MISSING),
            "kind": escape(r.kind or MISSING), "model": escape(r.model or MISSING),
            "engine": escape(r.engine or MISSING),
            "gpu": escape(r.gpu or MISSING), "status": escape(r.status),
            "requests": f"{r.num_requests:,}", "rate": escape(_rate(r)), "duration": escape(_duration(r)),
        }
        numeric = {"requests", "rate", "duration"}
        row = [f'<td><input type="radio" name="a" value="{rid}" aria-label="A: run {rid}"></td>',
               f'<td><input type="radio" name="b" value="{rid}" aria-label="B: run {rid}"></td>',
               f'<td><a class="run" href="{_run_href(r.id)}">{escape(r.id)}</a></td>']
        for key, words in columns:
            name = key or words
            if key is not None and key in fixed:
                continue
            cls = ' class="n"' if name in numeric else ""
            row.append(f'<td{cls} data-col="{name}">{cells[name]}</td>')
        if published_by is not None:
            row.append(f"<td>{escape(published_by.get(r.id, MISSING))}</td>")
        body.append(f'<tr data-run="{rid}">' + "".join(row) + "</tr>")
    shown = f"{page.total:,} run{'s' if page.total != 1 else ''}"
    matching = " match the filters" if any(k not in fixed for k in q.filters()) else " in the store"
    empty = '<p class="empty">No run here.</p>' if not page.rows else ""
    table = (
        f'<form id="pick" class="pick" method="get" action="/compare">'
        '<p class="pickhelp">Pick a run as A and another as B to compare them (A ÷ B); '
        'the page opens as soon as both are picked. <button type="submit">Compare A with B</button></p>'
        f'<div class="scroll"><table class="runs" id="runs"><thead><tr>{"".join(head)}</tr></thead>'
        f'<tbody>{"".join(body)}</tbody></table></div></form>'
    )
    main = (
        f"<h1>{escape(title)}</h1>" + (f'<p class="intro">{escape(intro)}</p>' if intro else "")
        + _filters(action, q, facets, fixed)
        + f'<p class="count" id="count">{shown}{matching}.</p>' + empty + table + _pager(action, page, fixed)
    )
    return shell(chrome, title, main)


# ---- pages made of a report ---------------------------------------------------------------------------


def report_page(chrome: Chrome, data: ReportData, *, lead: str = "", tail: str = "") -> str:
    """A report-like page: its title, ``lead`` (the page's own links and forms), the report's sections as
    ``report --html`` lays them out (answer first), ``tail``."""
    main = (f"<h1>{escape(data.title)}</h1>{lead}"
            f'<div class="report">{report_main(data)}</div>{tail}')
    has_figures = any(s.figures for s in data.sections)
    return shell(chrome, data.title, main, figures=figures_json(data) if has_figures else None)


def compare_form(a: str = "", b: str = "") -> str:
    """Two run (or group) ids to compare, typed."""
    return (
        '<form class="compare" method="get" action="/compare"><label>A <input name="a" required '
        f'maxlength="80" pattern="[A-Za-z0-9_\\-]+" value="{_attr(a)}" placeholder="run or group id"></label>'
        '<label>B <input name="b" required maxlength="80" pattern="[A-Za-z0-9_\\-]+" '
        f'value="{_attr(b)}" placeholder="run or group id"></label><button type="submit">Compare</button>'
        "</form>"
    )


def run_lead(run_id: str) -> str:
    """The run page's line above its answer: its JSON document."""
    rid = quote(run_id, safe="")
    return f'<p class="actions"><a href="{_attr("/api/runs/" + rid)}">JSON (show --json)</a></p>'


def run_tail(run_id: str) -> str:
    """After the run's report: compare it with another run or group."""
    return (
        '<form class="compare" method="get" action="/compare">'
        f'<input type="hidden" name="a" value="{_attr(run_id)}">'
        '<label>Compare with <input name="b" required maxlength="80" pattern="[A-Za-z0-9_\\-]+" '
        'placeholder="run or group id"></label><button type="submit">Compare</button></form>'
    )


def compare_lead(a: str, b: str, ratio: float | None, basis: str | None) -> str:
    """The comparison page's line above its answer: its ratio as a number (``data#ratio``: what ``compare
    --json`` holds, to every digit), its JSON, the other way round."""
    params = {"a": a, "b": b, "basis": basis}
    value = "" if ratio is None else repr(ratio)
    shown = "" if ratio is None else (
        f'ratio (A ÷ B): <data id="ratio" value="{_attr(value)}">{escape(value)}</data> · ')
    swap = _href("/compare", {"a": b, "b": a, "basis": basis})
    return (f'<p class="actions">{shown}<a href="{_href("/api/compare", params)}">JSON (compare --json)</a>'
            f' · <a href="{swap}">swap A and B</a></p>')


# ---- the rest ------------------------------------------------------------------------------------------


def error_page(chrome: Chrome, status: int, title: str, message: str, hint: str | None = None) -> str:
    """One line saying what went wrong (and a hint): a store that is down, a run that is not there."""
    main = (f'<h1>{escape(title)}</h1><p class="error" id="error">{escape(message)}</p>'
            + (f'<p class="hint">{escape(hint)}</p>' if hint else ""))
    return shell(chrome, title, main, status=status)


def login_page(chrome: Chrome, next_path: str, failed: bool = False) -> str:
    """The token, asked once: the answer sets the session cookie (HttpOnly, SameSite=Strict)."""
    note = '<p class="error" id="error">That is not the token.</p>' if failed else ""
    main = (
        "<h1>Log in</h1><p>This dashboard asks for the token it was started with (<code>gpuledger serve "
        "--token</code>).</p>" + note
        + '<form class="login" method="post" action="/login">'
        f'<input type="hidden" name="next" value="{_attr(next_path)}">'
        '<label>token <input type="password" name="token" required maxlength="512" '
        'autocomplete="current-password"></label><button type="submit">Log in</button></form>'
    )
    return shell(Chrome(chrome.assets, chrome.store, logout=False), "Log in", main)


def matrices_page(chrome: Chrome, matrices: Sequence[tuple[str, datetime, str]]) -> str:
    """The benchmark matrices in the store, newest first, each linked to its page."""
    rows = "".join(
        f'<tr><td><a href="{_attr("/matrix/" + quote(mid, safe=""))}">{escape(mid)}</a></td>'
        f"<td>{_when(created)}</td><td>{escape(status)}</td></tr>"
        for mid, created, status in matrices
    )
    body = (f'<table class="runs"><thead><tr><th>matrix</th><th>started</th><th>status</th></tr></thead>'
            f"<tbody>{rows}</tbody></table>" if matrices else '<p class="empty">No matrix in this store.</p>')
    main = ("<h1>Benchmark matrices</h1><p class=\"intro\">Each: the cheapest target per load level, every "
            "target's Pareto front and every cell (<code>gpuledger report --matrix ID</code>).</p>" + body)
    return shell(chrome, "Benchmark matrices", main)


def trend_form(label: str | None, model: str | None, metric: str, labels: Sequence[str],
               models: Sequence[str], metrics: Sequence[str]) -> str:
    """Which runs a trend follows (a label, a model or both) and its figure."""
    metric_opts = "".join(
        f'<option value="{_attr(m)}"{" selected" if m == metric else ""}>{escape(m)}</option>'
        for m in metrics)
    return (
        '<form class="filters" method="get" action="/trend">'
        + _select("label", "label", labels, label, blank="—")
        + _select("model", "model", models, model, blank="—")
        + f'<label>figure <select name="metric">{metric_opts}</select></label>'
        '<button type="submit">Show</button></form>'
    )


def trend_start(chrome: Chrome, form: str) -> str:
    """The trend page before a label or model is chosen."""
    main = ("<h1>Trend</h1><p class=\"intro\">A figure over time across the runs of a label or a model, each "
            "change of the stack (driver, CUDA/ROCm, torch, engine, server version) marked "
            "(<code>gpuledger report --trend LABEL</code>).</p>" + form)
    return shell(chrome, "Trend", main)
