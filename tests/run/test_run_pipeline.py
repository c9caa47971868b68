"""`gpuledger run` as a library (kinds/pipeline.py): the options, the task's run facet, the typed result whose
dump is `run --json`'s document, progress through the hooks; on this machine's CPU (--quick)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuledger.cli import files, run_cmd
from gpuledger.cli.main import app
from gpuledger.errors import EngineError, InvalidInputError, UsageError
from gpuledger.kinds import pipeline
from gpuledger.kinds.pipeline import PipelineHooks, RunOptions, run_pipeline
from gpuledger.records.spec import checked

pytest.importorskip("torch", reason="`gpuledger run` needs torch (pip install '.[torch]')")

TEXT_KEYS = ["run_id", "status", "model", "model_choice", "device", "dtype", "workload", "doctor", "metrics",
             "memory", "power", "answer", "cost", "report_html", "missing", "warnings"]
TASK_KEYS = ["task", "run_id", "status", "model", "model_choice", "device", "dtype", "workload", "doctor",
             "metrics", "answer", "cost", "report_html", "missing"]


class Heard:
    """What the pipeline told its hooks."""

    def __init__(self) -> None:
        self.phases: list[str] = []
        self.progress: list[tuple[int, int | None]] = []

    def hooks(self, *, with_files: bool = True) -> PipelineHooks:
        return PipelineHooks(on_phase=self.phases.append,
                             on_progress=lambda d, t: self.progress.append((d, t)),
                             files=files if with_files else None)


def options(tmp_path: Path, **values: object) -> RunOptions:
    db = f"sqlite:///{tmp_path / 'runs.sqlite'}"
    return RunOptions.model_validate({"device": "cpu", "quick": True, "profile": "cpu-cloud",
                                      "html": tmp_path / "r.html", "db": db, **values})


def test_the_text_pipeline_returns_its_typed_result_and_tells_its_hooks(tmp_path: Path) -> None:
    from gpuledger.kinds.text.run import TextRunResult

    heard = Heard()
    result = run_pipeline(options(tmp_path, model="dummy:smollm2-135m"), heard.hooks())
    assert isinstance(result, TextRunResult)
    doc = result.document()
    assert list(doc) == TEXT_KEYS  # no "group": the run was not repeated
    assert result.model.name == "dummy:smollm2-135m" and result.device.type == "cpu"
    assert result.dtype == "fp32" and result.memory.estimate.fits
    assert result.memory.peak.value is not None and result.memory.peak.value > 0
    assert doc["answer"] == result.answer.model_dump(mode="json") and doc["answer"]["facts"][0]["label"]
    # the prices come from the typed cost, each with the key `gpuledger cost --json` gives it
    c = doc["cost"]
    assert c["per_1m_tokens_key"] == "usd_per_1m_tokens" and c["per_hour_key"] == "usd_per_hour"
    for key in ("per_1m_tokens", "per_1m_output_tokens", "per_hour"):
        assert c[key] == c["document"][c[f"{key}_key"]] and c[key] > 0
    assert Path(doc["report_html"]) == (tmp_path / "r.html").resolve() and doc["missing"] == []
    for phase in ("choosing device and model", "doctor: collecting facts about the stack", "cost", "report"):
        assert phase in heard.phases
    assert heard.progress and heard.progress[-1][0] == result.metrics.num_requests


def test_run_json_prints_the_results_dump(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'runs.sqlite'}"
    out = CliRunner().invoke(app, ["run", "--device", "cpu", "--model", "dummy:smollm2-135m", "--quick",
                                   "--profile", "cpu-cloud", "--html", str(tmp_path / "r.html"), "--db", db,
                                   "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert list(doc) == TEXT_KEYS and doc["status"] == "complete"
    assert doc["model"]["name"] == "dummy:smollm2-135m" and doc["device"]["torch_device"] == "cpu"


@pytest.mark.parametrize("task", ["train", "image"])
def test_a_task_pipeline_returns_its_typed_result(task: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    if task == "image":
        pytest.importorskip("diffusers", reason="`gpuledger run --task image` needs diffusers")
    from gpuledger.kinds.pipeline import TaskRunResult

    result = run_pipeline(options(tmp_path, task=task), Heard().hooks())
    assert isinstance(result, TaskRunResult) and result.task == task
    doc = result.document()
    keys = TASK_KEYS if task == "image" else [*TASK_KEYS[:10], "memory", *TASK_KEYS[10:]]
    assert list(doc) == keys
    prices = {k for k in doc["cost"] if k not in ("currency", "document")}
    assert prices and all(doc["cost"][k] == doc["cost"]["document"][k] for k in prices)
    run_cmd.render(result)
    out = capsys.readouterr().out
    assert out.index(result.answer.headline) < out.index("doctor:") < out.index("run id:")


def test_without_a_file_writer_the_report_is_missing_with_its_reason(tmp_path: Path) -> None:
    result = run_pipeline(options(tmp_path, task="train", html=None), Heard().hooks(with_files=False))
    assert result.document()["report_html"] is None
    missing = result.document()["missing"]
    assert "report: not written — no file writer was given (PipelineHooks.files)" in missing


@pytest.mark.parametrize(
    ("values", "error", "message"),
    [
        ({"task": "image", "repeats": 2}, UsageError, "--memory-budget, --telemetry-from and --repeat are"),
        ({"task": "train", "memory_budget_gib": 1.0}, UsageError, "are for --task text"),
        ({"task": "video"}, UsageError, "--task must be text, image or train, got 'video'"),
        ({"device": "tpu"}, UsageError, "--device must be one of auto, cpu, cuda (got 'tpu')"),
        ({"html": "report.txt"}, InvalidInputError, "--html report.txt: give a file name ending in .html"),
    ],
)
def test_what_a_task_cannot_do_is_refused_before_anything_is_opened(
    tmp_path: Path, values: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=re.escape(message)):
        run_pipeline(options(tmp_path, **values), Heard().hooks())
    assert not (tmp_path / "runs.sqlite").exists()


def test_the_options_bound_their_numbers_as_the_command_line_does() -> None:
    assert (run_cmd.MAX_MEMORY_BUDGET_GIB, run_cmd.MAX_REPEATS) == (pipeline.MAX_MEMORY_BUDGET_GIB,
                                                                   pipeline.MAX_REPEATS)
    with pytest.raises(UsageError, match="repeats"):
        checked(RunOptions, {"repeats": 101})
    with pytest.raises(UsageError, match="memory_budget_gib"):
        checked(RunOptions, {"memory_budget_gib": float("inf")})
    with pytest.raises(UsageError, match="colour"):
        checked(RunOptions, {"colour": "red"})


def test_the_torch_engine_reports_only_what_it_resolved() -> None:
    from gpuledger.engines import EngineOptions, make_engine
    from gpuledger.engines.torch.engine import TorchEngine
    from gpuledger.kinds.text.options import torch_spec

    engine = make_engine(torch_spec("dummy:smollm2-135m"), EngineOptions())
    assert isinstance(engine, TorchEngine)
    with pytest.raises(EngineError, match="did not report its device and memory"):
        engine.report()
