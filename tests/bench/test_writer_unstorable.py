"""The store writer never dies silently (issue 16, items 1 and 12).

A request with a value the store cannot keep (10¹² tokens from a hostile server's usage) is stored as
failed with the reason, and the other requests of its batch are stored as they are; anything else that
stops the writer is the run's failure, raised by ``finish`` (exit 5), never a traceback on a thread. A run
whose requests all failed is stored ``failed``; ``gpuledger bench`` then exits 6 naming the first error.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from stream_server import Scenario, StreamServer

from gpuledger.bench.writer import RunWriter
from gpuledger.cli.main import main
from gpuledger.errors import StoreError
from gpuledger.records import RequestRecord, RunInfo
from gpuledger.store import Store, open_store


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A store on each backend (PostgreSQL: the test server of tests/conftest.py)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'results.sqlite'}"
    else:
        url = request.getfixturevalue("pg_fresh_url")
    st = open_store(url)
    yield st
    st.close()


def finished(i: int, **changes: Any) -> RequestRecord:
    """Request ``i`` as an engine reports it: 4 chunks of one token, server usage counts."""
    t = 0.01 * i
    times = [t + 0.02 + 0.001 * k for k in range(4)]
    rec = RequestRecord(
        index=i, t_send=t, t_first=times[0], t_end=times[-1], chunk_times=times, input_tokens=12,
        output_tokens=4, token_source="server_usage", requested_output_tokens=4, output_chars=16,
    )
    return replace(rec, **changes)


HOSTILE = {"output_tokens": 10**12, "chunk_tokens": [1, 1, 1, 10**12 - 3]}


def test_a_request_with_counts_the_store_cannot_keep_is_stored_as_failed_and_the_rest_are_stored(
    any_store: Store,
) -> None:
    said: list[str] = []
    w = RunWriter(any_store, RunInfo(id="", engine="openai"), telemetry=False, on_warning=said.append)
    run_id = w.start()
    for i in range(40):  # added at once: the bad ones share their batches with good ones
        w.add(finished(i, **HOSTILE) if i in (5, 17) else finished(i))
    info = w.finish()

    stored = any_store.get_requests(run_id)
    assert [r.index for r in stored] == list(range(40))
    bad = {r.index: r for r in stored if r.error}
    assert set(bad) == {5, 17}
    for r in bad.values():
        assert r.error is not None
        assert r.error.startswith("values the store cannot keep: output_tokens 1000000000000 is outside 0")
        assert "chunk_tokens" in r.error
        assert (r.output_tokens, r.chunk_tokens) == (None, None)
        assert r.chunk_times == finished(r.index).chunk_times  # what could be kept is kept
    assert all(r == finished(r.index) for r in stored if r.index not in bad)
    assert info.status == "complete" and info.num_requests == 40
    assert info.summary is not None
    assert info.summary.num_failed == 2 and info.summary.output_tokens_total == 38 * 4
    assert info.client["store"]["stored_as_failed"] == 2
    assert any("2 request(s) stored as failed" in w for w in info.client["warnings"])
    assert len(said) == 1
    assert said[0].startswith("request 5 is stored as failed: values the store cannot keep: output_tokens")


def test_the_largest_count_a_server_could_send_does_not_leave_the_run_running(any_store: Store) -> None:
    w = RunWriter(any_store, RunInfo(id="", engine="openai"), telemetry=False)
    run_id = w.start()
    w.add(finished(0))
    w.add(finished(1, output_tokens=2**63 - 1, input_tokens=-7))
    info = w.finish()
    assert info.status == "complete"
    assert any_store.get_run(run_id).status == "complete"
    (failed,) = [r for r in any_store.get_requests(run_id) if r.error]
    assert failed.error is not None and "input_tokens -7 is outside 0" in failed.error
    assert failed.input_tokens is None and failed.output_tokens is None


class _BrokenOnce:
    """A real store whose second request write raises what no store error covers (a driver bug)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._writes = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def add_requests(
        self, run_id: str, records: list[RequestRecord], *, lock_wait_s: float | None = None
    ) -> None:
        self._writes += 1
        if self._writes == 2:
            raise OverflowError("signed integer is greater than maximum")
        self._store.add_requests(run_id, records, lock_wait_s=lock_wait_s)


def test_any_other_failure_of_the_writer_is_the_runs_failure_raised_by_finish(
    any_store: Store, capfd: pytest.CaptureFixture[str]
) -> None:
    w = RunWriter(_BrokenOnce(any_store), RunInfo(id="", engine="openai"), telemetry=False)  # type: ignore[arg-type]
    run_id = w.start()
    w.add(finished(0))
    deadline = time.monotonic() + 10
    while any_store.get_run(run_id).num_requests < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    w.add(finished(1))
    while w.failed is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert w.failed is not None  # the runner stops the run on this
    w.add(finished(2))
    with pytest.raises(StoreError) as caught:
        w.finish()
    message = caught.value.message
    assert message.startswith("the store writer stopped on an unexpected error: OverflowError: signed")
    assert "is stored as incomplete with 1 of 3 finished requests saved" in message
    assert any_store.get_run(run_id).status == "incomplete"
    assert "Traceback" not in capfd.readouterr().err


def test_a_request_without_a_valid_index_cannot_be_stored_and_fails_the_run(any_store: Store) -> None:
    w = RunWriter(any_store, RunInfo(id="", engine="openai"), telemetry=False)
    run_id = w.start()
    w.add(finished(0))
    w.add(finished(1, index=-1))
    with pytest.raises(StoreError, match=r"a finished request could not be stored: request -1 cannot be"):
        w.finish()
    assert any_store.get_run(run_id).status == "incomplete"


def test_a_run_whose_requests_all_failed_is_stored_as_failed(any_store: Store) -> None:
    w = RunWriter(any_store, RunInfo(id="", engine="openai"), telemetry=False)
    w.start()
    for i in range(3):
        w.add(finished(i, error="HTTP 500: internal error", output_tokens=None, chunk_times=[], t_first=None))
    assert w.finish().status == "failed"
    w = RunWriter(any_store, RunInfo(id="", engine="openai"), telemetry=False)
    w.start()
    w.add(finished(0, error="HTTP 500: internal error"))
    w.add(finished(1))
    assert w.finish().status == "complete"  # some failed: the run is complete, its error_rate says so
    w = RunWriter(any_store, RunInfo(id="", engine="openai"), telemetry=False)
    w.start()
    w.add(finished(0, error="HTTP 500: internal error"))
    assert w.finish("incomplete").status == "incomplete"  # interrupted stays interrupted


Serve = Callable[..., StreamServer]


def test_bench_whose_requests_all_fail_exits_6_naming_the_first_error_and_stores_a_failed_run(
    serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    srv = serve(Scenario(identity="vllm", faults={k: "http_500" for k in range(5)}))
    code = main(["bench", "--no-telemetry", "--no-progress", "--json", "--base-url", srv.url,
                 "--num-requests", "5", "--concurrency", "1", "--warmup", "0", "--output-len", "4"])
    out, err = capsys.readouterr()
    assert code == 6, err
    doc = json.loads(out)  # the run is still printed, as for any run that was stored
    assert doc["status"] == "failed" and doc["summary"]["num_failed"] == 5
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1
    assert lines[0].startswith(f"error: run {doc['id']}: all 5 requests failed; the first: HTTP 500")
    with open_store(None) as st:
        assert st.get_run(doc["id"]).status == "failed"
