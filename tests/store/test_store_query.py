"""Finding runs in a large store (``Store.query_runs``): filters on indexed columns, a stable order, pages
that never overlap; the listing columns a run's kind, GPU and headline rate live in, derived when the run is
written and filled for older stores by the migration; and a store opened read-only."""

from __future__ import annotations

import shutil
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError
from store_factories import make_request, make_run

from gpuledger.bench.metrics import summarize
from gpuledger.errors import StoreError
from gpuledger.records import RunInfo
from gpuledger.store import Store, open_store
from gpuledger.store.listing import MAX_PER_PAGE, RunQuery

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "store-v1.sqlite"
H200_TELEMETRY = [
    {"device": "nvidia:0", "vendor": "nvidia", "name": "NVIDIA H200", "index": 0, "assigned": True},
    {"device": "nvidia:1", "vendor": "nvidia", "name": "NVIDIA H100", "index": 1, "assigned": False},
    {"device": "cpu", "vendor": "cpu", "name": "AMD EPYC"},
]


def _ids(store: Store, **query: object) -> list[str]:
    return [r.id for r in store.query_runs(RunQuery.model_validate(query)).rows]


def _finished(store: Store, info: RunInfo, n: int = 3) -> str:
    run_id = store.create_run(info)
    records = [make_request(i) for i in range(n)]
    store.add_requests(run_id, records)
    store.update_run(run_id, status="complete", summary=summarize(records))
    return run_id


def test_a_run_written_gets_its_kind_gpu_and_headline_rate_as_listing_columns(store: Store) -> None:
    run_id = store.create_run(make_run(label="box-a"))
    (row,) = store.query_runs(RunQuery()).rows
    assert (row.id, row.kind, row.gpu, row.rate, row.rate_unit) == (run_id, "text", None, None, None)

    records = [make_request(i) for i in range(4)]
    store.add_requests(run_id, records)
    summary = summarize(records)
    store.update_run(run_id, status="complete", summary=summary, telemetry_summary=H200_TELEMETRY)
    (row,) = store.query_runs(RunQuery()).rows
    info = store.get_run(run_id)
    assert info.summary is not None
    assert row.rate == info.summary.rate(info.summary.headline())
    assert row.rate_unit == info.summary.unit(info.summary.headline()).rate_text
    # the GPU it was assigned, not the one it was not; the CPU is no GPU
    assert (row.kind, row.gpu, row.status, row.num_requests) == ("text", "NVIDIA H200", "complete", 4)


