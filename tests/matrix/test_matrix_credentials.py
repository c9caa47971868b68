"""A target URL with credentials (``http://user:password@host``): the cells authenticate with them (a Basic
header) wherever they run in memory (here: ``--ray none``), and the stored run keeps the URL redacted."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from stream_server import Scenario, StreamServer

from gpuledger.cli.main import main
from gpuledger.store import open_store


def test_a_cell_uses_its_target_urls_credentials_and_stores_them_redacted(
        serve: Callable[..., StreamServer], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    srv = serve(Scenario())
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({
        "bench": {"dataset": "random", "input_len": 8, "output_len": 8, "num_requests": 2, "warmup": 0,
                  "telemetry": False},
        "matrix": {"target": [{"name": "a", "base_url": srv.url.replace("http://", "http://bench:pw-1@"),
                               "model": "test-model"}], "concurrency": [1]},
    }))
    assert main(["matrix", str(plan), "--ray", "none", "--json"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out)["counts"]["complete"] == 1 and "pw-1" not in out
    sent = {r.headers.get("Authorization") for r in srv.requests if "completions" in r.path}
    assert sent == {"Basic " + base64.b64encode(b"bench:pw-1").decode()}
    with open_store(None) as store:
        (run,) = store.list_runs()
    assert run.base_url is not None and "bench:***@" in run.base_url
