"""A password in a server URL is used for the requests and shown nowhere (issue 16, item 5): not in
`show --json`, not in the export meant for sharing, not kept from an imported document — also for runs
stored before gpuledger redacted URLs at the source."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuledger.cli.main import app
from gpuledger.records import RunInfo, load_spec
from gpuledger.store import open_store

SECRET_URL = "http://alice:hunter2@10.0.0.5:8000/v1?api_key=sk-live-123"


def _old_run(url: str) -> str:
    """A run as an older gpuledger stored it: the URL with its password, in the header and the config."""
    with open_store(url) as store:
        spec = load_spec({"engine": "openai", "base_url": SECRET_URL, "model": "m"}, "openai")
        return store.create_run(RunInfo(id="", engine="openai", model="m", base_url=SECRET_URL, config=spec))


def test_show_and_export_never_print_the_password_of_an_old_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    monkeypatch.setenv("GPULEDGER_DB", url)
    run_id = _old_run(url)
    for args in (["show", run_id, "--json"], ["export", run_id, "--format", "json"], ["show", run_id]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        assert "hunter2" not in result.output and "sk-live-123" not in result.output
        assert "alice:***@10.0.0.5:8000" in result.output
    doc = json.loads(CliRunner().invoke(app, ["export", run_id, "--format", "json"]).stdout)
    assert doc["run"]["base_url"].startswith("http://alice:***@10.0.0.5:8000/v1")
    assert doc["run"]["config"]["base_url"] == doc["run"]["base_url"]


def test_an_imported_document_with_a_password_is_stored_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = f"sqlite:///{tmp_path / 'a.sqlite'}"
    run_id = _old_run(source)
    with open_store(source) as store:
        doc = store.export_run(run_id)
    # a document written by another tool, with the secret in it
    doc["run"]["base_url"] = SECRET_URL
    doc["run"]["config"]["base_url"] = SECRET_URL
    target = f"sqlite:///{tmp_path / 'b.sqlite'}"
    with open_store(target) as store:
        new_id = store.import_run(doc)
        got = store.get_run(new_id)
    assert got.base_url is not None and "hunter2" not in got.base_url and "sk-live-123" not in got.base_url
    assert "hunter2" not in json.dumps(got.config.model_dump(mode="json"))
