"""``gpuledger matrix PLAN --backend slurm`` on a real single-node Slurm (Debian's slurmctld, slurmd and munge
on 127.0.0.1, started by this module: tests/support/slurm.py), against programmable loopback servers: a
2 × 2 plan to 4 stored runs in one store (SQLite on this node, PostgreSQL when the suite has one), resume
idempotent, failed cells reported with their Slurm job and log, Ctrl-C cancelling the pending tasks, and
the store's password kept out of every file Slurm and submitit write.

Without slurmctld / munge installed, or not as root, these tests skip, loudly; under CI=true they fail."""

from __future__ import annotations

import base64
import json
import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
import sqlalchemy as sa
import yaml
from stream_server import Scenario, StreamServer

from gpuledger.cli.main import main
from gpuledger.store import open_store
from support.slurm import PARTITION, SlurmCluster, missing

Serve = Callable[..., StreamServer]


def _unavailable(reason: str) -> NoReturn:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"Slurm matrix tests cannot run under CI=true: {reason}")
    pytest.skip(f"Slurm matrix tests SKIPPED: {reason}")


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """A controller and a node on 127.0.0.1 for the session (SLURM_CONF set while it runs), stopped by
    pid at the end."""
    why = missing()
    if why is not None:
        _unavailable(why)
    cluster = SlurmCluster(Path(tempfile.mkdtemp(prefix="gpuledger-slurm-")))
    before = os.environ.get("SLURM_CONF")
    try:
        cluster.start()
    except Exception as exc:
        tail = cluster.log_tail()
        cluster.stop()
        _unavailable(f"could not start Slurm: {exc}\n{tail}")
    os.environ["SLURM_CONF"] = str(cluster.conf)
    try:
        yield cluster
    finally:
        if before is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = before
        cluster.stop()


def plan_file(tmp_path: Path, urls: dict[str, str], *, slurm: dict[str, Any] | None = None,
              concurrency: list[int] | None = None, **bench: Any) -> Path:
    settings = {"dataset": "random", "input_len": 8, "output_len": 8, "num_requests": 4, "warmup": 0,
                "telemetry": False, **bench}
    plan = {
        "name": "slurm",
        "bench": settings,
        "matrix": {"target": [{"name": n, "base_url": u, "model": "test-model", "profile": "cpu-cloud"}
                              for n, u in urls.items()], "concurrency": concurrency or [1, 2]},
        "slurm": {"partition": PARTITION, "time_limit_min": 5, "folder": str(tmp_path / "jobs"),
                  **(slurm or {})},
    }
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return path


def run(capsys: pytest.CaptureFixture[str], *args: str, code: int = 0) -> dict[str, Any]:
    got = main([*args, "--json"])
    out = capsys.readouterr()
    assert got == code, out.err
    doc: dict[str, Any] = json.loads(out.out) if out.out.strip() else {}
    doc["stderr"] = out.err
    return doc


