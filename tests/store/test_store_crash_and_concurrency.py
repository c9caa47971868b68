"""Crash safety and concurrent writers, with real processes (issue 2, "Done when")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from gpuledger.store import open_store

WRITER = Path(__file__).with_name("writer_process.py")
KILL_AFTER = 40


def _env() -> dict[str, str]:
    src = str(Path(__file__).resolve().parents[2] / "src")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)}


@pytest.mark.slow
def test_a_writer_killed_mid_run_leaves_every_committed_request_and_an_incomplete_run(db_url: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, str(WRITER), db_url, "forever"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
    )
    assert proc.stdout is not None
    try:
        run_id = proc.stdout.readline().strip()
        committed = -1
        while committed < KILL_AFTER:
            line = proc.stdout.readline()
            assert line, f"writer died early: {proc.stderr.read() if proc.stderr else ''}"
            committed = int(line.split()[1])
        # Kill it while it keeps writing: no chance to clean up, possibly mid-transaction.
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        for line in proc.stdout:  # requests whose commit was reported before the kill landed
            committed = int(line.split()[1])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL

    with open_store(db_url) as store:
        run = store.get_run(run_id)
        indexes = [r.index for r in store.get_requests(run_id)]
    assert run.status == "incomplete"
    assert indexes[: committed + 1] == list(range(committed + 1))
    assert len(indexes) in (committed + 1, committed + 2)  # at most the one being committed at the kill
    assert run.num_requests == len(indexes)


@pytest.mark.slow
def test_two_processes_writing_one_store_at_once_lose_nothing(db_url: str, tmp_path: Path) -> None:
    # 2 x 500 single-request transactions on SQLite (the file-locking case); fewer on PostgreSQL.
    n = 500 if db_url.startswith("sqlite") else 100
    barrier = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, str(WRITER), db_url, "count", str(n), str(barrier)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
        )
        for _ in range(2)
    ]
    barrier.touch()  # both start at once, on a store neither has created (or migrated) yet
    results = [p.communicate(timeout=300) for p in procs]
    for p, (_out, err) in zip(procs, results, strict=True):
        assert p.returncode == 0, err
        assert "locked" not in err
    run_ids = [out.strip() for out, _ in results]
    assert len(set(run_ids)) == 2

    with open_store(db_url) as store:
        for run_id in run_ids:
            run = store.get_run(run_id)
            assert (run.status, run.num_requests) == ("complete", n)
            assert [r.index for r in store.get_requests(run_id)] == list(range(n))
            assert len(store.get_telemetry(run_id)) == n
    engine = sa.create_engine(db_url)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM requests")).scalar_one() == 2 * n
    engine.dispose()
