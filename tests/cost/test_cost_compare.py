"""Compare: the ratio, its decomposition, break-even values, sensitivity and warnings."""

from __future__ import annotations

import math
from typing import Any

import pytest
from cost_runs import MakeRun

from gpuledger.catalog import Catalog
from gpuledger.cost import CostProfile, compare, cost_of_run, evaluate
from gpuledger.errors import InvalidInputError, UsageError

NV = CostProfile(
    name="nv",
    gpu_price=30_000,
    electricity_per_kwh=0.10,
    pue=1.3,
    labour_rate_per_hour=100,
    setup_hours=4,
    utilisation=0.6,
)
AMD = CostProfile(
    name="amd",
    gpu_price=15_000,
    electricity_per_kwh=0.10,
    pue=1.3,
    labour_rate_per_hour=100,
    setup_hours=80,
    maintenance_hours_per_month=10,
    utilisation=0.5,
)


def _pair(make_run: MakeRun, catalog: Catalog):  # type: ignore[no-untyped-def]
    a = cost_of_run(make_run("nvrun001", output_tps=2400, power_w=620.0), NV, catalog=catalog)
    b = cost_of_run(
        make_run("amdrun01", output_tps=960, gpu="AMD Instinct MI300X", vendor="amd", power_w=700.0),
        AMD,
        catalog=catalog,
    )
    return a, b


def test_ratio_is_tokens_per_money_of_a_over_b_and_reciprocal(make_run: MakeRun, catalog: Catalog) -> None:
    a, b = _pair(make_run, catalog)
    ab, ba = compare([a, b]), compare([b, a])
    expected = a.evaluation.per_money("output_token") / b.evaluation.per_money("output_token")
    assert ab.ratio == pytest.approx(expected)
    assert ab.ratio * ba.ratio == pytest.approx(1.0)
    assert ab.document().model_dump(mode="json")["ratio"] == ab.ratio


def test_decomposition_multiplies_back_to_the_ratio(make_run: MakeRun, catalog: Catalog) -> None:
    a, b = _pair(make_run, catalog)
    dec = compare([a, b]).pairs[0].decomposition
    assert dec.throughput_ratio == pytest.approx(2400 / 960)
    assert dec.utilisation_ratio == pytest.approx(0.6 / 0.5)
    assert dec.hourly_cost_ratio == pytest.approx(b.evaluation.hourly.total / a.evaluation.hourly.total)
    assert dec.throughput_ratio * dec.utilisation_ratio * dec.hourly_cost_ratio == pytest.approx(
        compare([a, b]).ratio
    )
    assert dec.share_of_log_ratio is not None
    carried = dec.share_of_log_ratio
    assert carried.throughput + carried.utilisation + carried.hourly_cost == pytest.approx(1.0)
    diff = dec.hourly.difference_as_share_of_a
    assert sum(v for _, v in diff.items()) == pytest.approx(dec.hourly_cost_ratio - 1)
    assert diff.labour > 0  # B's two weeks of setup and its maintenance hours


def test_every_break_even_value_really_equalises(make_run: MakeRun, catalog: Catalog) -> None:
    a, b = _pair(make_run, catalog)
    pair = compare([a, b]).pairs[0]
    found = {be.input: be for be in pair.break_even}
    assert set(found) == {"gpu_price", "output_tokens_per_s", "utilisation", "setup_hours"}
    for be in pair.break_even:
        if be.value is not None:
            assert be.verified_ratio == pytest.approx(1.0, abs=1e-9), be
        else:
            assert be.reason
    # independently: B at its break-even throughput costs what A costs per output token
    tps = found["output_tokens_per_s"].value
    assert tps is not None
    import dataclasses

    b_out = b.inputs.rates["output_token"]
    b_fast = dataclasses.replace(
        b.inputs,
        rates={
            **b.inputs.rates,
            "output_token": tps,
            "input_token": b.inputs.rates["input_token"] * tps / b_out,
        },
    )
    assert evaluate(b_fast).cost_per("output_token") == pytest.approx(a.evaluation.cost_per("output_token"))


