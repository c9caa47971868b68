"""What a matrix tells whoever follows it is typed: a real in-process matrix run (one target served, one
gone) emits a ``MatrixStart`` once and a ``CellOutcome`` per cell × repeat, the terminal lines ``gpuledger
matrix`` prints are those models' values, and its ``--json`` document holds the same outcomes. What comes
back from another process (a Ray worker, a Slurm task's pickle) is checked into a ``CellOutcome`` or
refused with why."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError
from stream_server import Scenario, StreamServer

from gpuledger.bench import matrix_run
from gpuledger.bench.matrix_cell import CellTask, checked_outcome, outcome
from gpuledger.bench.matrix_run import Events, MatrixRunDoc
from gpuledger.bench.matrix_state import CellOutcome, MatrixStart, SlurmTaskInfo
from gpuledger.cli.main import main

Serve = Callable[..., StreamServer]


def _plan(tmp_path: Path, urls: dict[str, str]) -> Path:
    plan: dict[str, Any] = {
        "name": "events",
        "bench": {"dataset": "random", "input_len": 8, "output_len": 8, "num_requests": 4, "warmup": 0,
                  "telemetry": False},
        "matrix": {"target": [{"name": n, "base_url": u, "engine": "openai", "model": "test-model"}
                              for n, u in urls.items()], "concurrency": [1]},
        "repeat": 1,
    }
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return path


def test_a_matrix_run_emits_typed_events_and_the_terminal_lines_are_their_values(
        serve: Serve, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    a, gone = serve(Scenario()), serve(Scenario())
    gone.stop()
    plan = _plan(tmp_path, {"a": a.url, "gone": gone.url})
    seen: list[object] = []
    real = matrix_run.run_matrix

    def tap(fn: Callable[[Any], None] | None) -> Callable[[Any], None]:
        assert fn is not None

        def heard(event: object) -> None:
            seen.append(event)
            fn(event)
        return heard

    def run_matrix(*args: Any, events: Events, **kwargs: Any) -> matrix_run.MatrixRun:
        tapped = dataclasses.replace(events, on_start=tap(events.on_start), on_cell=tap(events.on_cell))
        return real(*args, events=tapped, **kwargs)

    monkeypatch.setattr(matrix_run, "run_matrix", run_matrix)
    assert main(["matrix", str(plan), "--ray", "none", "--json"]) == 6
    out = capsys.readouterr()

    start, *cells = seen
    assert isinstance(start, MatrixStart)
    assert all(isinstance(c, CellOutcome) for c in cells) and len(cells) == start.to_run == 2
    assert (start.planned, start.already_complete, start.resumed) == (2, 0, False)
    assert start.where == "in this process, one after another"
    with pytest.raises(ValidationError):  # frozen
        start.to_run = 5  # type: ignore[misc]

    lines = out.err.splitlines()
    assert (f"matrix {start.matrix_id}: {start.to_run} of {start.planned} runs to do "
            f"({start.already_complete} already complete); cells run {start.where}") in lines
    by_key = {c.key: c for c in cells if isinstance(c, CellOutcome)}
    done, failed = by_key["target=a,concurrency=1"], by_key["target=gone,concurrency=1"]
    assert (done.status, done.reason, done.slurm) == ("complete", None, None) and done.run_id
    assert failed.status == "failed" and failed.reason and failed.reason.startswith("cannot reach the")
    assert f"failed: {failed.key} #{failed.repeat}: {failed.reason}" in lines
    assert not any(line.startswith(f"failed: {done.key}") for line in lines)

    doc = MatrixRunDoc.model_validate(json.loads(out.out))
    assert doc.matrix_id == start.matrix_id and doc.outcomes == cells
    assert (doc.counts.complete, doc.counts.failed, doc.planned_runs) == (1, 1, start.planned)
    assert (f"matrix {doc.matrix_id}: 1 of 2 runs failed; the first: {failed.key} #{failed.repeat}: "
            f"{failed.reason}") in " ".join(out.err.split())


TASK = CellTask("sqlite:///x.sqlite", "m-test0001", "target=a,concurrency=1", 2, 2, "g", {})


def test_what_a_worker_returns_is_checked_into_the_cells_outcome_or_refused_with_why() -> None:
    mine = outcome(TASK, "complete", run_id="r-1", attempt=1)
    assert isinstance(mine, CellOutcome) and (mine.key, mine.repeat, mine.status) == (TASK.key, 2, "complete")
    assert checked_outcome(TASK, mine, "the cell's Ray task") is mine
    # A plain document of the outcome (an older worker, a pickle of plain values) is validated into one.
    assert checked_outcome(TASK, mine.model_dump(), "the cell's Ray task") == mine
    slurm = mine.model_copy(update={"slurm": SlurmTaskInfo(job_id="7_1", log="/l", log_tail=["x"])})
    assert checked_outcome(TASK, slurm.model_dump(mode="json"), "the cell's Ray task") == slurm
    for junk in (None, "complete", {"key": TASK.key, "repeat": 2, "status": "done"},
                 {**mine.model_dump(), "extra": 1}, {"key": TASK.key}):
        assert checked_outcome(TASK, junk, "the cell's Slurm task 7_1") == (
            "the cell's Slurm task 7_1 returned something that is not its outcome")
    other = outcome(dataclasses.replace(TASK, repeat=1), "complete")
    assert checked_outcome(TASK, other, "the cell's Ray task") == (
        "the cell's Ray task returned another cell's outcome")
    assert checked_outcome(TASK, other.model_dump(), "the cell's Ray task") == (
        "the cell's Ray task returned another cell's outcome")