def test_filters_are_exact_matches_and_pages_never_overlap(store: Store) -> None:
    day = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    made = []
    for i in range(23):
        info = make_run(label=f"lab-{i % 3}", model=("m-a", "m-b")[i % 2], engine=("vllm", "sglang")[i % 2],
                        created_at=day + timedelta(days=i // 5, minutes=i))
        made.append((info.created_at, store.create_run(info)))
    newest_first = [rid for _, rid in sorted(made, key=lambda p: (-p[0].timestamp(), p[1]))]

    pages = [store.query_runs(RunQuery(per_page=5, page=p)) for p in range(1, 6)]
    assert [r.id for page in pages for r in page.rows] == newest_first
    assert {page.total for page in pages} == {23} and pages[0].pages == 5
    assert len(pages[-1].rows) == 3
    assert store.query_runs(RunQuery(per_page=5, page=6)).rows == ()

    assert set(_ids(store, model="m-a")) == {rid for i, (_, rid) in enumerate(made) if i % 2 == 0}
    assert set(_ids(store, label="lab-1", engine="sglang")) == {
        rid for i, (_, rid) in enumerate(made) if i % 3 == 1 and i % 2 == 1}
    assert _ids(store, model="m-") == []  # exact, not a prefix
    # since / until are days, both included
    on_day_1 = {rid for when, rid in made if when.date() == date(2026, 3, 2)}
    assert set(_ids(store, since="2026-03-02", until="2026-03-02")) == on_day_1 and len(on_day_1) == 5
    assert _ids(store, sort="created", order="asc", per_page=50) == [
        rid for _, rid in sorted(made, key=lambda p: (p[0], p[1]))]


def test_sorting_by_a_column_that_may_be_empty_puts_the_empty_ones_last_both_ways(store: Store) -> None:
    fast = _finished(store, make_run(label="fast"), n=6)
    slow = _finished(store, make_run(label="slow"), n=2)
    unfinished = store.create_run(make_run(label="unfinished"))
    rates = {r.id: r.rate for r in store.query_runs(RunQuery()).rows}
    assert rates[unfinished] is None and rates[fast] is not None and rates[slow] is not None
    high_first = _ids(store, sort="rate", order="desc")
    low_first = _ids(store, sort="rate", order="asc")
    assert high_first[-1] == low_first[-1] == unfinished
    assert high_first[:2] == low_first[:2][::-1]


def test_the_facets_list_each_filter_s_values(store: Store) -> None:
    store.create_run(make_run(label="b", model="m-2", engine="sglang"))
    store.create_run(make_run(label="a", model="m-1", engine="vllm", telemetry_summary=H200_TELEMETRY))
    facets = store.run_facets()
    assert facets == {"label": ["a", "b"], "model": ["m-1", "m-2"], "engine": ["sglang", "vllm"],
                      "kind": ["text"], "gpu": ["NVIDIA H200"]}


def test_get_runs_reads_whole_runs_in_the_order_asked(store: Store) -> None:
    a = store.create_run(make_run(label="a"))
    b = store.create_run(make_run(label="b"))
    assert [r.id for r in store.get_runs([b, "nosuchrun", a])] == [b, a]


@pytest.mark.parametrize("bad", [
    {"per_page": MAX_PER_PAGE + 1}, {"page": 0}, {"sort": "summary"}, {"order": "sideways"},
    {"label": "x" * 10_000}, {"since": "yesterday"}, {"secret": "1"},
])
def test_a_query_outside_its_bounds_is_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        RunQuery.model_validate(bad)


def test_a_store_upgraded_from_an_old_schema_has_its_listing_columns_filled(tmp_path: Path) -> None:
    path = tmp_path / "golden.sqlite"
    shutil.copy(GOLDEN, path)
    with open_store(f"sqlite:///{path}") as store:
        rows = {r.id: r for r in store.query_runs(RunQuery(per_page=50)).rows}
        assert len(rows) == 8 and {r.kind for r in rows.values()} == {"text"}
        assert {r.gpu for r in rows.values()} == {"NVIDIA H200", "AMD Instinct MI300X", None}
        assert _ids(store, gpu="AMD Instinct MI300X") == ["64ek326y"]
        for run in store.list_runs():
            row = rows[run.id]
            head = run.summary.headline() if run.summary is not None else None
            assert row.rate == (run.summary.rate(head) if run.summary is not None and head else None)


def test_a_store_opened_read_only_refuses_every_write(db_url: str) -> None:
    with open_store(db_url) as store:
        run_id = _finished(store, make_run(label="kept"))
    with open_store(db_url, read_only=True) as ro:
        assert ro.get_run(run_id).label == "kept"
        assert [r.id for r in ro.query_runs(RunQuery()).rows] == [run_id]
        with pytest.raises(StoreError, match="read-only"):
            ro.create_run(make_run(label="new"))
        with pytest.raises(StoreError, match="read-only"):
            ro.delete_run(run_id)
    with open_store(db_url) as store:
        assert [r.label for r in store.list_runs()] == ["kept"]


def test_a_read_only_open_migrates_nothing_and_says_how_to_upgrade(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    shutil.copy(GOLDEN, path)
    before = path.read_bytes()
    with pytest.raises(StoreError) as caught:
        open_store(f"sqlite:///{path}", read_only=True)
    assert "schema revision '0002'" in caught.value.message
    assert caught.value.hint is not None and "any gpuledger command with write access" in caught.value.hint
    assert path.read_bytes() == before


def test_a_missing_file_opened_read_only_is_not_created(tmp_path: Path) -> None:
    path = tmp_path / "absent.sqlite"
    with pytest.raises(StoreError, match="cannot open"):
        open_store(f"sqlite:///{path}", read_only=True)
    assert not path.exists()
