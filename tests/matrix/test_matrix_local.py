"""``gpuledger matrix PLAN.yaml`` without a cluster (``--ray none``: the cells in this process, one after
another) against two programmable loopback servers, into a real SQLite store: the plan, its cells and their
keys, idempotent resumes, a failed target, Ctrl-C, ``matrix show`` and ``report --matrix``."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from stream_server import Scenario, StreamServer

from gpuledger.cli.main import main
from gpuledger.store import open_store

Serve = Callable[..., StreamServer]
FIND = importlib.util.find_spec


def plan_file(tmp_path: Path, urls: dict[str, str], **extra: Any) -> Path:
    plan: dict[str, Any] = {
        "name": "two servers",
        "bench": {"dataset": "random", "input_len": 8, "output_len": 16, "num_requests": 12, "warmup": 0,
                  "telemetry": False},
        "matrix": {"target": [{"name": n, "base_url": u, "engine": "openai", "model": "test-model",
                               "profile": "cpu-cloud"} for n, u in urls.items()],
                   "concurrency": [1, 4]},
        "repeat": 2,
        **extra,
    }
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return path


def run(capsys: pytest.CaptureFixture[str], *args: str, code: int = 0) -> dict[str, Any]:
    got = main([*args, "--json"])
    out = capsys.readouterr()
    assert got == code, out.err
    doc: dict[str, Any] = json.loads(out.out) if out.out.strip() else {"stderr": out.err}
    doc.setdefault("stderr", out.err)
    return doc


def test_a_plan_of_two_targets_two_loads_two_repeats_stores_eight_runs_with_their_keys(
        serve: Serve, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = serve(Scenario(itl_s=0.001)), serve(Scenario(itl_s=0.002))
    plan = plan_file(tmp_path, {"a": a.url, "b": b.url})
    dry = run(capsys, "matrix", str(plan), "--dry-run")
    assert [c["key"] for c in dry["cells"]] == ["target=a,concurrency=1", "target=a,concurrency=4",
                                                "target=b,concurrency=1", "target=b,concurrency=4"]
    assert dry["runs"] == 8

    done = run(capsys, "matrix", str(plan), "--ray", "none")
    matrix_id = done["matrix_id"]
    assert done["counts"] == {"complete": 8, "failed": 0, "incomplete": 0, "skipped": 0}
    with open_store(None) as store:
        runs = store.list_runs()
        assert len(runs) == 8
        keys = sorted((r.workload["matrix"]["cell"], r.workload["matrix"]["repeat"]) for r in runs)
        assert keys == sorted((f"target={t},concurrency={c}", r)
                              for t in "ab" for c in (1, 4) for r in (1, 2))
        assert all(r.workload["matrix"]["id"] == matrix_id and r.status == "complete" for r in runs)
        assert {r.summary.output_tokens_total for r in runs if r.summary is not None} == {12 * 16}
        # Each cell's two repeats are one group of repeats: cost GROUP / compare GROUP GROUP read them.
        groups = {r.workload["repeat"]["group"] for r in runs}
        assert len(groups) == 4
        cells = store.matrix_cells(matrix_id)
        assert {c.status for c in cells} == {"complete"} and {c.attempts for c in cells} == {1}
        assert sorted(c.run_id for c in cells) == sorted(r.id for r in runs)
    served = a.generation_requests + b.generation_requests

    again = run(capsys, "matrix", str(plan), "--ray", "none", "--resume", matrix_id)
    assert again["outcomes"] == [] and again["already_complete"] == 8
    assert a.generation_requests + b.generation_requests == served  # nothing was sent
    with open_store(None) as store:
        assert len(store.list_runs()) == 8

    group = sorted(groups)[0]
    cost = run(capsys, "cost", group, "--profile", "cpu-cloud")
    assert len(cost["costs"]) == 2

    report = run(capsys, "report", "--matrix", matrix_id)
    by_key = {c["key"]: c for c in report["cells"]}
    assert set(by_key) == {f"target={t},concurrency={c}" for t in "ab" for c in (1, 4)}
    for cell in by_key.values():
        assert cell["statuses"] == {"complete": 2} and cell["figures"]["output_tokens_per_s"]["n"] == 2
        assert cell["cost"]["unit"] == "USD per 1M output tokens" and cell["cost"]["mean"] > 0
    assert {e["load_level"] for e in report["cheapest"]} == {"concurrency=1", "concurrency=4"}
    assert all(e["cheapest"] in ("a", "b") for e in report["cheapest"])
    assert set(report["pareto"]) == {"a", "b"} and all(report["pareto"].values())

    assert main(["report", "--matrix", matrix_id]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "Cheapest target per load level (USD per 1M output tokens)" in text
    assert "Pareto front of a" in text and "target=b,concurrency=4" in text
    assert main(["matrix", "show", matrix_id[:6]]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "Cells × repeats" in shown and f"matrix {matrix_id}" in shown


def test_a_target_whose_server_is_gone_is_recorded_failed_and_the_others_complete(
        serve: Serve, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, gone = serve(Scenario()), serve(Scenario())
    gone.stop()
    plan = plan_file(tmp_path, {"a": a.url, "gone": gone.url}, repeat=1)
    done = run(capsys, "matrix", str(plan), "--ray", "none", code=6)
    assert done["stderr"].count("failed: target=gone") == 2
    assert "2 of 4 runs failed" in done["stderr"]
    with open_store(None) as store:
        (matrix,) = {r.workload["matrix"]["id"] for r in store.list_runs()}
        cells = {c.key: c for c in store.matrix_cells(matrix)}
    assert cells["target=a,concurrency=1"].status == cells["target=a,concurrency=4"].status == "complete"
    for key in ("target=gone,concurrency=1", "target=gone,concurrency=4"):
        assert cells[key].status == "failed" and cells[key].run_id is None
        assert (cells[key].reason or "").startswith("cannot reach the inference server at http://127.0.0.1:")
    shown = run(capsys, "matrix", "show", matrix)
    assert {c["key"]: c["statuses"] for c in shown["cells"]}["target=gone,concurrency=1"] == {"failed": 1}


def test_ctrl_c_ends_the_running_cell_incomplete_schedules_no_more_and_resume_finishes(
        serve: Serve, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    slow = serve(Scenario(itl_s=0.02))
    plan = plan_file(tmp_path, {"slow": slow.url}, repeat=1)

    def interrupt_once_sending() -> None:
        deadline = time.monotonic() + 30
        while slow.generation_requests < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_once_sending, daemon=True).start()
    stopped = run(capsys, "matrix", str(plan), "--ray", "none", code=130)
    assert "resume with: gpuledger matrix" in stopped["stderr"]
    with open_store(None) as store:
        (only,) = store.list_runs()
        matrix_id = only.workload["matrix"]["id"]
        cells = {c.key: c for c in store.matrix_cells(matrix_id)}
        assert store.get_matrix(matrix_id).status == "interrupted"
    assert only.status == "incomplete" and only.summary is not None and only.summary.interrupted is not None
    assert cells["target=slow,concurrency=1"].status == "incomplete"
    assert cells["target=slow,concurrency=4"].status == "pending"  # never started

    resumed = run(capsys, "matrix", str(plan), "--ray", "none", "--resume", matrix_id)
    assert resumed["counts"]["complete"] == 2
    with open_store(None) as store:
        runs = store.list_runs()
        cells = {c.key: c for c in store.matrix_cells(matrix_id)}
    assert len(runs) == 2 and {r.status for r in runs} == {"complete"}  # the incomplete run was replaced
    assert cells["target=slow,concurrency=1"].attempts == 2 and only.id not in {r.id for r in runs}


@pytest.mark.parametrize(("change", "message"), [
    ({"matrix": {"target": [{"base_url": "http://127.0.0.1:9", "model": "m"}], "concurency": [1]}},
     "matrix.concurency: not a key of the plan here (did you mean 'concurrency'?)"),
    ({"bench": {"input_lenght": 8}},
     "bench.input_lenght: not a key of the plan here (did you mean 'input_len'?)"),
    ({"exclude": [{"target": "nope"}]}, "exclude #1: 'nope' is not a value of the target axis (a)"),
    ({"bench": {"concurrency": 4}}, "concurrency is both a bench setting and an axis of the matrix"),
    ({"bench": {"num_requests": 0}}, "cell target=a,concurrency=1: --num-requests must be at least 1, got 0"),
    ({"repeat": 0}, "repeat: Input should be greater than or equal to 1"),
    ({"matrix": {"target": [{"name": "a", "base_url": "http://127.0.0.1:9", "model": "m", "engine": "vllm"}],
                 "concurrency": [1]}}, "target a: --engine must be openai, ollama"),
    ({"matrix": {"target": [{"name": "a", "base_url": "http://127.0.0.1:9", "model": "m",
                             "telemetry_from": ["ftp://node/metrics"]}], "concurrency": [1]}},
     "target a: --telemetry-from"),
    # 10^10 cells: refused from the axes' lengths, before a cell is built
    ({"matrix": {"target": [{"name": "a", "base_url": "http://127.0.0.1:9", "model": "m"}],
                 "concurrency": list(range(1, 101)), "seed": list(range(100)),
                 "request_timeout": [float(t) for t in range(1, 101)], "label": [f"l{i}" for i in range(100)],
                 "telemetry_interval": [0.1 + i / 100 for i in range(100)]}},
     "10,000,000,000 cells × 2 repeats is more than 10,000 runs"),
])
def test_a_plan_is_refused_whole_with_one_line_naming_the_key(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, Any], message: str) -> None:
    plan = yaml.safe_load(plan_file(tmp_path, {"a": "http://127.0.0.1:9"}).read_text())
    for key, value in change.items():
        merge = isinstance(value, dict) and isinstance(plan.get(key), dict)
        plan[key] = {**plan[key], **value} if merge else value
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(plan))
    assert main(["matrix", str(tmp_path / "bad.yaml"), "--dry-run"]) == 4
    err = " ".join(capsys.readouterr().err.split())
    assert message in err, err


def test_resuming_with_another_plan_is_refused(serve: Serve, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    srv = serve(Scenario())
    plan = plan_file(tmp_path, {"a": srv.url}, repeat=1)
    matrix_id = run(capsys, "matrix", str(plan), "--ray", "none")["matrix_id"]
    other = plan_file(tmp_path, {"a": srv.url}, repeat=3)
    assert main(["matrix", str(other), "--ray", "none", "--resume", matrix_id]) == 2
    assert "is not the plan matrix" in capsys.readouterr().err


def test_without_ray_local_runs_the_cells_in_this_process_and_a_cluster_needs_ray(
        serve: Serve, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray absent (the import boundary: ``import ray`` fails): ``--ray local`` still runs every cell, here;
    ``--ray auto`` is the missing dependency's exit 7 with the extra to install."""
    monkeypatch.setitem(sys.modules, "ray", None)
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "ray" else FIND(name, *a))
    srv = serve(Scenario())
    plan = plan_file(tmp_path, {"a": srv.url}, repeat=1)
    done = run(capsys, "matrix", str(plan), "--ray", "local")
    assert done["where"] == "in this process, one after another" and done["counts"]["complete"] == 2
    pg_like = "postgresql+psycopg://u@127.0.0.1:9/none"
    assert main(["matrix", str(plan), "--ray", "auto", "--db", pg_like]) == 7
    assert 'pip install "gpuledger[cluster]"' in capsys.readouterr().err


