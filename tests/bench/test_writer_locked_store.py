"""A store locked by another process loses nothing (issue 16, item 2).

Another process holds the store's write lock (SQLite ``BEGIN EXCLUSIVE``; PostgreSQL an EXCLUSIVE lock on
the requests table) for longer than the store's busy timeout, then lets go. The writer says once what it
waits for, keeps the finished requests in memory (bounded) and retries while the run lasts, so every one is
stored; past the memory bound the run stops with a StoreError naming the lock. SIGTERM stays prompt: the
final flush is bounded, and then the run is saved ``incomplete`` with what was written, or the command
fails with one line when not even that can be written.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from stream_server import Scenario, StreamServer

from gpuledger.bench.writer import INTERRUPTED_FLUSH_S, RunWriter
from gpuledger.cli.main import main
from gpuledger.errors import StoreError
from gpuledger.records import RequestRecord, RunInfo
from gpuledger.store import engine as store_engine
from gpuledger.store import open_store

REPO = Path(__file__).resolve().parents[2]
Serve = Callable[..., StreamServer]

# A second process that takes the store's write lock, says "locked", and holds it until told (stdin).
HOLDER = r"""
import sys
url = sys.argv[1]
if url.startswith("sqlite"):
    import sqlite3
    conn = sqlite3.connect(url.split("///", 1)[1], timeout=30, isolation_level=None)  # waits its turn
    conn.execute("BEGIN EXCLUSIVE")
else:
    import psycopg
    conn = psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"))
    conn.execute("LOCK TABLE requests IN EXCLUSIVE MODE")
print("locked", flush=True)
sys.stdin.readline()
if url.startswith("sqlite"):
    conn.execute("ROLLBACK")
else:
    conn.rollback()
print("released", flush=True)
"""


class LockHolder:
    def __init__(self, url: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, url], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.strip() == "locked", self.proc.stderr.read() if self.proc.stderr else ""

    def release(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.proc.stdin.write("go\n")
            self.proc.stdin.flush()
            assert self.proc.stdout.readline().strip() == "released"
            self.proc.wait(timeout=30)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)


@pytest.fixture
def hold_lock() -> Iterator[Callable[[str], LockHolder]]:
    holders: list[LockHolder] = []

    def start(url: str) -> LockHolder:
        holders.append(LockHolder(url))
        return holders[-1]

    yield start
    for h in holders:
        h.kill()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'results.sqlite'}"
    url: str = request.getfixturevalue("pg_fresh_url")
    return url


@pytest.fixture
def short_busy_timeout(monkeypatch: pytest.MonkeyPatch) -> float:
    """The store's busy timeout made 1 s, so a lock can outlast it in a test of seconds."""
    monkeypatch.setattr(store_engine, "BUSY_TIMEOUT_S", 1.0)
    return 1.0


def finished(i: int) -> RequestRecord:
    t = 0.01 * i
    times = [t + 0.02 + 0.001 * k for k in range(4)]
    return RequestRecord(index=i, t_send=t, t_first=times[0], t_end=times[-1], chunk_times=times,
                         input_tokens=12, output_tokens=4, token_source="server_usage")


