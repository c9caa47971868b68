"""A corrupt row is that row's problem (issue 16, item 11): ``runs`` lists the others and names the bad one
(id and why), ``show``/``export`` of it are one StoreError line (exit 5), never a crash (exit 70).

The rows are corrupted the way a damaged or hand-edited file holds them: written with plain SQL."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
import sqlalchemy as sa
from store_factories import make_request, make_run

from gpuledger.cli.main import main
from gpuledger.errors import StoreError
from gpuledger.store import Store, open_store

# (column, SQL value) — on SQLite any of them; on PostgreSQL only what its types let in.
SQLITE_CORRUPTIONS = [
    ("summary", "'{\"output_tokens_per_s\": 12.5'"),  # invalid JSON (cut short)
    ("config", "'[1, 2]'"),  # valid JSON of the wrong shape
    ("created_at", "'the day before yesterday'"),
    ("status", "'exploded'"),
    ("label", "X'6e6967687400ff'"),  # a blob where text belongs
    ("num_requests", "'many'"),
]
PG_CORRUPTIONS = [("config", "'[1, 2]'::json"), ("status", "'exploded'")]


def _corrupt(db_url: str, table: str, column: str, value: str, where: str) -> None:
    engine = sa.create_engine(db_url)
    with engine.begin() as conn:
        conn.exec_driver_sql(f"UPDATE {table} SET {column} = {value} WHERE {where}")
    engine.dispose()


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _url(store: Store) -> str:
    return store._url.render_as_string(hide_password=False)


def _check_one_bad_run(store: Store, bad: str, good: list[str], column: str,
                       capsys: pytest.CaptureFixture[str]) -> None:
    found = store.list_runs()
    assert sorted(r.id for r in found) == sorted(good)
    assert [u.id for u in found.unreadable] == [bad]
    assert column in found.unreadable[0].reason

    code, out, err = _cli(capsys, "runs", "--db", _url(store))
    assert code == 0, err
    assert all(run_id in out for run_id in good)
    assert bad in out and "unreadable" in out

    code, out, err = _cli(capsys, "runs", "--json", "--db", _url(store))
    assert code == 0, err
    listed = orjson.loads(out)
    assert sorted(r["id"] for r in listed if r["status"] != "unreadable") == sorted(good)
    (entry,) = [r for r in listed if r["status"] == "unreadable"]
    assert entry["id"] == bad and column in entry["error"]

    for argv in (("show", bad), ("export", bad), ("show", bad, "--json")):
        code, out, err = _cli(capsys, *argv, "--db", _url(store))
        assert (code, out) == (5, ""), (argv, err)
        first = err.splitlines()[0]
        assert first.startswith(f"error: run {bad!r} in ") and "is unreadable" in first, err
        assert "Traceback" not in err
    assert store.get_run(good[0]).id == good[0]  # the others read as usual


@pytest.mark.parametrize(("column", "value"), SQLITE_CORRUPTIONS, ids=[c for c, _ in SQLITE_CORRUPTIONS])
def test_one_corrupt_run_row_in_sqlite_is_shown_as_unreadable_and_the_others_list_normally(
    sqlite_store: Store, column: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    store = sqlite_store
    ids = [store.create_run(make_run(label=f"run-{k}", status="complete")) for k in range(3)]
    _corrupt(_url(store), "runs", column, value, f"id = '{ids[1]}'")
    _check_one_bad_run(store, ids[1], [ids[0], ids[2]], column, capsys)
    with pytest.raises(StoreError, match="unreadable"):
        store.get_run(ids[1])
    assert store.delete_run(ids[1]) == ids[1]  # what the hint says to do works
    assert store.list_runs().unreadable == []


@pytest.mark.postgres
@pytest.mark.parametrize(("column", "value"), PG_CORRUPTIONS, ids=[c for c, _ in PG_CORRUPTIONS])
def test_a_run_row_of_the_wrong_shape_in_postgresql_is_shown_as_unreadable(
    pg_fresh_url: str, column: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with open_store(pg_fresh_url) as store:
        ids = [store.create_run(make_run(label=f"run-{k}", status="complete")) for k in range(3)]
        _corrupt(pg_fresh_url, "runs", column, value, f"id = '{ids[0]}'")
        _check_one_bad_run(store, ids[0], ids[1:], column, capsys)


def test_a_chunk_blob_of_the_wrong_length_is_a_store_error_naming_the_request(
    sqlite_store: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = sqlite_store
    run_id = store.create_run(make_run(status="complete"))
    store.add_requests(run_id, [make_request(i) for i in range(3)])
    _corrupt(_url(store), "requests", "chunk_times", "X'0102030405'", "idx = 1")
    with pytest.raises(StoreError, match=rf"request 1 of run '{run_id}' in .* is unreadable"):
        store.get_requests(run_id)
    assert len(store.get_requests(run_id, chunks=False)) == 3  # the rest of the row is still there
    code, out, err = _cli(capsys, "export", run_id, "--db", _url(store))
    assert (code, out) == (5, "")
    assert "request 1 of run" in err.splitlines()[0] and "Traceback" not in err
    code, out, _ = _cli(capsys, "runs", "--json", "--db", _url(store))
    assert code == 0 and [r["id"] for r in orjson.loads(out)] == [run_id]
