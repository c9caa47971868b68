"""``gpuledger delete`` of a run that is being written — status ``running`` and its writer alive
(``store.liveness``: a process on this host that still exists, or a writer elsewhere that wrote within the
last 10 minutes) — is refused with one line, exit 4, and nothing deleted; ``--force`` deletes it anyway.
A run whose writer is gone (it reads ``incomplete``) is deleted without ``--force``.

The bench whose run is deleted from under it anyway keeps what it measures: its writer stores the run again
under its id and goes on, and the bench ends with one line naming what went with the deletion (exit 5), the
run stored ``incomplete`` with the requests measured after it. Before, it exited 3 and lost everything.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from stream_server import Scenario, StreamServer

from gpuledger.bench.writer import RunWriter
from gpuledger.cli.main import main
from gpuledger.errors import StoreError
from gpuledger.records import RequestRecord, RunInfo
from gpuledger.store import Store, open_store
from gpuledger.store.liveness import RunBeingWritten

REPO = Path(__file__).resolve().parents[2]


def sqlite_path() -> Path:
    return Path(os.environ["GPULEDGER_DB"].removeprefix("sqlite:///"))


def request(i: int) -> RequestRecord:
    return RequestRecord(index=i, t_send=0.01 * i, t_first=0.01 * i + 0.005, t_end=0.01 * i + 0.008,
                         chunk_times=[0.01 * i + 0.005], input_tokens=4, output_tokens=1,
                         token_source="server_usage")


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"never happened: {what}")
        time.sleep(0.05)


# ---- the store ------------------------------------------------------------------------------------------


def test_a_run_whose_writer_is_alive_is_not_deleted_unless_forced(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = store.create_run(RunInfo(id="", engine="openai", model="m"))  # this process writes it
    store.add_requests(run_id, [request(0)])
    with pytest.raises(RunBeingWritten, match=rf"run {run_id} is being written \(process {os.getpid()} "
                                              r"on this host\): not deleted"):
        store.delete_run(run_id)
    assert main(["delete", run_id]) == 4
    err = capsys.readouterr().err
    assert err.startswith(f"error: run {run_id} is being written") and f"delete {run_id} --force" in err
    assert len(store.get_requests(run_id)) == 1  # nothing deleted
    assert main(["delete", run_id, "--force", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"deleted": run_id, "requests": 1}
    assert store.list_runs() == []


def test_a_run_written_from_another_host_a_moment_ago_is_not_deleted(store: Store) -> None:
    run_id = store.create_run(RunInfo(id="", engine="openai", model="m"))
    with sqlite3.connect(sqlite_path()) as db:
        db.execute("UPDATE runs SET writer_host = 'gpu-node-7', writer_pidns = NULL WHERE id = ?", (run_id,))
    with pytest.raises(RunBeingWritten, match=r"host gpu-node-7, last written \d+ s ago"):
        store.delete_run(run_id)
    assert store.delete_run(run_id, force=True) == run_id


def test_a_run_whose_writer_has_exited_is_deleted_without_force(store: Store) -> None:
    made = subprocess.run(
        [sys.executable, "-c", "from gpuledger.store import open_store\n"
         "from gpuledger.records import RunInfo\ns = open_store(None)\n"
         "print(s.create_run(RunInfo(id='', engine='openai', model='m')))\ns.close()"],
        capture_output=True, text=True, check=True, env=os.environ, cwd=REPO, timeout=120,
    )
    run_id = made.stdout.strip()
    assert store.get_run(run_id).status == "incomplete"  # its writer is gone
    assert store.delete_run(run_id) == run_id


# ---- the writer whose run is deleted anyway ----------------------------------------------------------------


def test_a_writer_whose_run_is_deleted_stores_it_again_and_says_what_went_with_it(store: Store) -> None:
    warnings: list[str] = []
    writer = RunWriter(store, RunInfo(id="", engine="openai", model="m", label="kept"), telemetry=False,
                       on_warning=warnings.append)
    run_id = writer.start()
    for i in range(3):
        writer.add(request(i))
    wait_for(lambda: writer.written == 3, "the first 3 requests written")
    store.delete_run(run_id, force=True)
    for i in range(3, 8):
        writer.add(request(i))
    with pytest.raises(StoreError) as exc:
        writer.finish("complete")
    assert exc.value.message == (
        f"run {run_id} was deleted while it was being written (gpuledger delete --force) and stored again "
        f"under its id: the 3 finished requests saved before went with it; run {run_id} is stored as "
        "incomplete with 5 of 8 finished requests saved")
    run = store.get_run(run_id)
    assert (run.status, run.label, run.num_requests) == ("incomplete", "kept", 5)
    assert [r.index for r in store.get_requests(run_id)] == [3, 4, 5, 6, 7]
    assert any("was deleted while it was being written" in w for w in run.client["warnings"])
    assert warnings and "stored again under its id" in warnings[0]


def test_a_run_deleted_after_its_last_request_is_stored_again_by_finish(store: Store) -> None:
    writer = RunWriter(store, RunInfo(id="", engine="openai", model="m"), telemetry=False)
    run_id = writer.start()
    for i in range(2):
        writer.add(request(i))
    wait_for(lambda: writer.written == 2, "both requests written")
    store.delete_run(run_id, force=True)
    with pytest.raises(StoreError, match="the 2 finished requests saved before went with it"):
        writer.finish("complete")
    assert store.get_run(run_id).status == "incomplete" and store.get_requests(run_id) == []


def test_deleting_a_live_bench_is_refused_and_forced_it_keeps_what_it_measures_after(
    serve: Callable[..., StreamServer], capsys: pytest.CaptureFixture[str]
) -> None:
    srv = serve(Scenario(identity="vllm", itl_s=0.02))
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuledger.cli.main", "bench", "--no-telemetry", "--no-progress",
         "--base-url", srv.url, "--num-requests", "60", "--concurrency", "2", "--output-len", "10",
         "--warmup", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"}, cwd=REPO,
    )
    try:
        with open_store(None) as st:
            def written() -> int:
                runs = st.list_runs()
                return runs[0].num_requests if runs else 0

            wait_for(lambda: written() >= 4 or proc.poll() is not None, "4 requests stored")
            assert proc.poll() is None, proc.communicate()
            (run,) = st.list_runs()
        assert main(["delete", run.id]) == 4
        assert "is being written (process" in capsys.readouterr().err
        assert main(["delete", run.id, "--force"]) == 0
        capsys.readouterr()
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 5, err
    line = " ".join(err.split())
    assert f"run {run.id} was deleted while it was being written (gpuledger delete --force)" in line
    with open_store(None) as st:
        again = st.get_run(run.id)
        kept = st.get_requests(run.id)
    assert again.status == "incomplete" and 0 < len(kept) < 60
    assert f"{len(kept)} of 60 finished requests saved" in line
