"""A matrix plan whose URLs carry secrets (``base_url: http://alice:PlanSecret@…``, a ``telemetry_from``
exporter at ``http://bob:TeleSecret@…``): the cells use them, and nothing the matrix writes down holds them —
not the plan the store keeps (nor its digest), not a Slurm task's pickle, not a Kubernetes manifest. A cell
that runs from a file takes them from the environment (``GPULEDGER_MATRIX_URL_<TARGET>``,
``GPULEDGER_MATRIX_TELEMETRY_<TARGET>``), as the store's password already travels.

Servers: the programmable inference server and a dcgm-exporter imitation on 127.0.0.1 that record each
request's ``Authorization`` header.
"""

from __future__ import annotations

import base64
import json
import pickle
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from stream_server import Scenario, StreamServer

from gpuledger.bench.matrix import load_plan
from gpuledger.bench.matrix_cell import from_environment
from gpuledger.bench.matrix_run import cell_task, secret_environment
from gpuledger.cli.main import main
from gpuledger.errors import InvalidInputError
from gpuledger.store import open_store

Serve = Callable[..., StreamServer]
PLAN_SECRET, TELE_SECRET = "PlanSecret", "TeleSecret"


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


class Exporter:
    """dcgm-exporter's ``/metrics``: one H100 at 300 W; the Authorization header of every request kept."""

    def __init__(self) -> None:
        self.auth: list[str | None] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.auth.append(self.headers.get("Authorization"))
                body = (b'# TYPE DCGM_FI_DEV_POWER_USAGE gauge\nDCGM_FI_DEV_POWER_USAGE{gpu="0",'
                        b'modelName="NVIDIA H100 80GB HBM3",Hostname="node-1"} 300.0\n')
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def exporter() -> Iterator[Exporter]:
    e = Exporter()
    yield e
    e.stop()


def secret_plan(tmp_path: Path, server_port: int, exporter_port: int, **extra: Any) -> Path:
    plan = {
        "bench": {"dataset": "random", "input_len": 8, "output_len": 8, "num_requests": 2, "warmup": 0,
                  "telemetry": True, "telemetry_interval": 0.05},
        "matrix": {"target": [{
            "name": "a", "model": "test-model",
            "base_url": f"http://alice:{PLAN_SECRET}@127.0.0.1:{server_port}",
            "telemetry_from": [f"http://bob:{TELE_SECRET}@127.0.0.1:{exporter_port}/metrics"],
        }], "concurrency": [1]},
        **extra,
    }
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return path


def assert_clean(text: str) -> None:
    assert PLAN_SECRET not in text and TELE_SECRET not in text


def test_a_plan_with_passwords_is_stored_redacted_and_its_cells_use_the_passwords(
        serve: Serve, exporter: Exporter, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    srv = serve(Scenario())
    plan = secret_plan(tmp_path, srv.port, exporter.port)
    assert main(["matrix", str(plan), "--ray", "none", "--json"]) == 0
    out = capsys.readouterr()
    done = json.loads(out.out)
    assert done["counts"]["complete"] == 1
    assert {r.headers.get("Authorization") for r in srv.requests} == {basic("alice", PLAN_SECRET)}
    assert exporter.auth and set(exporter.auth) == {basic("bob", TELE_SECRET)}
    with open_store(None) as store:
        matrix = store.get_matrix(done["matrix_id"])
        (run,) = store.list_runs()
        exported = json.dumps(store.export_run(run.id))
        cells = json.dumps([c.params for c in store.matrix_cells(matrix.id)])
    (target,) = matrix.plan["matrix"]["target"]
    assert target["base_url"] == f"http://alice:***@127.0.0.1:{srv.port}"
    assert target["telemetry_from"] == [f"http://bob:***@127.0.0.1:{exporter.port}/metrics"]
    for text in (json.dumps(matrix.plan), cells, exported, out.out, out.err):
        assert_clean(text)
    assert main(["matrix", "show", matrix.id, "--json"]) == 0
    assert_clean(capsys.readouterr().out)
    # The same plan with another password is the same plan (no digest of a password is kept).
    again = secret_plan(tmp_path, srv.port, exporter.port)
    again.write_text(again.read_text().replace(PLAN_SECRET, "Rotated-1"))
    assert load_plan(again).digest == load_plan(plan).digest == matrix.plan_digest


def test_a_cell_that_runs_from_a_file_carries_no_password_and_takes_them_from_the_environment(
        tmp_path: Path) -> None:
    loaded = load_plan(secret_plan(tmp_path, 8000, 9400))
    (cell,) = loaded.cells
    task = cell_task(loaded, "m-abcd2345", "sqlite:///x.sqlite", cell, 1, secrets_from_env=True)
    assert_clean(repr(pickle.dumps(task)))
    env = secret_environment(loaded, "sqlite:///x.sqlite")
    assert env == {"GPULEDGER_MATRIX_URL_A": f"http://alice:{PLAN_SECRET}@127.0.0.1:8000",
                   "GPULEDGER_MATRIX_TELEMETRY_A": f"http://bob:{TELE_SECRET}@127.0.0.1:9400/metrics"}
    there = from_environment(task, env)
    assert there.spec["base_url"] == f"http://alice:{PLAN_SECRET}@127.0.0.1:8000"
    assert there.telemetry_from == (f"http://bob:{TELE_SECRET}@127.0.0.1:9400/metrics",)
    with pytest.raises(InvalidInputError, match=r"\$GPULEDGER_MATRIX_TELEMETRY_A is not set here"):
        from_environment(task, {"GPULEDGER_MATRIX_URL_A": env["GPULEDGER_MATRIX_URL_A"]})
    with pytest.raises(InvalidInputError, match="other exporters than the cell's"):
        from_environment(task, {**env, "GPULEDGER_MATRIX_TELEMETRY_A": "http://bob:x@10.0.0.9:9400/metrics"})


def test_kubernetes_manifests_hold_no_password_and_name_the_variables_that_do(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = secret_plan(tmp_path, 8000, 9400, kubernetes={"image": "ghcr.io/acme/gpuledger:1.4"})
    out = tmp_path / "manifests"
    assert main(["matrix", str(plan), "--emit", "k8s", str(out), "--json"]) == 0
    emitted = capsys.readouterr().out
    for path in out.iterdir():
        assert_clean(path.read_text())
    assert "GPULEDGER_MATRIX_URL_A" in emitted and "GPULEDGER_MATRIX_TELEMETRY_A" in emitted
    assert_clean(emitted)
