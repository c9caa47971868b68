"""The energy of a whole training job (``cost RUN --train-tokens N``, issue #33 item 7) is the energy its
price counts: the hours training at the serving power, the idle hours the profile's utilisation leaves at
the idle power, both times the PUE — so that at the profile's electricity price it is the job's energy
cost — and it says that it is an estimate and what it assumes."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from cost_runs import build_run

from gpuledger.catalog import Catalog
from gpuledger.cli.main import main
from gpuledger.cost import CostProfile, cost_of_run
from gpuledger.kinds.train.pricing import job_cost
from gpuledger.kinds.train.summary import TrainStep, summarize_training
from gpuledger.records import RequestRecord, RunInfo

OWNED = CostProfile(name="owned-train", gpu_price=30_000, amortisation_months=36, electricity_per_kwh=0.20,
                    pue=1.4, utilisation=0.5, idle_power_w=90.0)
TOKENS = 4e9


def steps(n: int = 20, step_s: float = 0.5, tokens: int = 4096) -> list[RequestRecord]:
    out = []
    for i in range(n):
        step = TrainStep(step=i, forward_s=step_s * 0.3, backward_s=step_s * 0.6, optimizer_s=step_s * 0.1,
                         step_s=step_s, loss=2.0, nonfinite=False, tokens=tokens, samples=4, micro_batches=1)
        out.append(RequestRecord(index=i, t_send=i * step_s, t_end=(i + 1) * step_s, stage="train",
                                 server_timings={"train": step.model_dump(mode="json")}))
    return out


def training_run() -> RunInfo:
    """A training run on one H100 that measured 600 W over its window (8,192 training tokens/s)."""
    summary = summarize_training(steps(), seq_len=1024, flops_per_token=1e9)
    base = build_run("train001", window_s=summary.window_s, power_w=600.0)
    return dataclasses.replace(base, engine="torch-train", model="tiny", summary=summary)


def test_the_jobs_energy_is_what_its_price_counts_pue_and_idle_hours_included(catalog: Catalog) -> None:
    cost = cost_of_run(training_run(), OWNED, catalog=catalog)
    job = job_cost(cost, TOKENS)
    compute_h = TOKENS / 8192 / 3600
    assert job.compute_hours == pytest.approx(compute_h) and job.hours == pytest.approx(2 * compute_h)
    energy = job.energy
    assert energy is not None
    assert energy.training_kwh == pytest.approx(compute_h * 600 / 1000)
    assert energy.idle_kwh == pytest.approx(compute_h * 90 / 1000)  # as many idle hours at 50 %
    assert job.energy_kwh == energy.kwh == pytest.approx((600 + 90) * compute_h / 1000 * 1.4)
    # at the profile's electricity price it is the job's energy cost, to the cent
    assert job.energy_kwh * 0.20 == pytest.approx(job.by_component.energy)
    assert energy.estimate is True
    assumes = " ".join(energy.assumes)
    assert "PUE 1.4" in assumes and "idle_power_w (90 W per device)" in assumes and "50%" in assumes


def test_without_idle_power_the_idle_hours_are_at_serving_power_and_it_says_so(catalog: Catalog) -> None:
    profile = OWNED.model_copy(update={"idle_power_w": None, "pue": 1.0})
    job = job_cost(cost_of_run(training_run(), profile, catalog=catalog), TOKENS)
    assert job.energy is not None
    assert job.energy.idle_kwh == pytest.approx(job.energy.training_kwh)
    assert "the serving power (no idle_power_w in the profile): an upper bound" in " ".join(
        job.energy.assumes)
    assert job.energy_kwh * 0.20 == pytest.approx(job.by_component.energy)


def test_the_terminal_marks_the_jobs_energy_an_estimate_and_says_what_it_assumes(
    catalog: Catalog, store_run: Callable[[RunInfo], str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = store_run(training_run())
    profile = tmp_path / "owned.json"
    profile.write_text(json.dumps(OWNED.model_dump(mode="json", exclude_none=True)))
    assert main(["cost", run_id, "--profile", str(profile), "--train-tokens", "4e9"]) == 0
    text = " ".join(capsys.readouterr().out.replace("│", " ").split())
    kwh = (600 + 90) * TOKENS / 8192 / 3600 / 1000 * 1.4
    assert f"energy (estimate) {kwh:,.4g} kWh = (" in text and "idle) × PUE 1.4" in text
    assert "energy assumes: the run's rate and power hold for the whole job" in text
    assert "priced in the energy component at 0.2 USD/kWh" in text


def test_cost_with_train_tokens_answers_the_job_first_then_the_price_per_unit(
    store_run: Callable[[RunInfo], str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = store_run(training_run())
    profile = tmp_path / "owned.json"
    profile.write_text(json.dumps(OWNED.model_dump(mode="json", exclude_none=True)))
    assert main(["cost", run_id, "--profile", str(profile), "--train-tokens", "4e9"]) == 0
    lines = [" ".join(line.replace("│", " ").split()) for line in capsys.readouterr().out.splitlines()]
    lines = [line for line in lines if line]
    job_table = next(i for i, line in enumerate(lines) if "Training job (USD)" in line)
    # the first thing printed is the job's answer: its money, hours and energy, marked an estimate
    answer = " ".join(lines[:job_table])
    assert answer.startswith("Training 4e+09 tokens on this stack: ")
    kwh = (600 + 90) * TOKENS / 8192 / 3600 / 1000 * 1.4
    assert " USD, " in answer and " hours (" in answer and f"energy {kwh:,.4g} kWh (estimate)" in answer
    per_unit = next(i for i, line in enumerate(lines) if "Cost per unit of work" in line)
    hourly = next(i for i, line in enumerate(lines) if "Hourly cost (USD per wall-clock hour)" in line)
    assert job_table < hourly < per_unit
