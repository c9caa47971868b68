"""``compare``'s "different run settings" names what the user asked for differently, never what a run
observed of its machine (issue #33, item 9): two identical in-process runs warned ``memory_estimate.
available_bytes = 23852498944 vs 23777550336`` — the machine's free memory at the moment each started."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from gpuledger.catalog import Catalog
from gpuledger.cli.main import main
from gpuledger.cost import CostProfile, cost_of_run
from gpuledger.cost.comparison.differences import comparison_warnings
from gpuledger.records import RunInfo, load_spec
from gpuledger.store import open_store

pytest.importorskip("torch", reason="the in-process engine needs torch (pip install '.[torch]')")

BENCH = ["bench", "--engine", "torch", "--model", "dummy:smollm2-135m", "--input-len", "16", "--output-len",
         "4", "--num-requests", "2", "--no-progress", "--no-telemetry", "--json"]
RENTAL = CostProfile(name="rent", rental_per_hour=1.0)


def bench(capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    assert main([*BENCH, *extra]) == 0
    run_id: str = json.loads(capsys.readouterr().out)["id"]
    return run_id


def settings_warnings(a: RunInfo, b: RunInfo, catalog: Catalog) -> list[str]:
    warnings = comparison_warnings(cost_of_run(a, RENTAL, catalog=catalog),
                                   cost_of_run(b, RENTAL, catalog=catalog))
    return [w for w in warnings if w.startswith("different run settings")]


def test_two_identical_in_process_runs_have_the_same_settings(
    capsys: pytest.CaptureFixture[str], catalog: Catalog, tmp_path: Path
) -> None:
    a_id, b_id = bench(capsys), bench(capsys)
    assert main(["compare", a_id, b_id, "--profile", "cpu-cloud", "--json"]) == 0
    warnings = json.loads(capsys.readouterr().out)["pairs"][0]["warnings"]
    assert [w for w in warnings if "run settings" in w] == []
    with open_store(None) as store:
        a = store.get_run(a_id)
    # What the machine said when the run started is not a setting, however it differs on another day or
    # machine; what the user asked for is.
    doc = a.config.to_dict()
    observed = json.loads(json.dumps(doc))
    observed["memory_estimate"]["available_bytes"] += 74_947_608
    observed["memory_estimate"]["fits"] = not doc["memory_estimate"]["fits"]
    observed.update(device_name="AMD EPYC 9654 96-Core Processor", cpu_threads=96, build="2.13.0+cpu")
    observed["telemetry"] = {**doc["telemetry"], "sources": [
        {"name": "rapl", "available": True, "reason": None, "devices": ["cpu"]}]}
    b = dataclasses.replace(a, id="other", config=load_spec(observed, a.engine))
    assert settings_warnings(a, b, catalog) == []
    asked = dict(doc, batch_size=4, concurrency=4)
    c = dataclasses.replace(a, id="asked", config=load_spec(asked, a.engine))
    assert settings_warnings(a, c, catalog) == [
        "different run settings: batch_size = 1 vs 4, concurrency = 1 vs 4"]
