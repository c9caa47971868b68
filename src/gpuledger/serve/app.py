"""``gpuledger serve``'s web application (aiohttp.web): the routes, the guards every request passes, and the
static files.

Pages (HTML, rendered on the server; docs/serve.md):

- ``/`` the runs, filtered (label, model, GPU, engine, kind, dates), sorted and paginated; pick two to
  compare;
- ``/runs/<id>`` the run's report (the sections of ``report --html``, the answer first);
- ``/compare?a=&b=`` two runs or groups of repeats (``compare``'s document: the ratio and its parts, the
  like-for-like warnings, break-even, sensitivity);
- ``/matrix`` and ``/matrix/<id>`` benchmark matrices: the cheapest target per load level, Pareto fronts;
- ``/trend`` a figure over time across a label's or a model's runs, each stack change marked;
- ``/published`` the imported published points.

API (JSON: the documents the CLI's ``--json`` prints): ``/api/runs`` (``runs --json`` of a page; the page in
``X-Total-Count`` and ``Link``), ``/api/runs/<id>`` (``show --json``), ``/api/compare?a=&b=`` (``compare
--json``), ``/api/matrix/<id>`` (``matrix show --json``).

Every request passes, in order: the method (only GET and HEAD; 405 otherwise, the login form aside), the size
of its query, the token (when the server has one) and then its route's parameters (a model each:
``serve.params``). Every answer carries the security headers (``serve.security``). A failure is a page (or a
JSON ``{"error", "hint", "status"}`` under ``/api/``) with one line — 404 for a run that is not there, 400 for
a bad parameter, 503 for a store that cannot be read — and one log line; never a traceback.
"""

from __future__ import annotations

import asyncio
import functools
import gzip
import hashlib
import logging
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

import orjson
from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from pydantic import BaseModel

from gpuledger.cost.stored import StoredComparison
from gpuledger.errors import GpuledgerError, InvalidInputError, NotFoundError, StoreError, UsageError
from gpuledger.report.html import FIGURES_JS, REPORT_CSS
from gpuledger.serve import pages
from gpuledger.serve.dashboard import Dashboard
from gpuledger.serve.params import (
    REF_PATTERN,
    CompareParams,
    LoginParams,
    NoParams,
    TrendParams,
    parse,
    query_string_problem,
)
from gpuledger.serve.security import (
    FORM_POSTS,
    HEADERS,
    MAX_BODY_BYTES,
    READ_METHODS,
    SESSION_COOKIE,
    SESSION_MAX_AGE_S,
    authorized,
    safe_next,
    session_value,
    token_matches,
)
from gpuledger.serve.settings import ServeSettings
from gpuledger.serve.views import comparison_page, matrix_view, trend_view
from gpuledger.store.listing import RunQuery

log = logging.getLogger("gpuledger.serve")
T = TypeVar("T")
P = TypeVar("P", bound=BaseModel)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

DASHBOARD: web.AppKey[Dashboard] = web.AppKey("dashboard", Dashboard)
STATIC_CACHE = "public, max-age=31536000, immutable"
PAGE_CACHE_BYTES = 64 * 2**20
_REF = REF_PATTERN.removeprefix("^").removesuffix("$")


# ---- static files ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Asset:
    body: bytes
    gzipped: bytes
    content_type: str


def _asset(name: str, body: bytes, content_type: str) -> tuple[str, Asset]:
    """A static file under a content-addressed name (``serve.3f2a…css``): cacheable for ever."""
    stem, _, ext = name.rpartition(".")
    digest = hashlib.sha256(body).hexdigest()[:16]
    return f"{stem}.{digest}.{ext}", Asset(body, gzip.compress(body, 6, mtime=0), content_type)


def _plotly_js() -> bytes:
    import plotly

    path = Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"
    return path.read_bytes()


