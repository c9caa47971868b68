"""The store keeps a matrix's cells under their natural key (matrix id, cell key, repeat), unique: a retried
or resumed cell updates its row and replaces its unfinished run, it never adds another (revision 0003)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from alembic import command

from gpuledger.records import RequestRecord, RunInfo
from gpuledger.store import open_store
from gpuledger.store.engine import make_engine, resolve_url
from gpuledger.store.migrate import HEAD, alembic_config, current_revision, upgrade

CREATED = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
CELLS = [("target=a,concurrency=1", 1, {"values": {"target": "a"}}),
         ("target=a,concurrency=1", 2, {"values": {"target": "a"}})]


def _engine(db_url: str) -> tuple[sa.Engine, sa.URL]:
    url, _ = resolve_url(db_url)
    return make_engine(url), url


def _request(i: int) -> RequestRecord:
    t = 0.1 * i
    return RequestRecord(i, t, t + 0.05, t + 0.07, [t + 0.05, t + 0.07], None, 16, 2, "server_usage", 2)


def test_a_store_with_runs_at_revision_0002_upgrades_and_keeps_them(db_url: str) -> None:
    engine, url = _engine(db_url)
    upgrade(engine, url, "0002")
    with engine.begin() as conn:
        conn.execute(
            sa.text("INSERT INTO runs (id, label, created_at, status, engine, model, unit, workload, "
                    "config, environment, server, summary, telemetry_summary, client, num_requests, "
                    "updated_at, env_hash) VALUES ('before03', 'old', :c, 'complete', 'openai', 'm', "
                    "'token', :j, :j, :env, :j, :j, :l, :j, 0, :c, 'h-1')").bindparams(
                sa.bindparam("c", type_=sa.DateTime(timezone=True)),
                *(sa.bindparam(k, type_=sa.JSON()) for k in ("j", "env", "l"))),
            {"c": CREATED, "j": {}, "env": {"hash": "h-1"}, "l": []},
        )
    engine.dispose()
    with open_store(db_url) as store:
        run = store.get_run("before03")
        assert (run.label, run.status, store.env_hash("before03")) == ("old", "complete", "h-1")
        store.create_matrix("m-test0001", {"repeat": 2}, "sha256:x", CELLS)
        assert [(c.key, c.repeat, c.status) for c in store.matrix_cells("m-test0001")] == [
            ("target=a,concurrency=1", 1, "pending"), ("target=a,concurrency=1", 2, "pending")]
    engine, _ = _engine(db_url)
    with engine.connect() as conn:
        assert current_revision(conn) == HEAD  # 0003 and every revision after it
    with engine.connect() as conn:
        conn.execution_options(gpuledger_write=True)
        with conn.begin():  # and back: the matrix tables go, the runs stay
            command.downgrade(alembic_config(conn), "0002")
        assert not sa.inspect(conn).has_table("matrix_cells")
    engine.dispose()
    with open_store(db_url) as store:
        assert store.get_run("before03").label == "old"


def test_the_natural_key_of_a_cell_is_unique_in_the_store_itself(db_url: str) -> None:
    with open_store(db_url) as store:
        store.create_matrix("m-test0002", {}, "sha256:x", CELLS[:1])
    engine, _ = _engine(db_url)
    with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO matrix_cells (matrix_id, cell_key, repeat_index, status, "
                             "attempts, params, updated_at) VALUES ('m-test0002', 'target=a,concurrency=1', "
                             "1, 'pending', 0, '{}', :t)").bindparams(
                                 sa.bindparam("t", type_=sa.DateTime(timezone=True))),
                     {"t": CREATED})
    engine.dispose()


def test_a_retried_cell_replaces_its_unfinished_run_and_a_complete_cell_is_never_claimed_again(
        db_url: str) -> None:
    with open_store(db_url) as store:
        store.create_matrix("m-test0003", {}, "sha256:x", CELLS)
        first = store.claim_cell("m-test0003", "target=a,concurrency=1", 1)
        assert first.outcome == "claimed" and first.attempt == 1 and first.run_id
        # The attempt's worker died after its run was created and a request stored.
        store.create_run(RunInfo(id=first.run_id, status="running", engine="openai", model="m"))
        store.add_requests(first.run_id, [_request(0)])
        second = store.claim_cell("m-test0003", "target=a,concurrency=1", 1)
        assert second.outcome == "claimed" and second.attempt == 2 and second.run_id != first.run_id
        assert [r.id for r in store.list_runs()] == []  # the unfinished run is gone, not kept beside
        store.create_run(RunInfo(id=second.run_id, status="complete", engine="openai", model="m"))
        # A late word from the dead attempt changes nothing: it is not the cell's last attempt.
        assert not store.finish_cell("m-test0003", "target=a,concurrency=1", 1, "failed", "died", attempt=1)
        assert store.finish_cell("m-test0003", "target=a,concurrency=1", 1, "complete", attempt=2)
        again = store.claim_cell("m-test0003", "target=a,concurrency=1", 1)
        assert (again.outcome, again.run_id) == ("complete", second.run_id)
        assert not store.finish_cell("m-test0003", "target=a,concurrency=1", 1, "failed", "late")
        (done, pending) = store.matrix_cells("m-test0003")
        assert (done.status, done.attempts, done.run_id) == ("complete", 2, second.run_id)
        assert pending.status == "pending" and [r.id for r in store.list_runs()] == [second.run_id]


def test_a_cell_that_ended_before_its_run_existed_points_at_no_run(db_url: str) -> None:
    with open_store(db_url) as store:
        store.create_matrix("m-test0004", {}, "sha256:x", CELLS[:1])
        claim = store.claim_cell("m-test0004", "target=a,concurrency=1", 1)
        store.finish_cell("m-test0004", "target=a,concurrency=1", 1, "failed", "cannot connect: refused",
                          attempt=claim.attempt)
        (cell,) = store.matrix_cells("m-test0004")
        assert (cell.status, cell.run_id, cell.reason) == ("failed", None, "cannot connect: refused")


def test_a_stopping_matrix_starts_no_cell_and_matrices_are_found_by_prefix(db_url: str) -> None:
    with open_store(db_url) as store:
        store.create_matrix("m-test0005", {"name": "x"}, "sha256:y", CELLS[:1])
        store.set_matrix_status("m-test0005", "stopping")
        assert store.claim_cell("m-test0005", "target=a,concurrency=1", 1).outcome == "stopped"
        rec = store.get_matrix("M-TEST")
        assert (rec.id, rec.status, rec.plan, rec.plan_digest) == ("m-test0005", "stopping", {"name": "x"},
                                                                    "sha256:y")
        with pytest.raises(Exception, match="no matrix"):
            store.get_matrix("m-zzzz")