def test_a_2x2_plan_runs_as_slurm_job_arrays_into_one_store_and_resume_submits_nothing(
        slurm_cluster: SlurmCluster, serve: Serve, db_url: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    a, b = serve(Scenario(itl_s=0.001)), serve(Scenario(itl_s=0.001))
    # Target a runs on its own node list: its cells are an array of their own.
    plan = plan_file(tmp_path, {"a": a.url, "b": b.url}, slurm={"targets": {"a": {"nodelist": "localhost"}}})
    dry = run(capsys, "matrix", str(plan), "--backend", "slurm", "--dry-run")
    assert [(x["targets"], x["runs"]) for x in dry["arrays"]] == [(["a"], 2), (["b"], 2)]
    assert "--nodelist=localhost" in dry["arrays"][0]["sbatch"]
    assert {"--array=0-1%2", f"--partition={PARTITION}", "--time=5"} <= set(dry["arrays"][1]["sbatch"])

    done = run(capsys, "matrix", str(plan), "--backend", "slurm", "--db", db_url)
    matrix_id = done["matrix_id"]
    assert done["counts"] == {"complete": 4, "failed": 0, "incomplete": 0, "skipped": 0}, done["stderr"]
    assert ("a SQLite store" in done["stderr"]) == db_url.startswith("sqlite")
    jobs = {o["key"]: o["slurm"]["job_id"] for o in done["outcomes"]}
    assert len({j.split("_")[0] for j in jobs.values()}) == 2  # two arrays
    with open_store(db_url) as store:
        runs = store.list_runs()
        assert sorted(r.workload["matrix"]["cell"] for r in runs) == sorted(
            f"target={t},concurrency={c}" for t in "ab" for c in (1, 2))
        assert {r.status for r in runs} == {"complete"}
        assert {r.workload["matrix"]["id"] for r in runs} == {matrix_id}
        assert {c.status for c in store.matrix_cells(matrix_id)} == {"complete"}
        assert store.get_matrix(matrix_id).status == "finished"
    sent = a.generation_requests + b.generation_requests
    assert sent == 4 * 4

    again = run(capsys, "matrix", str(plan), "--backend", "slurm", "--db", db_url, "--resume", matrix_id)
    assert again["outcomes"] == [] and again["already_complete"] == 4 and again["resumed"] is True
    assert a.generation_requests + b.generation_requests == sent
    with open_store(db_url) as store:
        assert len(store.list_runs()) == 4
    report = run(capsys, "report", "--matrix", matrix_id, "--db", db_url)
    assert {c["key"]: c["statuses"] for c in report["cells"]} == {
        f"target={t},concurrency={c}": {"complete": 1} for t in "ab" for c in (1, 2)}


def test_failed_cells_are_reported_with_their_slurm_job_and_log_and_the_others_complete(
        slurm_cluster: SlurmCluster, serve: Serve, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    a, gone = serve(Scenario()), serve(Scenario())
    gone.stop()
    plan = plan_file(tmp_path, {"a": a.url, "gone": gone.url}, concurrency=[1])
    done = run(capsys, "matrix", str(plan), "--backend", "slurm", code=6)
    err = " ".join(done["stderr"].split())
    assert "failed: target=gone,concurrency=1 #1: cannot reach the inference server at http://127.0.0.1:" \
        in err
    failed = next(o for o in done["outcomes"] if o["status"] == "failed")
    assert f"(Slurm job {failed['slurm']['job_id']}, log {failed['slurm']['log']})" in err
    assert Path(failed["slurm"]["log"]).is_file()
    assert done["counts"]["complete"] == 1

    # A task that cannot even start its cell (no such Python on the node): failed, with its log's words.
    broken = plan_file(tmp_path, {"a": a.url}, concurrency=[1],
                       slurm={"python": "/nonexistent/bin/python", "result_wait_s": 1})
    done = run(capsys, "matrix", str(broken), "--backend", "slurm", code=6)
    (out,) = done["outcomes"]
    assert out["status"] == "failed" and "without a result" in out["reason"]
    assert out["reason"].startswith(f"Slurm task {out['slurm']['job_id']} ended FAILED")
    assert any("/nonexistent/bin/python" in line for line in out["slurm"]["log_tail"]), out
    assert "| " in done["stderr"]  # the log's tail, under the failed line
    with open_store(None) as store:
        (cell,) = store.matrix_cells(done["matrix_id"])
    assert cell.status == "failed" and cell.reason == out["reason"]


def test_ctrl_c_cancels_the_pending_tasks_and_the_running_cell_ends_incomplete_then_resume_finishes(
        slurm_cluster: SlurmCluster, serve: Serve, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    slow = serve(Scenario(itl_s=0.05))
    plan = plan_file(tmp_path, {"a": slow.url, "b": slow.url}, num_requests=6)

    def interrupt_once_sending() -> None:
        deadline = time.monotonic() + 60
        while slow.generation_requests < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_once_sending, daemon=True).start()
    stopped = run(capsys, "matrix", str(plan), "--backend", "slurm", "--max-parallel", "1", code=130)
    assert "resume with: gpuledger matrix" in stopped["stderr"]
    with open_store(None) as store:
        (only,) = store.list_runs()
        matrix_id = only.workload["matrix"]["id"]
        cells = {c.key: c.status for c in store.matrix_cells(matrix_id)}
        assert store.get_matrix(matrix_id).status == "interrupted"
    assert only.status == "incomplete" and only.summary is not None and only.summary.interrupted is not None
    assert sorted(cells.values()) == ["incomplete", "pending", "pending", "pending"]
    jobs = json.loads((tmp_path / "jobs" / matrix_id / "jobs.json").read_text())["arrays"]
    queue = slurm_cluster.squeue(jobs)  # the pending rest of the array is cancelled (the running task ends)
    assert "CANCELLED" in queue.values() and "PENDING" not in queue.values(), queue

    resumed = run(capsys, "matrix", str(plan), "--backend", "slurm", "--resume", matrix_id)
    assert resumed["counts"]["complete"] == 4 and resumed["already_complete"] == 0
    with open_store(None) as store:
        runs = store.list_runs()
    assert len(runs) == 4 and {r.status for r in runs} == {"complete"}  # the incomplete run was replaced
    assert only.id not in {r.id for r in runs}


def test_the_stores_password_and_a_servers_credentials_reach_the_tasks_but_no_file(
        slurm_cluster: SlurmCluster, serve: Serve, pg_cluster: Any, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The PostgreSQL URL with its password and a server URL with user:password: the tasks use both (the
    runs are stored, the server saw the credentials), and no file under the Slurm folder holds either."""
    password = sa.make_url(pg_cluster.url).password
    assert isinstance(password, str) and password
    db = _fresh_database(pg_cluster.url)
    srv = serve(Scenario())
    with_creds = srv.url.replace("http://", "http://bench:s3cret-pw@")
    plan = plan_file(tmp_path, {"a": with_creds}, concurrency=[1])
    done = run(capsys, "matrix", str(plan), "--backend", "slurm", "--db", db)
    assert done["counts"]["complete"] == 1, done["stderr"]
    expected = "Basic " + base64.b64encode(b"bench:s3cret-pw").decode()
    assert {r.headers.get("Authorization") for r in srv.requests if "completions" in r.path} == {expected}
    written = [p for p in (tmp_path / "jobs").rglob("*") if p.is_file()]
    assert any(p.name.endswith("_submission.sh") for p in written)
    assert any(p.suffix == ".pkl" for p in written)
    for path in written:
        data = path.read_bytes()
        assert password.encode() not in data and b"s3cret-pw" not in data, path
    assert password not in done["stderr"] and "s3cret-pw" not in json.dumps(done)
    with open_store(db) as store:
        (stored,) = store.list_runs()
    assert stored.base_url is not None and "s3cret-pw" not in stored.base_url
    assert "s3cret-pw" not in stored.config.model_dump_json()


def _fresh_database(admin_url: str) -> str:
    """A new database on the session's password-auth PostgreSQL cluster, its URL with the password."""
    import psycopg

    url = sa.make_url(admin_url)
    name = f"gl_slurm_{os.getpid()}_{time.monotonic_ns()}"
    libpq = url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(libpq, autocommit=True, connect_timeout=10) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return url.set(database=name).render_as_string(hide_password=False)


def test_a_slurm_that_does_not_answer_is_one_line_naming_the_command(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Slurm's commands installed, no controller at the configured address: exit 8, one line, nothing
    created in the store."""
    why = missing()
    if why is not None and "not installed" in why:
        _unavailable(why)
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=none\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort=9\nMessageTimeout=1\n"
                    "NodeName=localhost CPUs=1\nPartitionName=p Nodes=localhost Default=YES\n")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    plan = plan_file(tmp_path, {"a": "http://127.0.0.1:9"})
    assert main(["matrix", str(plan), "--backend", "slurm"]) == 8
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("warning:")]
    assert lines[0].startswith("error: Slurm does not answer: `sinfo -h -o %P` "), err
    with open_store(None) as store:
        assert store.list_runs() == []


def test_without_slurms_commands_the_backend_is_a_missing_dependency(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    plan = plan_file(tmp_path, {"a": "http://127.0.0.1:9"})
    assert main(["matrix", str(plan), "--backend", "slurm"]) == 7
    assert "sbatch, srun, squeue, scancel, sinfo are not on PATH" in " ".join(capsys.readouterr().err.split())