def test_break_even_without_a_solution_says_why(make_run: MakeRun, catalog: Catalog) -> None:
    a, b = _pair(make_run, catalog)
    pair = compare([a, b]).pairs[0]
    found = {be.input: be for be in pair.break_even}
    # A is ~3x cheaper per token: B cannot catch up by utilisation alone, nor by setup hours
    assert found["utilisation"].value is None and "100 %" in (found["utilisation"].reason or "")
    assert found["setup_hours"].value is None and "zero setup hours" in (found["setup_hours"].reason or "")
    assert found["gpu_price"].value is None and "other costs alone" in (found["gpu_price"].reason or "")


def test_break_even_in_the_other_direction_has_values(make_run: MakeRun, catalog: Catalog) -> None:
    a, b = _pair(make_run, catalog)
    pair = compare([b, a]).pairs[0]  # now B is the cheaper NVIDIA run: how bad may it get?
    found = {be.input: be for be in pair.break_even}
    for name in ("gpu_price", "utilisation", "setup_hours"):
        assert found[name].value is not None and found[name].verified_ratio == pytest.approx(1.0), name
    assert found["gpu_price"].value > NV.gpu_price  # type: ignore[operator]
    assert 0 < found["utilisation"].value < NV.utilisation  # type: ignore[operator]


def test_sensitivity_moves_each_input_20_percent_and_sorts_by_swing(
    make_run: MakeRun, catalog: Catalog
) -> None:
    a, b = _pair(make_run, catalog)
    pair = compare([a, b]).pairs[0]
    rows = pair.sensitivity
    swings = [r.swing for r in rows]
    assert swings == sorted(swings, reverse=True)
    names = {(r.run, r.input) for r in rows}
    assert {
        ("A", "gpu_price"),
        ("B", "gpu_price"),
        ("A", "throughput"),
        ("B", "setup_hours"),
        ("B", "maintenance_hours_per_month"),
        ("A", "power_w"),
        ("A", "utilisation"),
    } <= names
    thr_a = next(r for r in rows if (r.run, r.input) == ("A", "throughput"))
    assert thr_a.ratio_at_plus_20pct == pytest.approx(pair.ratio * 1.2)
    assert thr_a.ratio_at_minus_20pct == pytest.approx(pair.ratio * 0.8)


def test_sensitivity_caps_utilisation_at_one(make_run: MakeRun, catalog: Catalog) -> None:
    full = NV.model_copy(update={"utilisation": 1.0})
    a = cost_of_run(make_run("a0000001"), full, catalog=catalog)
    b = cost_of_run(make_run("b0000001"), NV, catalog=catalog)
    row = next(r for r in compare([a, b]).pairs[0].sensitivity if (r.run, r.input) == ("A", "utilisation"))
    assert row.note and "capped" in row.note
    assert row.ratio_at_plus_20pct == pytest.approx(compare([a, b]).ratio)


def test_different_currencies_are_refused_not_converted(make_run: MakeRun, catalog: Catalog) -> None:
    a = cost_of_run(make_run("a0000001"), CostProfile(rental_per_gpu_hour=2.0), catalog=catalog)
    b = cost_of_run(
        make_run("b0000001"), CostProfile(currency="CNY", rental_per_gpu_hour=14.0), catalog=catalog
    )
    with pytest.raises(InvalidInputError, match="different currencies"):
        compare([a, b])


def test_compare_needs_two_runs_and_a_known_basis(make_run: MakeRun, catalog: Catalog) -> None:
    a = cost_of_run(make_run(), NV, catalog=catalog)
    with pytest.raises(UsageError):
        compare([a])
    with pytest.raises(UsageError):
        compare([a, a], basis="words")


def test_total_basis_counts_input_tokens_too(make_run: MakeRun, catalog: Catalog) -> None:
    a = cost_of_run(make_run("a0000001", output_tps=1000, input_tps=3000), NV, catalog=catalog)
    b = cost_of_run(make_run("b0000001", output_tps=1000, input_tps=1000), NV, catalog=catalog)
    assert compare([a, b], basis="output").ratio == pytest.approx(1.0)
    assert compare([a, b], basis="total").ratio == pytest.approx(2.0)


