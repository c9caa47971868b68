"""The training summary from step records (rates over the window, step-time percentiles, the loss curve, MFU
against the devices' peak or the reason there is none), the training run's validity verdict (steps, not
requests), and compare's warnings when two training runs did not train the same thing."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gpuledger.bench.validity import verdict
from gpuledger.kinds.train.spec import TrainSpec
from gpuledger.kinds.train.summary import MAX_CURVE_POINTS, TrainStep, summarize_training
from gpuledger.records import RequestRecord, RunInfo
from gpuledger.store import open_store


def _records(
    times: list[float], losses: list[float | None] | None = None, *, tokens: int = 128, gap: float = 0.0
) -> list[RequestRecord]:
    """Steps one after the other: step i takes ``times[i]`` s, ``gap`` s between steps."""
    out = []
    t = 0.0
    for i, took in enumerate(times):
        loss = (losses or [2.0] * len(times))[i]
        step = TrainStep(
            step=i,
            forward_s=took * 0.3,
            backward_s=took * 0.6,
            optimizer_s=took * 0.1,
            step_s=took,
            loss=loss,
            nonfinite=loss is None,
            tokens=tokens,
            samples=tokens // 64,
            micro_batches=1,
        )
        out.append(
            RequestRecord(
                index=i,
                t_send=t,
                t_end=t + took,
                stage="train",
                server_timings={"train": step.model_dump(mode="json")},
            )
        )
        t += took + gap
    return out


def test_rates_are_over_the_window_and_the_step_time_is_per_step() -> None:
    s = summarize_training(_records([1.0, 1.0, 2.0, 1.0], gap=0.5), seq_len=64, flops_per_token=1e9)
    assert s.steps_total == 4 and s.tokens_total == 512 and s.samples_total == 8
    assert s.window_s == pytest.approx(6.5)  # 5 s of steps and three 0.5 s gaps
    assert s.training_tokens_per_s == pytest.approx(512 / 6.5)
    assert s.steps_per_s == pytest.approx(4 / 6.5)
    assert s.step_time_s.p50 == pytest.approx(1.0) and s.step_time_s.max == pytest.approx(2.0)
    assert s.forward_s.mean == pytest.approx(0.3 * 5 / 4)
    assert s.tokens_per_step == 128 and s.samples_per_step == 2
    assert s.work()["training_token"].per_s == s.training_tokens_per_s
    assert [p.step for p in s.loss_curve] == [0, 1, 2, 3]


def test_mfu_is_model_flops_per_second_over_every_devices_peak() -> None:
    s = summarize_training(
        _records([1.0] * 4),
        flops_per_token=1e12,
        peak_flops_per_s=1e15,
        world_size=2,
        peak_source="NVIDIA H200: ...",
    )
    assert s.model_flops_per_s == pytest.approx(128e12)
    assert s.mfu == pytest.approx(128e12 / (1e15 * 2))
    assert s.mfu_quantity().value == pytest.approx(6.4) and s.mfu_reason is None


def test_without_a_peak_mfu_is_a_reason_never_a_zero() -> None:
    s = summarize_training(
        _records([1.0] * 3),
        flops_per_token=1e9,
        mfu_reason="no peak FLOP/s for AMD EPYC (a CPU: the GPU catalog has no CPUs)",
    )
    assert s.mfu is None
    figure = dict(s.key_figures())["MFU"]
    assert figure.value is None and figure.text().startswith("n/a — no peak FLOP/s for AMD EPYC")


def test_a_nan_loss_is_counted_and_kept_out_of_the_curve_figures() -> None:
    s = summarize_training(_records([1.0] * 3, [3.0, None, 2.5]))
    assert s.nonfinite_loss_steps == 1 and (s.loss_first, s.loss_last, s.loss_min) == (3.0, 2.5, 2.5)
    assert "NaN/inf" in " ".join(s.fidelity_notes())


def test_a_long_run_keeps_an_even_sample_of_its_curve_with_the_last_step() -> None:
    s = summarize_training(_records([0.01] * (MAX_CURVE_POINTS * 2 + 1)))
    assert len(s.loss_curve) <= MAX_CURVE_POINTS + 1 and s.loss_curve_stride == 3
    assert s.loss_curve[0].step == 0 and s.loss_curve[-1].step == MAX_CURVE_POINTS * 2


def _run(spec: dict[str, Any], records: list[RequestRecord], **info: Any) -> RunInfo:
    config = TrainSpec.model_validate(
        {"engine": "torch-train", "model": {"spec": "dummy:smollm2-135m"}, "device": "cpu", **spec}
    )
    warm = config.warmup_requests()
    return RunInfo(
        id="r1",
        engine="torch-train",
        status="complete",
        config=config,
        summary=config.summarize(records),
        workload={"warmup": {"requests": warm}},
        client={"in_process_engine": True, "cpu_util_ratio": 1.0, "machine_cpu_busy_ratio": 1.0},
        **info,
    )


def test_the_verdict_judges_steps_and_says_why_request_rules_do_not_apply() -> None:
    run = _run({"warmup_steps": 2}, records := _records([1.0] * 12))
    v = verdict(run, records)
    checked = {c.name: c for c in v.checks}
    assert set(checked) == {
        "samples",
        "window",
        "warmup",
        "steady_state",
        "noise",
        "loss",
        "errors",
        "finished",
    }
    assert v.status == "pass", [c.line() for c in v.problems()]
    why = {n.name: n.why for n in v.not_checked}
    assert "no send schedule" in why["send_schedule"] and "no prefix cache" in why["prefix_cache"]
    assert "counted by the engine" in why["token_source"] and "no server" in why["server_queue"]
    # Without its usable CPUs a CPU run cannot tell other processes' load from its own (validity tests: with).
    assert "cannot be told" in why["cpu_contention"] and "in-process" in why["client_bound"]


def test_a_nan_loss_fails_the_verdict() -> None:
    run = _run({}, records := _records([1.0] * 12, [2.0] * 11 + [None]))
    loss = verdict(run, records).check("loss")
    assert loss is not None and loss.status == "fail" and "NaN or inf" in loss.why


def test_a_cold_first_step_without_warmup_warns_and_few_steps_warn() -> None:
    run = _run({"warmup_steps": 0}, records := _records([3.0, 1.0, 1.0, 1.0, 1.1]))
    v = verdict(run, records)
    warm, samples = v.check("warmup"), v.check("samples")
    assert warm is not None and warm.status == "warn" and "3x the rest's median" in warm.why
    assert samples is not None and samples.status == "warn" and "5 measured steps" in samples.why


def test_steps_that_slow_down_are_not_a_steady_state() -> None:
    run = _run({}, records := _records([1.0] * 6 + [1.6] * 6))
    steady = verdict(run, records).check("steady_state")
    assert steady is not None and steady.status == "fail" and "rose" in steady.why


def test_time_between_steps_lowers_the_window_check() -> None:
    run = _run({}, records := _records([1.0] * 12, gap=0.2))
    window = verdict(run, records).check("window")
    assert (
        window is not None
        and window.status == "warn"
        and math.isclose(window.figure or 0, 12 / 14.2, rel_tol=1e-6)
    )


# ---------------------------------------------------------------------------------- compare


def _stored(url: str, label: str, *, model: str, seq: int, batch: int, dtype: str, rate: float) -> str:
    config = TrainSpec.model_validate(
        {
            "engine": "torch-train",
            "model": {"spec": model, "name": model},
            "device": "cpu",
            "dtype": dtype,
            "batch_size": batch,
            "seq_len": seq,
            "grad_accum": 1,
            "steps": 8,
            "warmup_steps": 2,
            "optimizer": "adamw",
        }
    )
    step_s = batch * seq / rate
    summary = config.summarize(_records([step_s] * 8, tokens=batch * seq))
    cpu = {
        "device": "cpu",
        "vendor": "cpu",
        "name": "AMD EPYC",
        "mean_power_w": None,
        "energy_j": None,
        "peak_util_ratio": 1.0,
        "sources": ["psutil"],
        "valid": True,
    }
    with open_store(url) as store:
        run_id = store.create_run(
            RunInfo(
                id="",
                label=label,
                engine="torch-train",
                model=model,
                config=config,
                workload=config.workload_record({}, {"requests": 2}),
                started_at=datetime(2026, 1, 1, tzinfo=UTC),
            )
        )
        store.update_run(run_id, status="complete", summary=summary, telemetry_summary=[cpu], duration_s=10.0)
    return run_id


def test_compare_warns_when_model_sequence_length_global_batch_or_dtype_differ(
    tmp_path: Path, cli: Callable[..., tuple[int, str, str]]
) -> None:
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    a = _stored(url, "a", model="dummy:smollm2-135m", seq=64, batch=2, dtype="fp32", rate=100.0)
    b = _stored(url, "b", model="dummy:qwen2.5-0.5b", seq=128, batch=4, dtype="bf16", rate=80.0)
    code, out, err = cli("compare", a, b, "--profile", "cpu-cloud", "--db", url, "--json")
    assert code == 0, err
    doc = json.loads(out)
    warnings = " | ".join(doc["pairs"][0]["warnings"])
    assert "seq_len = 64 vs 128" in warnings and "dtype = 'fp32' vs 'bf16'" in warnings
    assert "global_batch = 2 vs 4" in warnings
    # What each run trained is the pair's like-for-like differences, with both sides (not warned again).
    differences = {d["aspect"]: d for d in doc["pairs"][0]["differences"]}
    model = differences["model"]
    assert (model["a"], model["b"]) == ("dummy:smollm2-135m", "dummy:qwen2.5-0.5b")
    assert differences["workload"]["a"].startswith("128 tokens per step")
    assert differences["workload"]["b"].startswith("512 tokens per step")
    assert differences["precision"]["a"] == "fp32" and differences["precision"]["b"] == "bf16"
    assert not doc["pairs"][0]["like_for_like"]
    assert doc["runs"][0]["usd_per_1m_training_tokens"] > 0


def test_the_same_training_workload_is_like_for_like(
    tmp_path: Path, cli: Callable[..., tuple[int, str, str]]
) -> None:
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    a = _stored(url, "a", model="dummy:smollm2-135m", seq=64, batch=2, dtype="fp32", rate=100.0)
    b = _stored(url, "b", model="dummy:smollm2-135m", seq=64, batch=2, dtype="fp32", rate=50.0)
    code, out, err = cli("compare", a, b, "--profile", "cpu-cloud", "--db", url, "--json")
    assert code == 0, err
    pair = json.loads(out)["pairs"][0]
    assert not [w for w in pair["warnings"] if "workload" in w or "tokens per step" in w]
    assert pair["ratio"] == pytest.approx(2.0)
    assert pair["like_for_like"] is True and pair["differences"] == [], pair["differences"]
