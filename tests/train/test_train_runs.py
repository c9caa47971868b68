"""Training runs through the bench lifecycle on this machine's CPU: a tiny real model saved by the test and
loaded from disk learns a repeated pattern (the loss falls by at least half in 30 steps, the run stores the
curve, the report plots it with the step time); the memory estimate against the CPU allocator's peak; a
model that cannot fit is refused before anything is built (exit 8, the figures in the message); Ctrl-C
keeps the finished steps as an incomplete run."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from gpuledger.bench.runner import Hooks, run_bench
from gpuledger.engines.torch import trainplan as tp
from gpuledger.engines.torch.device import select_device
from gpuledger.errors import ResourceError
from gpuledger.kinds.train.options import train_spec
from gpuledger.kinds.train.spec import TrainSpec
from gpuledger.kinds.train.summary import TrainingSummary, step_of
from gpuledger.store import open_store

torch = pytest.importorskip("torch", reason="the training tests need torch (pip install '.[torch]')")

CLI = Callable[..., tuple[int, str, str]]


def test_a_tiny_model_from_disk_learns_a_pattern_and_the_report_plots_the_curve(
    tiny_llama_dir: Path, pattern_file: Path, tmp_path: Path, cli: CLI
) -> None:
    db = f"sqlite:///{tmp_path / 's.sqlite'}"
    code, out, err = cli(
        "bench",
        "--task",
        "train",
        "--engine",
        "torch",
        "--model",
        str(tiny_llama_dir),
        "--data",
        str(pattern_file),
        "--batch-size",
        "4",
        "--seq-len",
        "64",
        "--steps",
        "30",
        "--warmup-steps",
        "0",
        "--learning-rate",
        "3e-3",
        "--device",
        "cpu",
        "--no-telemetry",
        "--db",
        db,
        "--json",
    )
    assert code == 0, err
    run = json.loads(out)
    s = run["summary"]
    curve = [p["loss"] for p in s["loss_curve"]]
    assert len(curve) == 30 and all(isinstance(x, float) for x in curve)
    assert curve[-1] <= curve[0] / 2, curve
    assert run["config"]["data"]["kind"] == "file" and run["config"]["data"]["tokens"] > 0
    assert run["config"]["model"]["kind"] == "pretrained"  # loaded through from_pretrained, not built
    html = tmp_path / "r.html"
    code, _, err = cli("report", run["id"], "--db", db, "--html", str(html))
    assert code == 0, err
    text = html.read_text()
    assert "Loss per step" in text and "Step time per step" in text
    code, out, err = cli("report", run["id"], "--db", db, "--json")
    section = next(x for x in json.loads(out)["sections"] if x["key"] == "training")
    figures = {f["key"]: f for f in section["figures"]}
    assert figures["train_loss"]["series"][0]["points"] == 30
    assert figures["train_step_time"]["series"][0]["points"] == 30


@pytest.mark.parametrize(("dtype", "checkpointing"), [("fp32", False), ("fp32", True), ("bf16", False)])
def test_the_memory_estimate_is_within_30_percent_of_the_cpu_allocators_peak(
    tiny_llama_dir: Path, tmp_path: Path, dtype: str, checkpointing: bool
) -> None:
    spec = train_spec(
        str(tiny_llama_dir),
        device="cpu",
        dtype=dtype,
        batch_size=8,
        seq_len=256,
        steps=1,
        warmup_steps=2,
        activation_checkpointing=checkpointing,
        telemetry=False,
    )
    with open_store(f"sqlite:///{tmp_path / 's.sqlite'}") as store:
        run = run_bench(spec, store)
    assert isinstance(run.config, TrainSpec) and run.config.memory_estimate is not None
    estimate = run.config.memory_estimate.model_bytes
    peak = run.server["details"]["peak_memory"]
    assert peak["source"] == "torch.profiler memory events (CPU allocator)"
    assert 0.7 <= estimate / peak["value"] <= 1.3, (estimate, peak)


def test_the_estimate_says_when_activation_checkpointing_would_fit() -> None:
    from gpuledger.engines.torch import models as tm
    from gpuledger.engines.torch.trainer import TrainEngine

    plan = tm.plan_model("dummy:smollm2-135m")
    dev = select_device("cpu")
    need = tp.estimate_training_memory(
        plan.params,
        plan.shape,
        dtype="fp32",
        optimizer="adamw",
        micro_batch=4,
        seq_len=4096,
        checkpointing=False,
        device=dev,
    )
    # a device with room for the checkpointed step, not for the full one
    from dataclasses import replace

    room = (need.total_with(True) + need.total_bytes) // 2
    small = replace(dev, free_memory_bytes=room)
    est = tp.estimate_training_memory(
        plan.params,
        plan.shape,
        dtype="fp32",
        optimizer="adamw",
        micro_batch=4,
        seq_len=4096,
        checkpointing=False,
        device=small,
    )
    assert not est.fits and est.total_with(True) <= room
    engine = TrainEngine(train_spec("dummy:smollm2-135m"), env=None)
    with pytest.raises(ResourceError) as err:
        engine._ensure_fits(plan, est, small)
    assert err.value.exit_code == 8 and err.value.hint == "--activation-checkpointing would make it fit"
    for part in ("weights", "gradients", "optimizer states", "activations", "available"):
        assert part in err.value.message


def test_a_model_that_cannot_fit_is_refused_with_its_figures_and_no_run(tmp_path: Path, cli: CLI) -> None:
    if psutil.virtual_memory().available > 200 * 1024**3:
        pytest.skip("this machine has the RAM to train qwen2.5-7b in fp32")
    db = f"sqlite:///{tmp_path / 's.sqlite'}"
    code, _, err = cli(
        "bench",
        "--task",
        "train",
        "--model",
        "dummy:qwen2.5-7b",
        "--device",
        "cpu",
        "--seq-len",
        "128",
        "--db",
        db,
    )
    assert code == 8, err
    err = " ".join(err.split())  # the terminal wraps the line
    assert "does not fit in the RAM" in err and "Traceback" not in err
    for part in (
        "weights 28.4 GiB",
        "gradients 28.4 GiB",
        "optimizer states 56.7 GiB (adamw)",
        "activations",
    ):
        assert part in err
    code, out, _ = cli("runs", "--db", db, "--json")
    assert code == 0 and json.loads(out) == []


def test_ctrl_c_keeps_the_finished_steps_as_an_incomplete_run(tiny_llama_dir: Path, tmp_path: Path) -> None:
    spec = train_spec(
        str(tiny_llama_dir), device="cpu", batch_size=2, seq_len=32, steps=50, warmup_steps=1, telemetry=False
    )

    def interrupt(done: int, total: int | None) -> None:
        if done == 3:
            os.kill(os.getpid(), signal.SIGINT)

    with open_store(f"sqlite:///{tmp_path / 's.sqlite'}") as store:
        run = run_bench(spec, store, hooks=Hooks(on_progress=interrupt))
        records = store.get_requests(run.id)
    s = run.summary
    assert isinstance(s, TrainingSummary)
    assert run.status == "incomplete" and s.interrupted is not None and s.interrupted.signal == "SIGINT"
    assert 3 <= len(records) < 50 and s.steps_total == len(records) == s.interrupted.finished_requests
    assert [step_of(r).step for r in records] == list(range(len(records)))  # type: ignore[union-attr]
    assert s.verdict is not None and (s.verdict.check("finished") or s.verdict).status == "warn"
