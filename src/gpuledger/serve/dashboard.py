"""What the dashboard reads, as blocking functions over one read-only store (the web app runs them in its
thread pool): each page's data comes from the library function the matching CLI command calls, so a page
and its ``/api/`` answer hold what the command's ``--json`` prints.

=========================== ====================================================== ===========================
route                       library                                                the CLI's document
=========================== ====================================================== ===========================
``/``, ``/api/runs``        ``Store.query_runs`` (a page), ``runs_document``       ``runs --json``
``/runs/<id>``              ``report.build_report``                                ``report ID --html``
``/api/runs/<id>``          ``report.run_documents.ShowDocument``                  ``show ID --json``
``/compare``, ``/api/…``    ``cost.stored.compare_stored``                         ``compare A B --json``
``/matrix/<id>``            ``report.matrix.build_matrix_report``                  ``matrix show ID --json``
``/trend``                  ``report.trend.build_trend``                           ``report --trend L --json``
``/published``              ``Store.query_runs`` (engine ``published``)            ``runs --json``
=========================== ====================================================== ===========================

The store is opened read-only (``open_store(read_only=True)``) on first use and kept; while it cannot be
opened (the database is down, the file is not there, its schema is older than this gpuledger) every page says
why and the next request tries again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from gpuledger.catalog import Catalog, load_catalog
from gpuledger.cost import load_profile
from gpuledger.cost.comparison.groups import is_group_ref
from gpuledger.cost.stored import StoredComparison, compare_stored, price_run
from gpuledger.errors import StoreError
from gpuledger.records import RunInfo
from gpuledger.report import build_report
from gpuledger.report.matrix import build_matrix_report
from gpuledger.report.matrix_model import MatrixReport
from gpuledger.report.model import ReportData
from gpuledger.report.run_documents import JsonObject, runs_document
from gpuledger.report.show_document import ShowDocument
from gpuledger.report.trend import Trend, build_trend, metric_names
from gpuledger.serve.params import CompareParams, TrendParams
from gpuledger.serve.settings import ServeSettings
from gpuledger.store import Store, open_store
from gpuledger.store.engine import resolve_url, safe_url
from gpuledger.store.listing import MAX_PER_PAGE, RunPage, RunQuery

T = TypeVar("T")
FACETS_TTL_S = 30.0
# A trend follows at most this many runs (the newest); the page says when there were more.
TREND_MAX_RUNS = 1_000
PUBLISHED_ENGINE = "published"


@dataclass(frozen=True, slots=True)
class RunsApi:
    """``/api/runs``: the page's ``runs --json`` entries and the page they are."""

    document: list[JsonObject]
    page: RunPage


@dataclass(frozen=True, slots=True)
class TrendData:
    """``/trend``: the trend (None until a label or model is chosen), the metrics its runs have, whether the
    newest ``TREND_MAX_RUNS`` stood for more."""

    trend: Trend | None
    metrics: list[str]
    capped: bool


