"""Bad input (issue 2): one clear line, the documented exit code, and the existing store untouched."""

from __future__ import annotations

import hashlib
import os
import socket
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest
import sqlalchemy as sa
from store_factories import make_request, make_run, make_samples

from gpuledger.cli.main import main
from gpuledger.errors import InvalidInputError, NotFoundError, StoreError
from gpuledger.store import Store, open_store


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _snapshot(store: Store) -> list[dict[str, Any]]:
    """Everything the store holds, run by run."""
    return [store.export_run(r.id) for r in store.list_runs()]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# ---- where the store is -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("mysql://root@127.0.0.1/results", "unsupported store URL scheme 'mysql'"),
        ("http://127.0.0.1/results", "unsupported store URL scheme 'http'"),
    ],
)
def test_a_url_that_is_not_sqlite_or_postgresql_is_a_store_error(
    url: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(StoreError, match=said):
        open_store(url)
    code, out, err = _cli(capsys, "runs", "--db", url)
    assert code == 5 and out == ""
    assert err.startswith("error: ") and said in err.splitlines()[0]


def test_a_plain_file_path_is_a_sqlite_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--db results.sqlite` is what a newcomer types (issue 15): a relative or ~ path is a SQLite file."""
    monkeypatch.chdir(tmp_path)
    with open_store("results.sqlite") as store:
        assert store.url == f"sqlite:///{tmp_path / 'results.sqlite'}"
    assert (tmp_path / "results.sqlite").is_file()
    code, out, _ = _cli(capsys, "runs", "--db", "results.sqlite", "--json")
    assert code == 0 and out.strip() == "[]"
    monkeypatch.setenv("HOME", str(tmp_path))
    with open_store("~/other.db") as store:
        assert store.url.endswith(f"{tmp_path}/other.db")
    with pytest.raises(StoreError, match="does not exist"):
        open_store("missing/dir/results.sqlite")


def test_a_sqlite_file_in_a_missing_directory_is_refused_and_nothing_is_created(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'no' / 'such' / 'dir' / 'results.sqlite'}"
    with pytest.raises(StoreError, match="does not exist"):
        open_store(url)
    assert list(tmp_path.iterdir()) == []


def test_a_directory_given_as_the_store_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="is a directory"):
        open_store(f"sqlite:///{tmp_path}")


def test_a_corrupt_sqlite_file_is_reported_and_left_byte_for_byte(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "results.sqlite"
    path.write_bytes(b"this was a store once\x00" * 300)
    before = _digest(path)
    with pytest.raises(StoreError, match=r"not a SQLite database \(file is not a database\)"):
        open_store(f"sqlite:///{path}")
    code, out, err = _cli(capsys, "runs", "--json", "--db", f"sqlite:///{path}")
    assert (code, out) == (5, "")
    assert "not a SQLite database" in err.splitlines()[0]
    assert _digest(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.sqlite"]


def test_a_store_opened_read_only_can_be_read_but_a_write_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "results.sqlite"
    with open_store(f"sqlite:///{path}") as store:
        run_id = store.create_run(make_run())
        store.add_requests(run_id, [make_request(0)])
    before = _digest(path)
    with open_store(f"sqlite:///file:{path}?mode=ro&uri=true") as ro:
        assert [r.id for r in ro.list_runs()] == [run_id]
        with pytest.raises(StoreError, match="read-only"):
            ro.add_requests(run_id, [make_request(1)])
        with pytest.raises(StoreError, match="read-only"):
            ro.create_run(make_run())
    assert _digest(path) == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file permissions (the mode=ro test covers it)")
def test_a_store_file_without_write_permission_gives_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "results.sqlite"
    with open_store(f"sqlite:///{path}") as store:
        run_id = store.create_run(make_run())
    path.chmod(0o444)
    tmp_path.chmod(0o555)
    try:
        before = _digest(path)
        url = f"sqlite:///{path}"
        with pytest.raises(StoreError, match="read-only|cannot open"), open_store(url) as again:
            again.update_run(run_id, label="changed")
        assert _digest(path) == before
    finally:
        tmp_path.chmod(0o755)
        path.chmod(0o644)


def test_a_store_written_by_a_newer_gpuledger_is_refused_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "results.sqlite"
    with open_store(f"sqlite:///{path}") as store:
        store.create_run(make_run())
    engine = sa.create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '0099'"))
    engine.dispose()
    before = _digest(path)
    code, out, err = _cli(capsys, "runs", "--db", f"sqlite:///{path}")
    assert (code, out) == (5, "")
    assert "schema revision '0099'" in err and "newer gpuledger" in err
    assert _digest(path) == before


# ---- PostgreSQL server problems -----------------------------------------------------------------


@pytest.mark.postgres
def test_an_unreachable_postgresql_server_is_one_line_and_exit_5(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"postgresql+psycopg://postgres@127.0.0.1:{_free_port()}/gpuledger"
    code, out, err = _cli(capsys, "runs", "--json", "--db", url)
    assert (code, out) == (5, "")
    first = err.splitlines()[0]
    assert first.startswith("error: cannot open store postgresql+psycopg://postgres@127.0.0.1:")
    assert first.endswith("connection refused")


@pytest.mark.postgres
def test_a_wrong_password_is_one_line_exit_5_and_the_password_is_not_shown(
    pg_cluster: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    url = sa.make_url(pg_cluster.url).set(password="not-the-password").render_as_string(hide_password=False)
    with pytest.raises(StoreError, match="password authentication failed"):
        open_store(url)
    code, out, err = _cli(capsys, "show", "abcd1234", "--db", url)
    assert (code, out) == (5, "")
    assert "password authentication failed" in err.splitlines()[0]
    assert "not-the-password" not in err


@pytest.mark.postgres
def test_a_missing_postgresql_database_is_a_store_error(pg_url: str) -> None:
    url = sa.make_url(pg_url).set(database="gpuledger_no_such_db").render_as_string(hide_password=False)
    with pytest.raises(StoreError, match='database "gpuledger_no_such_db" does not exist'):
        open_store(url)


@pytest.mark.postgres
def test_a_read_only_postgresql_database_can_be_read_but_not_written(pg_fresh_url: str) -> None:
    with open_store(pg_fresh_url) as store:
        run_id = store.create_run(make_run())
    name = sa.make_url(pg_fresh_url).database
    admin = sa.make_url(pg_fresh_url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
    with open_store(pg_fresh_url) as ro:
        assert [r.id for r in ro.list_runs()] == [run_id]
        with pytest.raises(StoreError, match="read-only"):
            ro.add_requests(run_id, [make_request(0)])
        assert ro.get_run(run_id).num_requests == 0


# ---- run ids ------------------------------------------------------------------------------------


def test_unknown_and_ambiguous_run_ids_exit_3_with_one_line(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    store.create_run(make_run(id="abcd2345"))
    store.create_run(make_run(id="abcd7777"))
    for argv, said in (
        (("show", "zzzz9999"), "no run 'zzzz9999'"),
        (("show", "abcd"), "run id prefix 'abcd' is ambiguous: abcd2345, abcd7777"),
        (("export", "abcd", "--format", "csv"), "ambiguous"),
        (("delete", "abcd"), "ambiguous"),
        (("delete", "abc"), "at least 4 characters"),
    ):
        code, out, err = _cli(capsys, *argv, "--db", store_url(store))
        assert (code, out) == (3, ""), argv
        assert said in err.splitlines()[0]
    assert {r.id for r in store.list_runs()} == {"abcd2345", "abcd7777"}


def store_url(store: Store) -> str:
    """The store's URL including its password (tests only)."""
    return store._url.render_as_string(hide_password=False)


# ---- import -------------------------------------------------------------------------------------


def _good_doc(store: Store) -> dict[str, Any]:
    run_id = store.create_run(make_run(status="complete"))
    store.add_requests(run_id, [make_request(i) for i in range(3)])
    store.add_telemetry(run_id, make_samples(4))
    doc = store.export_run(run_id)
    store.delete_run(run_id)
    return doc


def _broken(doc: dict[str, Any], change: str) -> Any:
    d = orjson.loads(orjson.dumps(doc))
    if change == "future version":
        d["version"] = 2
    elif change == "zero version":
        d["version"] = 0
    elif change == "wrong format":
        d["format"] = "guidellm-benchmark"
    elif change == "not an object":
        return [d]
    elif change == "no run":
        del d["run"]
    elif change == "unknown key":
        d["run"]["colour"] = "red"
    elif change == "bad status":
        d["run"]["status"] = "done"
    elif change == "string number":
        d["requests"][2]["t_send"] = "0.2"
    elif change == "bad token source":
        d["requests"][1]["token_source"] = "vibes"
    elif change == "chunk tokens mismatch":
        d["requests"][0]["chunk_tokens"] = [1]
    elif change == "bad telemetry":
        d["telemetry"][3]["value"] = None
    elif change == "bad date":
        d["run"]["created_at"] = "yesterday"
    elif change == "bad id":
        d["run"]["id"] = "../../etc"
    elif change == "negative index":
        d["requests"][1]["index"] = -1
    elif change == "duplicate index":
        d["requests"][2]["index"] = d["requests"][0]["index"]
    elif change == "negative run duration":
        d["run"]["duration_s"] = -61.2
    elif change == "negative ttft":
        d["requests"][1]["t_first"] = d["requests"][1]["t_send"] - 0.01
    elif change == "negative e2e":
        d["requests"][2]["t_end"] = d["requests"][2]["t_send"] - 1.0
    elif change == "chunks out of order":
        d["requests"][0]["chunk_times"][2] = d["requests"][0]["chunk_times"][1] - 0.001
    elif change == "negative count":
        d["requests"][0]["output_tokens"] = -4
    elif change == "NUL in label":
        d["run"]["label"] = "nightly\x00"
    return d


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ("future version", "version 2, written by a newer gpuledger"),
        ("zero version", "\"version\" is 0"),
        ("wrong format", "not a gpuledger run export"),
        ("not an object", "expected a JSON object"),
        ("no run", "run: Field required"),
        ("unknown key", "run.colour: Extra inputs are not permitted"),
        ("bad status", "run.status"),
        ("string number", "requests[2].t_send: Input should be a valid number"),
        ("bad token source", "requests[1].token_source"),
        ("chunk tokens mismatch", "1 chunk_tokens for 4 chunk_times"),
        ("bad telemetry", "telemetry[3].value"),
        ("bad date", "run.created_at"),
        ("bad id", "invalid run id"),
        ("negative index", "requests[1].index: Input should be greater than or equal to 0"),
        ("duplicate index", "requests[2].index 0 is also the index of requests[0]"),
        ("negative run duration", "run.duration_s: Input should be greater than or equal to 0"),
        ("negative ttft", "requests[1]: t_first 0.09"),
        ("negative e2e", "requests[2]: t_end -0.8 is before t_send 0.2 (a negative E2E)"),
        ("chunks out of order", "requests[0]: chunk_times[2] 0.059"),
        ("negative count", "requests[0].output_tokens: Input should be greater than or equal to 0"),
        ("NUL in label", "label contains a NUL character"),
    ],
)
def test_importing_a_malformed_or_future_file_exits_4_and_changes_nothing(
    sqlite_store: Store, change: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _refused_import_changes_nothing(sqlite_store, change, said, tmp_path, capsys)


@pytest.mark.parametrize("change", ["future version", "string number"])
def test_a_refused_import_changes_nothing_on_either_backend(
    store: Store, change: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    said = {"future version": "newer gpuledger", "string number": "requests[2].t_send"}[change]
    _refused_import_changes_nothing(store, change, said, tmp_path, capsys)


def _refused_import_changes_nothing(
    store: Store, change: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    survivor = store.create_run(make_run(label="already here"))
    store.add_requests(survivor, [make_request(0)])
    doc = _good_doc(store)
    before = _snapshot(store)
    with pytest.raises(InvalidInputError):
        store.import_run(_broken(doc, change))
    path = tmp_path / "run.json"
    path.write_bytes(orjson.dumps(_broken(doc, change)))
    code, out, err = _cli(capsys, "import", str(path), "--db", store_url(store))
    assert (code, out) == (4, "")
    assert said in err.splitlines()[0], err
    assert _snapshot(store) == before


def test_importing_a_file_that_is_not_json_or_missing_changes_nothing(
    sqlite_store: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = sqlite_store
    store.create_run(make_run())
    before = _snapshot(store)
    bad = tmp_path / "run.json"
    bad.write_text('{"format": "gpuledger-run", "version": 1, "run": {')
    code, out, err = _cli(capsys, "import", str(bad), "--db", store_url(store))
    assert (code, out) == (4, "") and "is not valid JSON" in err.splitlines()[0]
    code, out, err = _cli(capsys, "import", str(tmp_path / "nope.json"), "--db", store_url(store))
    assert (code, out) == (3, "") and "no such file" in err.splitlines()[0]
    assert _snapshot(store) == before


def test_importing_a_run_whose_id_is_taken_changes_nothing_unless_asked_for_a_new_id(
    store: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = store.create_run(make_run(status="complete"))
    store.add_requests(run_id, [make_request(i) for i in range(2)])
    doc = store.export_run(run_id)
    store.update_run(run_id, label="edited here")
    before = _snapshot(store)
    with pytest.raises(InvalidInputError, match="already in"):
        store.import_run(doc)
    assert _snapshot(store) == before
    path = tmp_path / "run.json"
    path.write_bytes(orjson.dumps(doc))
    code, out, err = _cli(capsys, "import", str(path), "--db", store_url(store))
    assert (code, out) == (4, "")
    assert "--new-id" in err
    code, out, _ = _cli(capsys, "import", str(path), "--new-id", "--json", "--db", store_url(store))
    assert code == 0
    new_id = orjson.loads(out)["imported"]
    assert new_id != run_id
    assert store.get_requests(new_id) == store.get_requests(run_id)
    assert store.get_run(run_id).label == "edited here"


_FAIL_TELEMETRY_INSERTS = {
    "sqlite": [
        "CREATE TRIGGER fail_telemetry BEFORE INSERT ON telemetry BEGIN SELECT RAISE(ABORT, 'disk full'); END"
    ],
    "postgresql": [
        "CREATE FUNCTION fail_telemetry() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'disk full'; END $$",
        "CREATE TRIGGER fail_telemetry BEFORE INSERT ON telemetry FOR EACH ROW "
        "EXECUTE FUNCTION fail_telemetry()",
    ],
}


def test_a_database_failure_halfway_through_an_import_leaves_no_trace(store: Store, db_url: str) -> None:
    doc = _good_doc(store)
    # The database itself refuses the telemetry rows, after the run and its requests were inserted.
    engine = sa.create_engine(db_url)
    with engine.begin() as conn:
        for statement in _FAIL_TELEMETRY_INSERTS[engine.dialect.name]:
            conn.execute(sa.text(statement))
    engine.dispose()
    with pytest.raises(StoreError, match="disk full"):
        store.import_run(doc)
    with pytest.raises(NotFoundError):
        store.get_run(doc["run"]["id"])
    assert store.list_runs() == []
    engine = sa.create_engine(db_url)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM requests")).scalar_one() == 0
    engine.dispose()


def test_numbers_too_large_for_the_store_are_refused_before_writing(sqlite_store: Store) -> None:
    doc = _good_doc(sqlite_store)
    doc["requests"][1]["output_tokens"] = 2**40
    with pytest.raises(InvalidInputError, match=r"requests\[1\].output_tokens"):
        sqlite_store.import_run(doc)
    assert sqlite_store.list_runs() == []


@pytest.mark.postgres
def test_a_sql_ascii_postgresql_database_stores_and_reads_text(pg_url: str) -> None:
    """A cluster made without a UTF-8 locale has SQL_ASCII databases, where psycopg hands back bytes: the
    store asks for UTF-8 on its connections, so a run's texts (a label in any script) read back as text."""
    import secrets

    import psycopg

    name = f"gl_ascii_{secrets.token_hex(6)}"
    admin = sa.make_url(pg_url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True, connect_timeout=10) as conn:
        conn.execute(f"CREATE DATABASE \"{name}\" ENCODING 'SQL_ASCII' TEMPLATE template0")
    try:
        url = sa.make_url(pg_url).set(database=name).render_as_string(hide_password=False)
        with open_store(url) as store:
            run_id = store.create_run(make_run(label="H200 vs MI300X — 推理成本"))
            assert store.get_run(run_id).label == "H200 vs MI300X — 推理成本"
    finally:
        with psycopg.connect(admin, autocommit=True, connect_timeout=10) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