def test_a_cluster_cannot_share_a_sqlite_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = plan_file(tmp_path, {"a": "http://127.0.0.1:9"}, repeat=1)
    assert main(["matrix", str(plan), "--ray", "10.0.0.1:6379"]) == 2
    assert "a SQLite file cannot be shared" in capsys.readouterr().err


def test_a_cell_can_send_its_load_from_several_processes(
        serve: Serve, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    srv = serve(Scenario())
    plan = plan_file(tmp_path, {"a": srv.url}, repeat=1)
    doc = yaml.safe_load(plan.read_text())
    doc["matrix"]["concurrency"] = [4]
    doc["matrix"]["workers"] = [1, 2]
    plan.write_text(yaml.safe_dump(doc))
    done = run(capsys, "matrix", str(plan), "--ray", "none")
    assert done["counts"]["complete"] == 2
    with open_store(None) as store:
        runs = {r.workload["matrix"]["cell"]: r for r in store.list_runs()}
    two = runs["target=a,concurrency=4,workers=2"]
    assert two.client["load_workers"]["count"] == 2 and "load_workers" not in runs[
        "target=a,concurrency=4,workers=1"].client
    assert {r.summary.output_tokens_total for r in runs.values() if r.summary is not None} == {12 * 16}


def test_show_of_a_matrix_that_is_not_there_and_show_without_an_id(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["matrix", "show", "m-nothere"]) == 3
    assert "no matrix 'm-nothere'" in capsys.readouterr().err
    assert main(["matrix", "show"]) == 2
    assert main(["report", "--matrix", "m-nothere", "r1"]) == 2
    assert "give no run ids" in capsys.readouterr().err


def test_the_plan_in_the_docs_is_a_valid_plan() -> None:
    """docs/matrix.md's plan, as a user copies it: 2 targets × 3 concurrencies × 2 datasets, 2 excluded."""
    from gpuledger.bench.matrix import parse_plan

    text = (Path(__file__).resolve().parents[2] / "docs" / "matrix.md").read_text()
    loaded = parse_plan(yaml.safe_load(text.split("```yaml\n", 1)[1].split("```", 1)[0]), "docs", Path("/d"))
    assert len(loaded.cells) == 10 and loaded.excluded == 2 and loaded.repeat == 3
    assert loaded.cells[0].key == "target=h100,concurrency=1,dataset=random"
    random, sharegpt = (next(c for c in loaded.cells if c.key == f"target=h100,concurrency=8,dataset={d}")
                        for d in ("random", "sharegpt"))
    assert random.spec("x").dataset.input_len == 512 and random.spec("x").dataset.path is None
    assert sharegpt.spec("x").dataset.path == Path("/d/data/sharegpt.json")
    assert sharegpt.spec("x").dataset.input_len is None


def test_a_profile_that_takes_its_setup_hours_from_the_doctor_prices_every_cell(
        serve: Serve, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """report --matrix prices a cell as `cost` prices its runs: with the doctor's ledger, so a profile with
    `from_doctor_history: true` is priced, not refused for want of the history."""
    assert main(["doctor", "--json"]) in (0, 1, 2)  # whatever it finds, it files a doctor run
    capsys.readouterr()
    profile = tmp_path / "ledger.yaml"
    profile.write_text("extends: cpu-cloud\nname: ledger\nfrom_doctor_history: true\n")
    a = serve(Scenario(itl_s=0.001))
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({
        "name": "ledger", "repeat": 1,
        "bench": {"dataset": "random", "input_len": 8, "output_len": 8, "num_requests": 4, "warmup": 0,
                  "telemetry": False},
        "matrix": {"target": [{"name": "a", "base_url": a.url, "engine": "openai", "model": "test-model",
                               "profile": str(profile)}], "concurrency": [1]},
    }, sort_keys=False))
    done = run(capsys, "matrix", str(plan), "--ray", "none")
    report = run(capsys, "report", "--matrix", done["matrix_id"])
    (cell,) = report["cells"]
    assert cell["cost"] is not None and cell["cost"]["mean"] > 0, cell
    assert cell["cost"]["profile"] == "ledger"