def test_more_than_two_runs_compare_each_to_the_first(make_run: MakeRun, catalog: Catalog) -> None:
    runs = [cost_of_run(make_run(f"run0000{i}", output_tps=1000 * i), NV, catalog=catalog) for i in (1, 2, 4)]
    comp = compare(runs)
    assert [p.b.run.id for p in comp.pairs] == ["run00002", "run00004"]
    assert [p.ratio for p in comp.pairs] == pytest.approx([0.5, 0.25])
    assert "ratio" not in comp.document().model_dump(mode="json")


def test_warnings_for_runs_that_are_not_like_for_like(make_run: MakeRun, catalog: Catalog) -> None:
    a = cost_of_run(
        make_run(
            "a0000001",
            model="qwen2.5-7b",
            workload={"dataset": "sharegpt", "output_len": 256},
            environment={"torch": "2.5.1+cu121", "engines": {"vllm": "0.6.3"}, "driver": "550.54"},
        ),
        NV,
        catalog=catalog,
    )
    b = cost_of_run(
        make_run(
            "b0000001",
            model="llama-3.1-8b",
            output_tps=500,
            window_s=100,
            num_ok=50,
            workload={"dataset": "sharegpt", "output_len": 1024},
            gpu="AMD Instinct MI300X",
            vendor="amd",
            power_w=None,
            environment={"torch": "2.4.0+rocm6.1", "engines": {"vllm": "0.6.3"}, "rocm": "6.1",
                         "driver": "6.8.5"},
            status="incomplete",
        ),
        AMD,
        catalog=catalog,
    )
    pair = compare([a, b]).pairs[0]
    warnings = "\n".join(pair.warnings)
    # The model is a like-for-like difference, with both sides; the warnings do not say it again.
    model = pair.likeness.differs("model")
    assert model is not None and (model.a, model.b) == ("qwen2.5-7b", "llama-3.1-8b")
    assert "different models" not in warnings
    assert "different workloads: output_len = 256 vs 1024" in warnings
    assert "torch = '2.5.1+cu121' (A) vs '2.4.0+rocm6.1' (B)" in warnings
    assert "vllm" not in warnings  # same version
    assert "driver" not in warnings  # different vendors: the driver differs by design
    assert "is incomplete" in warnings
    assert "power basis differs" in warnings
    assert "different utilisation" in warnings


def test_same_vendor_driver_drift_is_warned(make_run: MakeRun, catalog: Catalog) -> None:
    a = cost_of_run(
        make_run("a0000001", environment={"driver": "550.54", "cuda": "12.4", "torch": "2.5.1+cu124"}),
        NV,
        catalog=catalog,
    )
    b = cost_of_run(
        make_run("b0000001", environment={"driver": "535.1", "cuda": "12.2", "torch": "2.5.1+cu121"}),
        NV,
        catalog=catalog,
    )
    warnings = compare([a, b]).pairs[0].warnings
    assert any("driver" in w for w in warnings) and any("cuda" in w for w in warnings)
    assert not any("torch" in w for w in warnings)  # same release, different CUDA build tag


def test_identical_runs_compare_at_one(make_run: MakeRun, catalog: Catalog) -> None:
    a = cost_of_run(make_run("a0000001"), NV, catalog=catalog)
    b = cost_of_run(make_run("b0000001"), NV, catalog=catalog)
    pair = compare([a, b]).pairs[0]
    assert pair.ratio == pytest.approx(1.0)
    assert pair.decomposition.share_of_log_ratio is None
    assert pair.warnings == []
    assert all(math.isclose(be.verified_ratio or 1.0, 1.0) for be in pair.break_even)


