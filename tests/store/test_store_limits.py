"""What the store keeps, the same on SQLite and PostgreSQL (issue 16, items 1 and 3): counts are integers in
0 … 2³¹−1 (PostgreSQL's ``integer``; SQLite is held to it by the store), times are finite, texts hold no
NUL. A record outside that is refused by name before anything of its batch reaches the database; a lock
held by another writer for longer than the write may wait is a StoreLockedError that changes nothing."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import pytest
import sqlalchemy as sa
from store_factories import make_request, make_run

from gpuledger.errors import InvalidInputError
from gpuledger.store import Store
from gpuledger.store.engine import StoreLockedError
from gpuledger.store.exchange import INT_MAX

BAD_VALUES: list[tuple[str, dict[str, Any]]] = [
    ("output_tokens", {"output_tokens": 10**12}),  # what a hostile server's usage said
    ("output_tokens", {"output_tokens": -3}),
    ("output_tokens", {"output_tokens": 2**31}),
    ("input_tokens", {"input_tokens": 2**63 - 1}),
    ("requested_output_tokens", {"requested_output_tokens": -1}),
    ("output_chars", {"output_chars": -5}),
    ("chunk_tokens", {"chunk_tokens": [1, 10**12, 1, 1]}),
    ("chunk_tokens", {"chunk_tokens": [1, -1, 1, 1]}),
    ("chunk_tokens", {"chunk_tokens": [1, 1]}),
    ("t_first", {"t_first": math.nan}),
    ("chunk_times", {"chunk_times": [0.15, math.inf, 0.17, 0.18]}),
    ("error", {"error": "HTTP 500: \x00\x00"}),
    ("error", {"error": "broken \ud800 surrogate"}),
    ("server_timings", {"server_timings": {"eval_count": 2**70}}),
    ("index", {"index": -1}),
    ("index", {"index": 2**31}),
]


@pytest.mark.parametrize(("field", "change"), BAD_VALUES, ids=[f"{f}={v}" for f, v in BAD_VALUES])
def test_a_value_the_store_cannot_keep_is_refused_by_name_and_nothing_of_its_batch_is_written(
    store: Store, field: str, change: dict[str, Any]
) -> None:
    run_id = store.create_run(make_run())
    batch = [make_request(0), replace(make_request(1), **change), make_request(2)]
    with pytest.raises(InvalidInputError, match=rf"^request {batch[1].index}: {field} "):
        store.add_requests(run_id, batch)
    assert store.get_requests(run_id) == []
    assert store.get_run(run_id).num_requests == 0
    store.add_requests(run_id, [batch[0], batch[2]])  # the batch without it is stored as usual
    assert [r.index for r in store.get_requests(run_id)] == [0, 2]


def test_the_largest_counts_the_store_keeps_round_trip_and_import_back(store: Store) -> None:
    run_id = store.create_run(make_run(status="complete"))
    biggest = replace(
        make_request(0), input_tokens=INT_MAX, output_tokens=INT_MAX, requested_output_tokens=INT_MAX,
        output_chars=INT_MAX, chunk_tokens=[INT_MAX, 0, 1, INT_MAX], index=INT_MAX,
    )
    store.add_requests(run_id, [biggest, make_request(1)])
    assert store.get_requests(run_id)[-1] == biggest
    doc = store.export_run(run_id)
    copy = store.import_run(doc, new_id=True)  # what one store exports, the other imports
    assert store.get_requests(copy) == store.get_requests(run_id)


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"num_requests": -1}, "num_requests -1 is outside 0"),
        ({"num_requests": 2**31}, "num_requests 2147483648 is outside 0"),
        ({"duration_s": -2.5}, "duration_s -2.5 is negative"),
        ({"duration_s": math.inf}, "duration_s is inf, not a finite number"),
        ({"label": "night\x00ly"}, "label contains a NUL character"),
        ({"model": 42}, "model is int, not text"),
    ],
)
def test_run_fields_the_store_cannot_keep_are_refused_by_name(
    store: Store, fields: dict[str, Any], said: str
) -> None:
    run_id = store.create_run(make_run())
    with pytest.raises(InvalidInputError, match=said):
        store.update_run(run_id, **fields)
    with pytest.raises(InvalidInputError, match=said):
        store.create_run(make_run(**fields))
    assert [r.id for r in store.list_runs()] == [run_id]


# ---- another writer's lock ----------------------------------------------------------------------


@contextmanager
def locked(db_url: str) -> Iterator[None]:
    """Hold the store's write lock from another connection: SQLite BEGIN EXCLUSIVE, PostgreSQL an
    EXCLUSIVE lock on the requests table (reads go on, writes wait)."""
    engine = sa.create_engine(db_url, connect_args={"timeout": 0} if db_url.startswith("sqlite") else {})
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            conn.exec_driver_sql("BEGIN EXCLUSIVE")
        else:
            conn.exec_driver_sql("BEGIN")
            conn.exec_driver_sql("LOCK TABLE requests IN EXCLUSIVE MODE")
        try:
            yield
        finally:
            conn.exec_driver_sql("ROLLBACK")
    engine.dispose()


def test_a_write_gives_up_after_its_lock_wait_with_a_store_locked_error_and_changes_nothing(
    store: Store, db_url: str
) -> None:
    run_id = store.create_run(make_run())
    with locked(db_url):
        t0 = time.monotonic()
        with pytest.raises(StoreLockedError) as caught:
            store.add_requests(run_id, [make_request(0)], lock_wait_s=0.3)
        waited = time.monotonic() - t0
        assert store.get_requests(run_id) == []  # reads are not blocked
    assert 0.25 <= waited < 5.0
    message = caught.value.message
    assert message.startswith(f"cannot write to store {store.url} while saving requests: ")
    assert "locked by another process for 0.3 s" in message or "lock for 0.3 s" in message
    store.add_requests(run_id, [make_request(0)])  # once released, the same write goes through
    assert store.get_run(run_id).num_requests == 1


def test_without_a_lock_wait_a_write_waits_for_the_lock_to_be_released(store: Store, db_url: str) -> None:
    run_id = store.create_run(make_run())
    done = threading.Event()
    with locked(db_url):
        writer = threading.Thread(target=lambda: (store.add_requests(run_id, [make_request(0)]), done.set()))
        writer.start()
        time.sleep(0.5)
        assert not done.is_set()
    writer.join(timeout=30)
    assert done.is_set() and store.get_run(run_id).num_requests == 1
