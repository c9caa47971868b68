"""Runs and profiles for the cost tests. Runs are real ``RunInfo`` records shaped like what the bench and
the telemetry sampler store (docs/contracts.md); CLI tests put them in the real store."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
from cost_runs import MakeRun, build_run

from gpuledger.catalog import Catalog, load_catalog
from gpuledger.records import RunInfo


@pytest.fixture()
def make_run() -> MakeRun:
    return build_run


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return load_catalog()


@pytest.fixture()
def store_run(monkeypatch: pytest.MonkeyPatch) -> Callable[[RunInfo], str]:
    """Put a run into the test's (isolated) real store the way the bench does: create, then update."""
    from gpuledger.store import open_store

    def put(run: RunInfo) -> str:
        store = open_store(None)
        try:
            run_id = store.create_run(
                dataclasses.replace(run, status="running", summary=None, telemetry_summary=[])
            )
            store.update_run(
                run_id, status=run.status, summary=run.summary, telemetry_summary=run.telemetry_summary
            )
        finally:
            store.close()
        return run_id

    return put
