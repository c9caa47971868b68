"""``doctor --deep``'s training probe: a few real training steps (forward, backward, optimizer) in the probe's
child process on each device, and the finding when the device computes NaN or nothing. The child runs the
real torch of this machine; the broken devices are that torch with one function replaced at import (a
``sitecustomize`` on the child's path: the import boundary)."""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpuledger.doctor import diagnose
from gpuledger.facts.frameworks import probe_torch
from gpuledger.facts.model import Facts, TorchFacts, TorchProbe, TrainProbeResult
from gpuledger.facts.runner import SubprocessRunner

pytest.importorskip("torch", reason="the probe's child imports torch")

BROKEN = {
    # every activation is NaN: the loss and the gradients are too
    "nan": "import torch\n_tanh = torch.tanh\ntorch.tanh = lambda x: _tanh(x) * float('nan')\n",
    # the optimizer's update does nothing: the weights never move, the loss never changes
    "nothing": "import torch\ntorch.optim.SGD.step = lambda self, closure=None: None\n",
}


def _probe(tmp_path: Path, broken: str | None = None) -> TorchProbe:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if broken is not None:
        (tmp_path / "sitecustomize.py").write_text(BROKEN[broken])
        env["PYTHONPATH"] = str(tmp_path)
    return probe_torch(SubprocessRunner(env), sys.executable, deep=True)


def _facts(probe: TorchProbe) -> Facts:
    facts = Facts(collected_at=datetime.now(UTC), root="/")
    facts.frameworks.torch = TorchFacts(installed=True, build="cpu", probe=probe, source="torch/version.py")
    return facts


def _findings(probe: TorchProbe) -> dict[str, list[str]]:
    return {f.id: f.evidence for f in diagnose(_facts(probe)) if f.id.startswith("torch.train_step")}


def test_a_device_that_trains_is_reported_with_its_losses(tmp_path: Path) -> None:
    probe = _probe(tmp_path)
    assert probe.ok, probe.error
    (result,) = probe.train
    assert result.device == "cpu" and len(result.losses) == result.steps == 4
    assert all(v is not None for v in result.losses)
    assert result.losses[-1] < result.losses[0]  # it learned
    assert result.grad_norm and result.param_change and not result.nonfinite
    found = _findings(probe)
    assert list(found) == ["torch.train_step_ok"]
    assert any(line.startswith("loss per step: ") for line in found["torch.train_step_ok"])


def test_a_device_that_computes_nan_is_an_error(tmp_path: Path) -> None:
    probe = _probe(tmp_path, "nan")
    (result,) = probe.train
    assert result.nonfinite and result.losses == [None] * 4
    found = _findings(probe)
    assert list(found) == ["torch.train_step_nan"]
    assert "loss per step: NaN/inf, NaN/inf, NaN/inf, NaN/inf" in found["torch.train_step_nan"]


def test_a_device_whose_step_changes_nothing_is_an_error(tmp_path: Path) -> None:
    probe = _probe(tmp_path, "nothing")
    (result,) = probe.train
    assert result.param_change == 0.0 and len(set(result.losses)) == 1
    assert list(_findings(probe)) == ["torch.train_step_no_change"]


def test_a_probe_that_failed_or_could_not_be_read_is_a_warning() -> None:
    failed = TrainProbeResult(
        device="cuda:0",
        device_name="NVIDIA H100",
        dtype="float32",
        steps=4,
        error="RuntimeError: CUDA error: no kernel image is available",
    )
    probe = TorchProbe(ran=True, ok=True, train=[failed], train_error="unreadable training probe result: x")
    found = _findings(probe)
    assert list(found) == ["torch.train_step_failed"]
    facts_ids = [f.id for f in diagnose(_facts(probe))]
    assert facts_ids.count("torch.train_step_failed") == 2  # the device's error, and the unreadable result