def _wait_for(condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_requests_finished_while_another_process_holds_the_lock_are_all_stored_once_it_is_released(
    db_url: str, short_busy_timeout: float, hold_lock: Callable[[str], LockHolder]
) -> None:
    said: list[str] = []
    with open_store(db_url) as store:
        w = RunWriter(store, RunInfo(id="", engine="openai"), telemetry=False, on_warning=said.append)
        run_id = w.start()
        for i in range(20):
            w.add(finished(i))
        _wait_for(lambda: store.get_run(run_id).num_requests == 20)

        holder = hold_lock(db_url)
        t_locked = time.monotonic()
        for i in range(20, 120):  # 3 s of finished requests while the lock is held
            w.add(finished(i))
            time.sleep(0.03)
        assert time.monotonic() - t_locked > 2 * short_busy_timeout
        assert w.failed is None  # the run goes on
        assert store.get_run(run_id).num_requests == 20  # (reads are not blocked)
        holder.release()

        for i in range(120, 140):
            w.add(finished(i))
        info = w.finish()
        assert info.status == "complete" and info.num_requests == 140
        assert [r.index for r in store.get_requests(run_id)] == list(range(140))
    assert len(said) == 1  # said once, while waiting
    assert said[0].startswith("waiting for the store: cannot write to store ")
    assert "finished requests are kept in memory (up to 256 MiB)" in said[0]
    assert info.client["store"]["lock_waits"] == 1
    assert info.client["store"]["lock_waited_s"] >= 2 * short_busy_timeout
    assert any("locked by another process 1 time(s)" in w for w in info.client["warnings"])


def test_past_the_memory_bound_the_run_stops_naming_the_lock_and_keeps_what_it_can_write(
    db_url: str, short_busy_timeout: float, hold_lock: Callable[[str], LockHolder]
) -> None:
    with open_store(db_url) as store:
        w = RunWriter(store, RunInfo(id="", engine="openai"), telemetry=False, backlog_limit_bytes=32 * 1024)
        run_id = w.start()
        holder = hold_lock(db_url)
        added = 0
        deadline = time.monotonic() + 30
        while w.failed is None:  # about 50 requests of 4 chunks fill 32 KiB
            assert time.monotonic() < deadline and added < 5000
            w.add(finished(added))
            added += 1
            time.sleep(0.005)
        failure = w.failed
        assert 40 <= added < 5000
        assert "locked" in failure.message or "lock" in failure.message
        assert "more than the 0.03125 MiB kept: the run was stopped" in failure.message
        holder.release()  # the final flush can write them now
        with pytest.raises(StoreError) as caught:
            w.finish()
        message = caught.value.message
        assert "the run was stopped" in message
        assert f"is stored as incomplete with {added} of {added} finished requests saved" in message
        run = store.get_run(run_id)
        assert run.status == "incomplete" and run.num_requests == added


def _bench(url: str, db: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gpuledger.cli.main", "bench", "--no-telemetry", "--no-progress", "--json",
         "--base-url", url, "--num-requests", "100000", "--concurrency", "2", "--output-len", "4",
         "--warmup", "0", "--db", db],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _stored(db: str) -> int:
    with open_store(db) as st:
        found = st.list_runs()
        return found[0].num_requests if found else 0


@pytest.mark.slow
@pytest.mark.parametrize("released", [False, True], ids=["lock-kept", "lock-released-during-flush"])
def test_sigterm_while_the_store_is_locked_exits_promptly_and_keeps_what_was_written(
    serve: Serve, tmp_path: Path, hold_lock: Callable[[str], LockHolder], released: bool
) -> None:
    srv = serve(Scenario(identity="vllm", itl_s=0.005))
    db = f"sqlite:///{tmp_path / 'results.sqlite'}"
    proc = _bench(srv.url, db)

    def running_and_stored(n: int) -> bool:
        if proc.poll() is not None:
            pytest.fail(f"bench exited early ({proc.returncode}): {proc.communicate()[1]}")
        return _stored(db) >= n

    try:
        _wait_for(lambda: running_and_stored(10), 60)
        holder = hold_lock(db)
        before = _stored(db)
        time.sleep(1.5)  # requests keep finishing, and wait in memory
        t_term = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        if released:
            time.sleep(1.0)
            holder.release()
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - t_term
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert took < INTERRUPTED_FLUSH_S + 5.0, err  # not 40 s
    assert "Traceback" not in err
    assert "waiting for the store: " in err  # said while it waited
    holder.release()
    with open_store(db) as st:
        (run,) = st.list_runs()
        stored = st.get_requests(run.id)
    assert run.status == "incomplete"
    if released:  # the final flush saved every finished request, and the run as interrupted
        assert proc.returncode == 130, err
        doc: dict[str, Any] = json.loads(out)
        assert len(stored) == doc["summary"]["interrupted"]["finished_requests"] > before
    else:  # nothing more could be written: one line naming the lock, exit 5, the run reads incomplete
        assert proc.returncode == 5, err
        assert out == ""
        errors = [line for line in err.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1 and "locked by another process" in errors[0], err
        assert f"run {run.id} could not be finished" in errors[0]
        assert len(stored) == before


def test_bench_against_a_store_locked_mid_run_stores_every_request_the_server_answered(
    serve: Serve, capsys: pytest.CaptureFixture[str], tmp_path: Path, short_busy_timeout: float,
    hold_lock: Callable[[str], LockHolder],
) -> None:
    import threading

    srv = serve(Scenario(identity="vllm", itl_s=0.004))
    db = f"sqlite:///{tmp_path / 'results.sqlite'}"

    def lock_mid_run() -> None:
        _wait_for(lambda: _stored(db) >= 10, 60)
        holder = hold_lock(db)
        time.sleep(3 * short_busy_timeout)
        holder.release()

    locker = threading.Thread(target=lock_mid_run)
    locker.start()
    code = main(["bench", "--no-telemetry", "--no-progress", "--json", "--base-url", srv.url,
                 "--num-requests", "150", "--concurrency", "2", "--output-len", "4", "--warmup", "0",
                 "--db", db])
    locker.join(timeout=60)
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    assert doc["status"] == "complete"
    assert doc["num_requests"] == 150 == srv.generation_requests
    assert err.count("waiting for the store: ") == 1
    with open_store(db) as st:
        assert [r.index for r in st.get_requests(doc["id"])] == list(range(150))