# plotly.js writes style rules into <style> elements it makes, which a strict style-src refuses: its own rules
# (it skips them when the page has an element ``#plotly.js-style-global.no-inline-styles``) and the map
# library's sheet (skipped when an element of its id is there). So the page links both as style sheets of
# those ids instead (pages.shell), made here from the bundle itself: its table of rules (``{"X,X div":
# "direction:ltr;…", …}``, X and Y standing for its two root selectors) and the sheet's text.
_RULES_START = re.compile(r"""=\{(["'])X,X div\1:""")
_RULE = re.compile(r"""\s*(?:"([^"]*)"|'([^']*)'|([A-Za-z_$][\w$]*))\s*:\s*(?:"([^"]*)"|'([^']*)')\s*,?""")
_SHEET = re.compile(r"""if\(!document\.getElementById\("([\w-]+)"\)\)\{var ([\w$]+)=document\.createElement"""
                    r"""\("style"\);\2\.id="\1",\2\.textContent='([^']*)'""")
GLOBAL_STYLE_ID = "plotly.js-style-global"


@dataclass(frozen=True, slots=True)
class PlotlyStyle:
    """A style sheet plotly.js would insert inline: the element id it looks for, the class it wants, its
    CSS."""

    element_id: str
    css: str
    css_class: str | None = None


def _plotly_rules(js: str) -> str | None:
    found = _RULES_START.search(js)
    if found is None:
        return None
    at, rules = found.start() + 2, []
    while (rule := _RULE.match(js, at)) is not None:
        key = next(k for k in rule.group(1, 2, 3) if k is not None)
        value = next(v for v in rule.group(4, 5) if v is not None)
        selector = re.sub(r"^,", " ,", key).replace("X", ".js-plotly-plot .plotly")
        rules.append(f"{selector.replace('Y', '.plotly-notifier')}{{{value}}}")
        at = rule.end()
    return "\n".join(rules) + "\n" if js.startswith("}", at) and rules else None


def plotly_styles(js: str) -> list[PlotlyStyle]:
    """Every style sheet the plotly.js bundle would insert inline, as CSS to link instead."""
    out = []
    rules = _plotly_rules(js)
    if rules is not None:
        out.append(PlotlyStyle(GLOBAL_STYLE_ID, rules, "no-inline-styles"))
    out.extend(PlotlyStyle(m.group(1), m.group(3) + "\n") for m in _SHEET.finditer(js))
    return out


@functools.lru_cache(maxsize=1)
def load_assets() -> tuple[dict[str, Asset], pages.Assets]:
    """Every static file the pages link: the report's style and figure script (``report.html``), the
    dashboard's own (``serve/static``), plotly.js from the plotly package (no CDN). Made once a process
    (plotly.js is 4.8 MB to read and compress)."""
    static = resources.files("gpuledger.serve").joinpath("static")
    plotly_js = _plotly_js()
    css = "text/css; charset=utf-8"
    js = "text/javascript; charset=utf-8"
    made = [
        _asset("report.css", REPORT_CSS.encode(), css),
        _asset("serve.css", static.joinpath("serve.css").read_bytes(), css),
        _asset("figures.js", FIGURES_JS.encode(), js),
        _asset("serve.js", static.joinpath("serve.js").read_bytes(), js),
        _asset("plotly.min.js", plotly_js, js),
    ]
    styles = plotly_styles(plotly_js.decode("utf-8", "replace"))
    if not any(st.element_id == GLOBAL_STYLE_ID for st in styles):
        log.warning("this plotly.js has no table of style rules: its plots lack their toolbar's style")
    sheets = [_asset(f"plotly-{i}.css", st.css.encode(), css) for i, st in enumerate(styles)]
    files = dict(made + sheets)
    url = {name.split(".", 1)[0] + "." + name.rsplit(".", 1)[1]: f"/static/{name}" for name in files}
    links = tuple(pages.StyleLink(f"/static/{name}", st.element_id, st.css_class)
                  for (name, _), st in zip(sheets, styles, strict=True))
    return files, pages.Assets(css=(url["report.css"], url["serve.css"]), plotly=url["plotly.js"],
                               figures=url["figures.js"], script=url["serve.js"], plotly_styles=links)


# ---- answers -------------------------------------------------------------------------------------------


