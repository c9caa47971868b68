"""Fixtures for the dashboard tests: stores holding real runs (the golden store's, on SQLite and on the real
PostgreSQL), a dashboard started in-process on 127.0.0.1 (a free port, stopped after the test), and the CLI's
``--json`` documents to hold the API to (helpers: serve_support.py)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "report"))  # report_factory: runs through the real store and metrics
sys.path.insert(0, str(HERE.parent / "bench"))  # stream_server: the programmable loopback server

from serve_support import Running, golden_copy  # noqa: E402

from gpuledger.cli.main import main  # noqa: E402
from gpuledger.serve import ServeSettings  # noqa: E402
from gpuledger.store import open_store  # noqa: E402


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store holding the golden store's runs: the upgraded copy on SQLite; on PostgreSQL, every run of it
    exported and imported (``Store.export_run`` / ``import_run``: what ``gpuledger export`` / ``import``
    do)."""
    sqlite = golden_copy(tmp_path / "golden.sqlite")
    if request.param == "sqlite":
        return sqlite
    url: str = request.getfixturevalue("pg_fresh_url")
    with open_store(sqlite) as src, open_store(url) as dst:
        for run in src.list_runs():
            dst.import_run(src.export_run(run.id))
    return url


@pytest.fixture
def serve() -> Iterator[Callable[..., Running]]:
    """``serve(db=URL, token=..., profile=...)`` → a dashboard on 127.0.0.1 (a free port), stopped after the
    test."""
    running: list[Running] = []

    def start(**settings: Any) -> Running:
        server = Running(ServeSettings(**({"host": "127.0.0.1", "port": 0} | settings)))
        running.append(server)
        return server

    yield start
    for server in running:
        server.stop()


@pytest.fixture
def cli_json(capsys: pytest.CaptureFixture[str]) -> Callable[..., Any]:
    """``cli_json("compare", A, B, db=URL)``: what ``gpuledger compare A B --db URL --json`` prints."""

    def run(*args: str, db: str) -> Any:
        code = main([*args, "--db", db, "--json"])
        out = capsys.readouterr()
        assert code == 0, out.err
        return json.loads(out.out)

    return run


@pytest.fixture
def matrix_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Iterator[tuple[str, str]]:
    """A benchmark matrix run for real (``gpuledger matrix PLAN --ray none``: its cells in this process,
    against two loopback servers of different speeds) into a SQLite store: (its URL, the matrix id)."""
    import yaml
    from stream_server import Scenario, StreamServer

    servers = [StreamServer(Scenario(itl_s=0.001)), StreamServer(Scenario(itl_s=0.004))]
    for s in servers:
        s.start()
    try:
        plan = {
            "name": "two servers",
            "bench": {"dataset": "random", "input_len": 8, "output_len": 16, "num_requests": 8, "warmup": 0,
                      "telemetry": False},
            "matrix": {"target": [{"name": name, "base_url": s.url, "engine": "openai", "model": "test-model",
                                   "profile": "cpu-cloud"} for name, s in zip(("fast", "slow"), servers,
                                                                            strict=True)],
                       "concurrency": [1, 4]},
            "repeat": 1,
        }
        path = tmp_path / "plan.yaml"
        path.write_text(yaml.safe_dump(plan, sort_keys=False))
        db = f"sqlite:///{tmp_path / 'matrix.sqlite'}"
        # In a thread of its own: its event loop must not meet Playwright's, which runs in this one.
        with ThreadPoolExecutor(1) as pool:
            code = pool.submit(main, ["matrix", str(path), "--ray", "none", "--db", db, "--json"]).result()
        out = capsys.readouterr()
        assert code == 0, out.err
        done = json.loads(out.out)
        assert done["counts"]["complete"] == 4
    finally:
        for s in servers:
            s.stop()
    yield db, str(done["matrix_id"])
