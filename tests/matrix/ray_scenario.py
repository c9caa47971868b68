"""The matrix on a real Ray cluster, run INSIDE a network namespace that has only loopback (Ray binds the
machine's interface address otherwise): ``unshare -n`` re-executes this script, which starts everything the
cells talk to in the same namespace — a throwaway PostgreSQL, the loopback test servers, a two-node Ray
cluster (``ray.cluster_utils.Cluster``, each node with a custom resource naming it) — then runs the
``gpuledger`` commands a user runs, as processes, and writes what they did and what the store holds to
``OUT/result.json`` for ``test_matrix_ray.py`` to judge. Everything it started is stopped at the end.

    unshare -n -- sh -c 'ip link set lo up && exec python tests/matrix/ray_scenario.py OUT'
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import psutil
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "bench"))  # the programmable loopback server

from stream_server import Scenario, StreamServer  # noqa: E402


def _pg_cluster_class() -> Any:
    """``PgCluster`` of tests/conftest.py: the suite's throwaway PostgreSQL (loaded by path)."""
    spec = importlib.util.spec_from_file_location("gpuledger_suite_conftest", HERE.parent / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.PgCluster

GPULEDGER = str(Path(sys.executable).with_name("gpuledger"))
BENCH = {"dataset": "random", "input_len": 8, "output_len": 16, "num_requests": 10, "warmup": 0,
         "telemetry": False}


def gpuledger(*args: str, db: str, timeout_s: float = 240.0, signal_when: Any = None) -> dict[str, Any]:
    """A gpuledger command as a user runs it; its exit code, stderr and (with --json) its document."""
    env = {**os.environ, "GPULEDGER_DB": db, "COLUMNS": "80"}
    proc = subprocess.Popen([GPULEDGER, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)
    if signal_when is not None:
        threading.Thread(target=signal_when, args=(proc,), daemon=True).start()
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return {"code": "timeout", "stdout": out[-4000:], "stderr": err[-4000:]}
    doc: Any = None
    if "--json" in args and out.strip():
        try:
            doc = json.loads(out)
        except ValueError:
            doc = None
    return {"code": proc.returncode, "json": doc, "stdout": out[-6000:], "stderr": err[-4000:]}


def plan(path: Path, targets: list[dict[str, Any]], concurrency: list[int], repeat: int,
         **bench: Any) -> str:
    path.write_text(yaml.safe_dump({"name": path.stem, "bench": {**BENCH, **bench},
                                    "matrix": {"target": targets, "concurrency": concurrency},
                                    "repeat": repeat, "profile": "cpu-cloud"}, sort_keys=False))
    return str(path)


def store_view(db: str, matrix_id: str, nodes: dict[str, dict[str, float]]) -> dict[str, Any]:
    from gpuledger.store import open_store

    with open_store(db) as store:
        runs = [r for r in store.list_runs() if r.workload.get("matrix", {}).get("id") == matrix_id]
        cells = store.matrix_cells(matrix_id)
    def node(r: Any) -> dict[str, float]:
        return nodes.get(r.workload["matrix"].get("ray_node", {}).get("node_id", ""), {})

    return {
        "runs": [{"id": r.id, "status": r.status, "cell": r.workload["matrix"]["cell"],
                  "repeat": r.workload["matrix"]["repeat"], "group": r.workload["repeat"]["group"],
                  "output_tokens": r.summary.output_tokens_total if r.summary is not None else None,
                  "node_resources": node(r)}
                 for r in runs],
        "cells": [{"key": c.key, "repeat": c.repeat, "status": c.status, "attempts": c.attempts,
                   "run_id": c.run_id, "reason": c.reason} for c in cells],
    }


def kill_connected(port: int, stop: threading.Event, killed: list[int]) -> None:
    """SIGKILL every process (a Ray worker running a cell) that holds a connection to ``port``."""
    me = os.getpid()
    while not stop.is_set():
        for conn in psutil.net_connections(kind="tcp"):
            theirs = conn.pid is not None and conn.pid != me and conn.pid not in killed
            if conn.raddr and conn.raddr.port == port and theirs and conn.pid is not None:
                try:
                    os.kill(conn.pid, signal.SIGKILL)
                    killed.append(conn.pid)
                except ProcessLookupError:
                    continue
        time.sleep(0.05)


def scenario(out: Path, work: Path) -> dict[str, Any]:
    import ray
    from ray.cluster_utils import Cluster

    result: dict[str, Any] = {}
    # Its own folder under /tmp: the postgres user must be able to enter it.
    pg = _pg_cluster_class()(Path(tempfile.mkdtemp(prefix="gpuledger-pg-")))
    pg.start()
    servers: list[StreamServer] = []
    cluster: Any = None
    try:
        db = pg.url
        a = StreamServer(Scenario(itl_s=0.001)).start()
        b = StreamServer(Scenario(itl_s=0.002)).start()
        doomed = StreamServer(Scenario()).start()
        slow = StreamServer(Scenario(itl_s=0.05)).start()
        servers += [a, b, doomed, slow]
        t0 = time.monotonic()
        cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 2, "resources": {"node_a": 8}, "include_dashboard": False})
        cluster.add_node(num_cpus=2, resources={"node_b": 8}, labels={"gpu": "b"})
        ray.init(address=cluster.address, logging_level="ERROR")
        nodes = {n["NodeID"]: {k: v for k, v in n["Resources"].items() if k.startswith("node_")}
                 for n in ray.nodes() if n["Alive"]}
        result["cluster"] = {"address": cluster.address, "start_s": time.monotonic() - t0,
                             "nodes": len(nodes)}
        addr = cluster.address

        def target(name: str, srv: StreamServer, **place: Any) -> dict[str, Any]:
            return {"name": name, "base_url": srv.url, "engine": "openai", "model": "test-model", **place}

        # 2 targets (each placed on its node) × 2 concurrencies × 2 repeats = 8 cells.
        first = plan(work / "first.yaml", [target("a", a, resources={"node_a": 1}),
                                           target("b", b, labels={"gpu": "b"})], [1, 4], 2)
        run1 = gpuledger("matrix", first, "--ray", addr, "--db", db, "--json", "--no-progress", db=db)
        result["first"] = run1
        matrix_id = (run1.get("json") or {}).get("matrix_id")
        if matrix_id:
            result["first_store"] = store_view(db, matrix_id, nodes)
            before = a.generation_requests + b.generation_requests
            result["resume"] = gpuledger("matrix", first, "--ray", addr, "--db", db, "--resume", matrix_id,
                                         "--json", "--no-progress", db=db)
            result["resume_sent"] = a.generation_requests + b.generation_requests - before
            result["resume_store"] = store_view(db, matrix_id, nodes)
            result["report_json"] = gpuledger("report", "--matrix", matrix_id, "--json", db=db)
            result["report_text"] = gpuledger("report", "--matrix", matrix_id, db=db)
            groups = sorted({r["group"] for r in result["first_store"]["runs"]})
            result["cost_group"] = gpuledger("cost", groups[0], "--profile", "cpu-cloud", "--json", db=db)

        # A target whose server is killed: its cells fail, the others complete.
        doomed.stop()
        second = plan(work / "second.yaml", [target("a", a, resources={"node_a": 1}),
                                             target("doomed", doomed, resources={"node_b": 1})], [1, 4], 1)
        run2 = gpuledger("matrix", second, "--ray", addr, "--db", db, "--json", "--no-progress", db=db)
        result["killed"] = run2
        if (run2.get("json") or {}).get("matrix_id"):
            result["killed_store"] = store_view(db, run2["json"]["matrix_id"], nodes)

        # A cell whose worker process dies every time: Ray retries it (bounded), then it is recorded failed.
        stop, killed = threading.Event(), []
        killer = threading.Thread(target=kill_connected, args=(slow.port, stop, killed), daemon=True)
        killer.start()
        third = plan(work / "third.yaml", [target("slow", slow)], [1], 1, num_requests=50)
        run3 = gpuledger("matrix", third, "--ray", addr, "--db", db, "--json", "--no-progress", db=db)
        stop.set()
        killer.join(5)
        result["worker_death"] = {**run3, "killed_pids": len(killed)}
        if (run3.get("json") or {}).get("matrix_id"):
            result["worker_death_store"] = store_view(db, run3["json"]["matrix_id"], nodes)

        # Ctrl-C on the matrix: the running cells end incomplete, no new cell starts, the line says how to
        # resume.
        fourth = plan(work / "fourth.yaml", [target("slow", slow)], [1, 2], 2, num_requests=200)
        sent_before = slow.generation_requests

        def interrupt(proc: subprocess.Popen[str]) -> None:
            deadline = time.monotonic() + 120
            while slow.generation_requests < sent_before + 3 and time.monotonic() < deadline:
                time.sleep(0.05)
            proc.send_signal(signal.SIGINT)

        run4 = gpuledger("matrix", fourth, "--ray", addr, "--db", db, "--max-parallel", "1", "--no-progress",
                         db=db, signal_when=interrupt)
        result["ctrl_c"] = run4
        from gpuledger.store import open_store

        with open_store(db) as store:
            ids = [m for m in {r.workload.get("matrix", {}).get("id") for r in store.list_runs()} if m]
            fourth_id = next((m for m in ids if store.get_matrix(m).plan.get("name") == "fourth"), None)
        if fourth_id is not None:
            result["ctrl_c_store"] = store_view(db, fourth_id, nodes)

        # bench --workers 2 with the cluster given: the load processes are Ray actors.
        result["workers"] = gpuledger("bench", "--base-url", a.url, "--dataset", "random", "--input-len", "8",
                                      "--output-len", "32", "--concurrency", "4", "--num-requests", "40",
                                      "--warmup", "0", "--no-telemetry", "--no-progress", "--workers", "2",
                                      "--ray", addr, "--json", db=db)
    finally:
        if cluster is not None:
            ray.shutdown()
            cluster.shutdown()
        for srv in servers:
            srv.stop()
        pg.stop()
    return result


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpuledger-ray-") as tmp:
        try:
            result = scenario(out, Path(tmp))
        except Exception:  # the test reads what went wrong from the result
            result = {"error": traceback.format_exc()[-6000:]}
    (out / "result.json").write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