def _json_default(obj: Any) -> Any:
    # As the CLI's print_json: objects with to_dict(), sets sorted.
    to_dict = getattr(obj, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    if isinstance(obj, set | frozenset):
        return sorted(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def json_bytes(doc: Any) -> bytes:
    return orjson.dumps(doc, default=_json_default,
                        option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_UTC_Z)


def json_response(doc: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=json_bytes(doc), status=status, content_type="application/json", headers=headers)


def html_response(text: str, status: int = 200) -> web.Response:
    return web.Response(text=text, status=status, content_type="text/html", charset="utf-8")


def html_bytes(body: bytes) -> web.Response:
    return web.Response(body=body, content_type="text/html", charset="utf-8")


class PageCache:
    """Pages already made, by what they were made from (``Dashboard.report_key``): a run's report costs a
    hundred milliseconds or more to build and lay out, and a team opens the same runs. Least recently used
    first out, within ``budget`` bytes. Used from the event loop's thread only."""

    def __init__(self, budget: int = PAGE_CACHE_BYTES) -> None:
        self.budget = budget
        self._pages: OrderedDict[tuple[object, ...], bytes] = OrderedDict()
        self._size = 0

    def get(self, key: tuple[object, ...] | None) -> bytes | None:
        if key is None or key not in self._pages:
            return None
        self._pages.move_to_end(key)
        return self._pages[key]

    def put(self, key: tuple[object, ...] | None, body: bytes) -> None:
        if key is None or len(body) > self.budget // 4:
            return
        old = self._pages.pop(key, None)
        self._size += len(body) - (len(old) if old is not None else 0)
        self._pages[key] = body
        while self._size > self.budget:
            _, dropped = self._pages.popitem(last=False)
            self._size -= len(dropped)


class Server:
    """The routes' handlers around one Dashboard: every read of the store and every page laid out runs in a
    bounded thread pool, so the event loop only moves bytes."""

    def __init__(self, settings: ServeSettings, dashboard: Dashboard) -> None:
        self.settings = settings
        self.dashboard = dashboard
        self.executor = ThreadPoolExecutor(max_workers=settings.workers, thread_name_prefix="gpuledger-serve")
        self.files, assets = load_assets()
        self.chrome = pages.Chrome(assets, dashboard.store_url, logout=settings.token is not None)
        self.cache = PageCache()

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, functools.partial(fn, *args))

    async def cached(self, kind: str, key: Callable[[], tuple[object, ...] | None],
                     make: Callable[[], bytes]) -> bytes:
        """The page ``make`` lays out, kept under what it is made from (``key``; None: not kept)."""
        made_from = await self.call(key)
        full = None if made_from is None else (kind, *made_from)
        hit = self.cache.get(full)
        if hit is not None:
            return hit
        body = await self.call(make)
        self.cache.put(full, body)
        return body

    def close(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)
        self.dashboard.close()

    # ---- pages (each laid out in the pool) -----------------------------------------------------------------
    def _runs_page(self, query: RunQuery) -> str:
        page, facets = self.dashboard.runs_page(query)
        return pages.runs_page(self.chrome, page, facets)

    def _published_page(self, query: RunQuery) -> str:
        page, facets, by = self.dashboard.published_page(query)
        return pages.runs_page(
            self.chrome, page, facets, action="/published", title="Published points", fixed=("engine",),
            published_by=by,
            intro="Benchmark points someone else published, imported with `gpuledger import-results` and "
                  "priced like measured runs; every figure says who published it — not measured here.")

    def _run_page(self, ref: str) -> bytes:
        data = self.dashboard.run_report(ref)
        run_id = data.runs[0].id if data.runs else ref
        return pages.report_page(self.chrome, data, lead=pages.run_lead(run_id), tail=pages.run_tail(run_id)
                                 ).encode()

    def _compare_page(self, params: CompareParams) -> bytes:
        result = self.dashboard.comparison(params)
        data, ratio = comparison_page(result, self.dashboard.run_names(_run_ids(result)), params)
        lead = pages.compare_lead(params.a, params.b, ratio, params.basis)
        return pages.report_page(self.chrome, data, lead=lead, tail=pages.compare_form(params.a, params.b)
                                 ).encode()

    def _matrix_page(self, ref: str) -> str:
        report = self.dashboard.matrix(ref)
        mid = quote(report.matrix.id, safe="")
        lead = f'<p class="actions"><a href="/api/matrix/{mid}">JSON (matrix show --json)</a></p>'
        return pages.report_page(self.chrome, matrix_view(report), lead=lead)

    def _trend_page(self, params: TrendParams) -> str:
        found = self.dashboard.trend(params)
        facets = self.dashboard.facets()
        form = pages.trend_form(params.label, params.model, params.metric, facets.get("label", []),
                                facets.get("model", []), found.metrics or ["throughput"])
        if found.trend is None:
            return pages.trend_start(self.chrome, form)
        return pages.report_page(self.chrome, trend_view(found.trend, found.capped), lead=form)

    # ---- routes --------------------------------------------------------------------------------------------
    async def runs(self, request: web.Request) -> web.Response:
        query = _params(RunQuery, request)
        return html_response(await self.call(self._runs_page, query))

    async def published(self, request: web.Request) -> web.Response:
        query = _params(RunQuery, request)
        if query.engine is not None:
            raise InvalidInputError("the published points are the runs of engine 'published': no engine "
                                    "filter")
        return html_response(await self.call(self._published_page, query))

    async def run(self, request: web.Request) -> web.Response:
        _params(NoParams, request)
        ref = request.match_info["run_id"]
        body = await self.cached("run", functools.partial(self.dashboard.report_key, ref),
                                 functools.partial(self._run_page, ref))
        return html_bytes(body)

    async def compare(self, request: web.Request) -> web.Response:
        if not request.query:
            main = ('<h1>Compare</h1><p class="intro">Two runs (or groups of repeats, g-…): the '
                    "cost-efficiency ratio A ÷ B, what it is made of, what would flip it (<code>gpuledger "
                    'compare A B</code>). Or pick A and B in the <a href="/">list of runs</a>.</p>'
                    + pages.compare_form())
            return html_response(pages.shell(self.chrome, "Compare", main))
        params = _params(CompareParams, request)
        body = await self.cached("compare", functools.partial(self.dashboard.comparison_key, params),
                                 functools.partial(self._compare_page, params))
        return html_bytes(body)

    async def matrices(self, request: web.Request) -> web.Response:
        _params(NoParams, request)
        found = await self.call(self.dashboard.matrices)
        return html_response(pages.matrices_page(self.chrome, found))

    async def matrix(self, request: web.Request) -> web.Response:
        _params(NoParams, request)
        return html_response(await self.call(self._matrix_page, request.match_info["matrix_id"]))

    async def trend(self, request: web.Request) -> web.Response:
        params = _params(TrendParams, request)
        return html_response(await self.call(self._trend_page, params))

    # ---- API ---------------------------------------------------------------------------------------------
    async def api_runs(self, request: web.Request) -> web.Response:
        query = _params(RunQuery, request)
        found = await self.call(self.dashboard.runs_api, query)
        page = found.page
        links = []
        base = {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in query.filters().items()}
        base |= {"sort": query.sort, "order": query.order, "per_page": query.per_page}
        if query.page < page.pages:
            links.append(f'</api/runs?{urlencode(base | {"page": query.page + 1})}>; rel="next"')
        if query.page > 1:
            links.append(f'</api/runs?{urlencode(base | {"page": query.page - 1})}>; rel="prev"')
        headers = {"X-Total-Count": str(page.total), "X-Page": str(query.page), "X-Pages": str(page.pages)}
        if links:
            headers["Link"] = ", ".join(links)
        return json_response(found.document, headers=headers)

    async def api_run(self, request: web.Request) -> web.Response:
        _params(NoParams, request)
        shown = await self.call(self.dashboard.run_document, request.match_info["run_id"])
        return json_response(shown.model_dump(mode="json"))

    async def api_compare(self, request: web.Request) -> web.Response:
        params = _params(CompareParams, request)
        body = await self.cached(
            "api-compare", functools.partial(self.dashboard.comparison_key, params),
            lambda: json_bytes(self.dashboard.comparison(params).to_dict()))
        return web.Response(body=body, content_type="application/json")

    async def api_matrix(self, request: web.Request) -> web.Response:
        _params(NoParams, request)
        report = await self.call(self.dashboard.matrix, request.match_info["matrix_id"])
        return json_response(report.model_dump(mode="json"))

    # ---- the token ---------------------------------------------------------------------------------------
    async def login_form(self, request: web.Request) -> web.Response:
        params = _params(LoginParams, request)
        return html_response(pages.login_page(self.chrome, safe_next(params.next)))

    async def login(self, request: web.Request) -> web.Response:
        token = self.settings.token
        form = await request.post()
        given, next_path = form.get("token"), form.get("next")
        target = safe_next(next_path if isinstance(next_path, str) else None)
        if token is None:
            raise web.HTTPSeeOther(target)
        if not isinstance(given, str) or not token_matches(given, token):
            log.warning("login refused from %s", request.remote)
            return html_response(pages.login_page(self.chrome, target, failed=True), status=401)
        response = web.HTTPSeeOther(target)
        response.set_cookie(SESSION_COOKIE, session_value(token), max_age=SESSION_MAX_AGE_S, path="/",
                            httponly=True, samesite="Strict", secure=_over_https(request))
        raise response

    async def logout(self, request: web.Request) -> web.Response:
        response = web.HTTPSeeOther("/login" if self.settings.token is not None else "/")
        response.del_cookie(SESSION_COOKIE, path="/")
        raise response

    async def static(self, request: web.Request) -> web.Response:
        asset = self.files.get(request.match_info["name"])
        if asset is None:
            raise NotFoundError(f"no static file {request.match_info['name'][:80]!r}")
        headers = {"Cache-Control": STATIC_CACHE, "Vary": "Accept-Encoding"}
        if "gzip" in request.headers.get("Accept-Encoding", ""):
            headers["Content-Encoding"] = "gzip"
            return web.Response(body=asset.gzipped, content_type=asset.content_type.split(";")[0],
                                charset="utf-8", headers=headers)
        return web.Response(body=asset.body, content_type=asset.content_type.split(";")[0], charset="utf-8",
                            headers=headers)


def _over_https(request: web.Request) -> bool:
    return request.secure or request.headers.get("X-Forwarded-Proto", "").lower() == "https"


def _params(model: type[P], request: web.Request) -> P:
    items = list(request.query.items())  # every occurrence: a parameter given twice is refused
    return parse(model, dict(items), [k for k, _ in items])


def _run_ids(result: StoredComparison) -> list[str]:
    if result.comparison is not None:
        return [c.run.id for c in result.comparison.costs]
    groups = result.groups
    return [r.id for g in ((groups.a, groups.b) if groups is not None else ()) for r in g.runs]


# ---- the guards ------------------------------------------------------------------------------------------


def _is_api(request: web.Request) -> bool:
    return request.path.startswith("/api/")


def _failure(request: web.Request, server: Server, status: int, title: str, message: str,
             hint: str | None = None, headers: dict[str, str] | None = None) -> web.Response:
    if _is_api(request):
        return json_response({"error": message, "hint": hint, "status": status}, status=status,
                             headers=headers)
    response = html_response(pages.error_page(server.chrome, status, title, message, hint), status=status)
    if headers:
        response.headers.update(headers)
    return response


def make_app(settings: ServeSettings, dashboard: Dashboard | None = None) -> web.Application:
    """The application; ``dashboard`` defaults to one over ``settings.db``."""
    server = Server(settings, dashboard if dashboard is not None else Dashboard(settings))

    @web.middleware
    async def failures(request: web.Request, handler: Handler) -> web.StreamResponse:
        """Every failure as a page with one line and a log line."""
        try:
            return await handler(request)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            words = {404: "Not found", 405: "Method not allowed", 413: "Request too large"}
            message = {404: f"nothing at {request.path[:200]}",
                       405: f"{request.method} is not answered here: this dashboard only reads (GET, HEAD)",
                       }.get(exc.status, exc.reason)
            headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
            return _failure(request, server, exc.status, words.get(exc.status, exc.reason), message,
                            headers=headers)
        except NotFoundError as exc:
            return _failure(request, server, 404, "Not found", exc.message, exc.hint)
        except (InvalidInputError, UsageError) as exc:
            return _failure(request, server, 400, "Bad request", exc.message, exc.hint)
        except StoreError as exc:
            log.warning("store unavailable on %s: %s", request.path, exc.message)
            return _failure(request, server, 503, "The store is unavailable", exc.message, exc.hint)
        except GpuledgerError as exc:
            log.warning("cannot answer %s: %s", request.path, exc.message)
            return _failure(request, server, 500, "Cannot build this page", exc.message, exc.hint)
        except Exception as exc:  # a bug: the log line has the traceback, the page one line
            log.exception("internal error on %s", request.path)
            return _failure(request, server, 500, "Internal error",
                            f"internal error (a bug in gpuledger): {type(exc).__name__}",
                            "the server's log has the details")

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        """Only reads; a bounded query; the token when there is one."""
        form_post = request.method == "POST" and request.path in FORM_POSTS
        if request.method not in READ_METHODS and not form_post:
            raise web.HTTPMethodNotAllowed(request.method, sorted(READ_METHODS))
        problem = query_string_problem(request.query_string)
        if problem is not None:
            return _failure(request, server, 414, "Request too large", problem)
        token = settings.token
        open_path = request.path in ("/login", "/logout") or request.path.startswith("/static/")
        if token is None or open_path:
            return await handler(request)
        if authorized(token, request.headers.get("Authorization"), request.cookies.get(SESSION_COOKIE)):
            return await handler(request)
        if _is_api(request):
            return _failure(request, server, 401, "Unauthorized",
                            "this server wants its token: 'Authorization: Bearer TOKEN'",
                            headers={"WWW-Authenticate": 'Bearer realm="gpuledger"'})
        target = request.path_qs if request.method == "GET" else "/"
        raise web.HTTPSeeOther("/login?" + urlencode({"next": target}))

    async def secure_headers(_request: web.Request, response: web.StreamResponse) -> None:
        for name, value in HEADERS.items():
            response.headers.setdefault(name, value)
        response.headers.setdefault("Cache-Control", "no-store")

    async def stop(_app: web.Application) -> None:
        server.close()

    app = web.Application(middlewares=[failures, guard], client_max_size=MAX_BODY_BYTES)
    app[DASHBOARD] = server.dashboard
    app.on_response_prepare.append(secure_headers)
    app.on_cleanup.append(stop)
    ref = f"{{run_id:{_REF}}}"
    app.add_routes([
        web.get("/", server.runs),
        web.get("/published", server.published),
        web.get(f"/runs/{ref}", server.run),
        web.get("/compare", server.compare),
        web.get("/matrix", server.matrices),
        web.get(f"/matrix/{{matrix_id:{_REF}}}", server.matrix),
        web.get("/trend", server.trend),
        web.get("/api/runs", server.api_runs),
        web.get(f"/api/runs/{ref}", server.api_run),
        web.get("/api/compare", server.api_compare),
        web.get(f"/api/matrix/{{matrix_id:{_REF}}}", server.api_matrix),
        web.get("/login", server.login_form),
        web.post("/login", server.login),
        web.post("/logout", server.logout),
        web.get(r"/static/{name:[A-Za-z0-9._-]{1,100}}", server.static),
    ])
    return app


class AccessLog(AbstractAccessLogger):
    """One line per request: method, path (no query: a filter is no one's business in a log), status, time.
    Never a header, so never the token or the cookie."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        self.logger.info("%s %s %d %.1f ms", request.method, request.path[:200], response.status, time * 1000)