def test_a_repeat_made_with_like_from_the_same_dataset_file_elsewhere_is_like_for_like(
    make_run: MakeRun, catalog: Catalog
) -> None:
    sha = "sha256:" + "ab" * 32
    wl = {"dataset": "jsonl", "seed": 0, "sha256": sha}
    cfg = {"dataset": {"name": "jsonl", "path": "/a/prompts.jsonl"}, "warmup": 1}
    a = cost_of_run(
        make_run("a0000002", workload={**wl, "path": "/a/prompts.jsonl"}, config=cfg), NV, catalog=catalog
    )
    b_cfg = {
        "dataset": {"name": "jsonl", "path": "/b/copy.jsonl"},
        "warmup": 1,
        "like": {"run_id": "a0000002", "overridden": ["dataset_path"]},
    }
    b = cost_of_run(
        make_run("b0000002", workload={**wl, "path": "/b/copy.jsonl"}, config=b_cfg), NV, catalog=catalog
    )
    warnings = "\n".join(compare([a, b]).pairs[0].warnings)
    assert "different workloads" not in warnings and "different run settings" not in warnings

    edited = {**wl, "sha256": "sha256:" + "cd" * 32, "path": "/a/prompts.jsonl"}
    other = cost_of_run(make_run("c0000002", workload=edited, config=cfg), NV, catalog=catalog)
    warnings = "\n".join(compare([a, other]).pairs[0].warnings)
    assert "different workloads: sha256 = " in warnings


def test_runs_at_different_operating_points_are_named_by_their_servers_queues(
    make_run: MakeRun, catalog: Catalog
) -> None:
    def state(waiting_max: float) -> dict[str, Any]:
        return {"state": {"waiting": {"mean": waiting_max / 2, "max": waiting_max}, "notes": []}}

    saturated = cost_of_run(make_run("a0000003", server=state(14)), NV, catalog=catalog)
    headroom = cost_of_run(make_run("b0000003", server=state(0)), NV, catalog=catalog)
    unknown = cost_of_run(make_run("c0000003"), NV, catalog=catalog)
    warnings = "\n".join(compare([saturated, headroom]).pairs[0].warnings)
    assert "A's server kept requests waiting in its queue (up to 14 waiting) while B's did not" in warnings
    assert "A was measured at saturation, B below it" in warnings
    reverse = "\n".join(compare([headroom, saturated]).pairs[0].warnings)
    assert "B's server kept requests waiting" in reverse and "B was measured at saturation" in reverse
    # Without the server's view on both sides nothing is claimed.
    assert "saturation" not in "\n".join(compare([saturated, unknown]).pairs[0].warnings)
    assert "saturation" not in "\n".join(compare([saturated, saturated]).pairs[0].warnings)
    # The default reading (idle edges only) gives vLLM's queue time instead of the waiting gauge.
    edges_only = {"state": {"queue_time_ms_mean": 120.0, "waiting": None}}
    queued = cost_of_run(make_run("d0000003", server=edges_only), NV, catalog=catalog)
    warnings = "\n".join(compare([headroom, queued]).pairs[0].warnings)
    assert "B's server kept requests waiting in its queue (120 ms mean queue time)" in warnings


def test_a_run_whose_server_ignored_the_requested_output_length_is_warned(
    make_run: MakeRun, catalog: Catalog
) -> None:
    """Issue 15: the warning never fired — the comparison read the summary's output-length check (an
    object) as a number. With summaries the real code produced, it names the run and how many requests."""
    from dataclasses import replace as dc_replace

    from cost_runs import requests_for

    from gpuledger.bench.metrics import summarize

    asked = requests_for(50, window_s=100.0, output_total=50 * 20, input_total=50 * 10, ttft_ms=200.0,
                         e2e_ms=2000.0)
    # the server stopped 7 of them early: they asked for 20 tokens and got 12
    records = [dc_replace(r, requested_output_tokens=20) for r in asked[:43]] + [
        dc_replace(r, requested_output_tokens=20, output_tokens=12) for r in asked[43:]
    ]
    short = make_run("s0000001")
    short = dc_replace(short, summary=summarize(records))
    a = cost_of_run(make_run("a0000002"), NV, catalog=catalog)
    b = cost_of_run(short, NV, catalog=catalog)
    warnings = compare([a, b]).pairs[0].warnings
    assert "run s0000001 (B): 7 request(s) got a different output length than requested" in warnings