class Dashboard:
    """The store (opened read-only on first use), the catalog and the cost profile every price uses."""

    def __init__(self, settings: ServeSettings) -> None:
        self.settings = settings
        parsed, _ = resolve_url(settings.db)
        self.store_url = safe_url(parsed)
        self._store: Store | None = None
        self._lock = threading.Lock()
        self._facets: tuple[float, dict[str, list[str]]] | None = None
        self.catalog: Catalog = load_catalog()
        if settings.profile is not None:
            load_profile(settings.profile, self.catalog)  # a bad --profile is refused at start

    # ---- the store ------------------------------------------------------------------------------------
    def store(self) -> Store:
        """The store, opened read-only now if it is not open yet (StoreError while it cannot be)."""
        with self._lock:
            if self._store is None:
                self._store = open_store(self.settings.db, read_only=True)
            return self._store

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None

    def _using(self, read: Callable[[Store], T]) -> T:
        return read(self.store())

    @property
    def profiles(self) -> dict[str, str]:
        return {"*": self.settings.profile} if self.settings.profile is not None else {}

    # ---- lists -------------------------------------------------------------------------------------------
    def facets(self) -> dict[str, list[str]]:
        """The filters' values (kept ``FACETS_TTL_S``: one index scan per column is not free on 100,000
        runs)."""
        now = time.monotonic()
        cached = self._facets
        if cached is not None and now - cached[0] < FACETS_TTL_S:
            return cached[1]
        values = self.store().run_facets()
        self._facets = (now, values)
        return values

    def runs_page(self, query: RunQuery) -> tuple[RunPage, dict[str, list[str]]]:
        return self.store().query_runs(query), self.facets()

    def runs_api(self, query: RunQuery) -> RunsApi:
        """The page of runs as ``runs --json`` entries (the whole runs of this page only are read)."""
        store = self.store()
        page = store.query_runs(query)
        found = store.get_runs([r.id for r in page.rows])
        return RunsApi(runs_document(found, [(u.id, u.reason) for u in found.unreadable]), page)

    def published_page(self, query: RunQuery) -> tuple[RunPage, dict[str, list[str]], dict[str, str]]:
        """A page of the published points (``import-results``) and who published each."""
        store = self.store()
        page = store.query_runs(query.model_copy(update={"engine": PUBLISHED_ENGINE}))
        by: dict[str, str] = {}
        for run in store.get_runs([r.id for r in page.rows]):
            origin = run.summary.origin() if run.summary is not None else None
            if origin is not None:
                by[run.id] = origin.by
        return page, self.facets(), by

    def matrices(self) -> list[tuple[str, datetime, str]]:
        return self.store().list_matrices()

    # ---- what a view is made from (serve.app caches a page under it) ---------------------------------------
    def report_key(self, ref: str) -> tuple[object, ...] | None:
        """What the report of run ``ref`` is made from: the run as last written, the doctor's ledger, the
        profile; None for a run still running (its status moves with time: not kept)."""
        store = self.store()
        run_id, updated, status = store.run_version(ref)
        if status == "running":
            return None
        return (run_id, updated.isoformat(), status, store.doctor_version(), self.settings.profile)

    def comparison_key(self, params: CompareParams) -> tuple[object, ...] | None:
        """What the comparison of two runs is made from (None for groups: their runs are found by reading
        the store's runs)."""
        if is_group_ref(params.a) or is_group_ref(params.b):
            return None
        a, b = self.report_key(params.a), self.report_key(params.b)
        return None if a is None or b is None else (a, b, params.basis)

    # ---- one run, two runs, a matrix, a trend -------------------------------------------------------------
    def run_report(self, ref: str) -> ReportData:
        """``gpuledger report ID``'s report (``--profile`` of the server for its prices)."""
        return self._using(lambda store: build_report(store, [ref], self.profiles))

    def run_document(self, ref: str) -> ShowDocument:
        """``gpuledger show ID --json``: the run, its environment hash and its saved cost evaluations."""
        store = self.store()
        info = store.get_run(ref)
        return ShowDocument.of(info, store.env_hash(info.id), store.list_cost_evaluations(info.id))

    def comparison(self, params: CompareParams) -> StoredComparison:
        """``gpuledger compare A B [--profile P] [--basis U]``."""
        profile = self.settings.profile
        return self._using(lambda store: compare_stored(store, [params.a, params.b], lambda _ref: profile,
                                                        self.catalog, params.basis))

    def run_names(self, ids: list[str]) -> dict[str, RunInfo]:
        return {r.id: r for r in self.store().get_runs(ids)}

    def matrix(self, ref: str) -> MatrixReport:
        return self._using(lambda store: build_matrix_report(store, ref, self.catalog))

    def trend(self, params: TrendParams) -> TrendData:
        """The runs of the label and/or model, oldest first (at most ``TREND_MAX_RUNS``, the newest), and
        their trend (``report --trend``'s, priced as ``cost`` prices)."""
        if params.label is None and params.model is None:
            return TrendData(None, [], False)
        store = self.store()
        ids: list[str] = []
        page_no, total = 1, 0
        while len(ids) < TREND_MAX_RUNS:
            page = store.query_runs(RunQuery(label=params.label, model=params.model, per_page=MAX_PER_PAGE,
                                             page=page_no))
            ids.extend(r.id for r in page.rows)
            total = page.total
            if page_no >= page.pages:
                break
            page_no += 1
        runs = list(store.get_runs(ids[:TREND_MAX_RUNS]))
        profile = self.settings.profile
        trend = build_trend(runs, metric=params.metric, label=params.label, model=params.model,
                            profile=profile, price=lambda r: price_run(store, r, profile, self.catalog))
        return TrendData(trend, metric_names(runs), total > TREND_MAX_RUNS)


def store_problem(exc: StoreError) -> tuple[str, str | None]:
    """What a page says when the store cannot be read: the one line and its hint."""
    return exc.message, exc.hint
