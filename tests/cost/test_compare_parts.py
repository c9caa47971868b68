"""``compare`` takes its throughput ratio apart (issue 28, "Done when"): the parts of every pair's
``decomposition.throughput_parts`` multiply to its throughput ratio, whatever the runs; a pair the model
cannot take apart is one unexplained remainder saying why; and each pair lists what differs between its two
runs (``differences``), which its warnings do not repeat."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from cost_runs import build_run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_decomposition import runs_of_any_shape

from gpuledger.catalog import load_catalog
from gpuledger.cost import CostProfile, compare, cost_of_run
from gpuledger.records import RunInfo

CATALOG = load_catalog()
# One rental price per GPU for every run: no power needed, whatever the run recorded.
RENT = CostProfile(name="rent", rental_per_gpu_hour=2.0)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs_of_any_shape, runs_of_any_shape, st.sampled_from(["output", "total"]))
def test_compares_throughput_parts_multiply_to_its_throughput_ratio(
    a: RunInfo, b: RunInfo, basis: str
) -> None:
    a, b = replace(a, id="a"), replace(b, id="b")
    comp = compare([cost_of_run(a, RENT, catalog=CATALOG), cost_of_run(b, RENT, catalog=CATALOG)], basis,
                   catalog=CATALOG)
    pair = comp.pairs[0]
    dec = pair.decomposition
    assert math.prod(p.factor for p in dec.throughput_parts) == pytest.approx(dec.throughput_ratio, rel=1e-9)
    assert dec.throughput_ratio * dec.utilisation_ratio * dec.hourly_cost_ratio == pytest.approx(pair.ratio)
    names = [p.part for p in dec.throughput_parts]
    assert names in (["hardware", "precision", "software", "load"], ["hardware", "remainder"], ["remainder"])
    assert ("remainder" in names) == bool(dec.throughput_not_computed)
    doc = comp.document().model_dump(mode="json")["pairs"][0]
    parts = doc["decomposition"]["throughput_parts"]
    assert [p["part"] for p in parts] == names and all(p["what"] and p["factor"] > 0 for p in parts)
    assert doc["like_for_like"] == (not [d for d in doc["differences"] if not d["expected"]])


def test_a_pair_the_model_cannot_take_apart_is_one_remainder_saying_why() -> None:
    # Neither run records the GPU that served it (a server benched from another machine): no peaks.
    a = build_run("a0000001", output_tps=1200.0, gpu=None)
    b = build_run("b0000001", output_tps=800.0, gpu=None)
    profile = CostProfile(name="box", rental_per_hour=3.0)
    dec = compare([cost_of_run(a, profile, catalog=CATALOG), cost_of_run(b, profile, catalog=CATALOG)],
                  catalog=CATALOG).pairs[0].decomposition
    (rest,) = dec.throughput_parts
    assert rest.part == "remainder" and rest.factor == pytest.approx(1.5)
    assert rest.what.startswith("unexplained remainder: hardware, precision, software, load together")
    assert "no telemetry of the devices that served it" in rest.what
    assert {n.part for n in dec.throughput_not_computed} == {"hardware", "precision", "software", "load"}
    (throughput,) = rest.inputs
    assert (throughput.a.value, throughput.b.value) == pytest.approx((1200.0, 800.0))
    assert throughput.a.origin == "run" and "run a0000001" in throughput.a.source


def test_two_measured_runs_are_split_and_their_differences_listed_once() -> None:
    # The same model on an H200 and on an MI300X, 100 requests each in the same window: one generation apart,
    # the engine's version too, and answers twice as long on the H200.
    h200 = build_run("h2000001", output_tps=2400.0, gpu="NVIDIA H200",
                     server={"kind": "vllm", "version": "0.9"})
    mi300x = build_run("mi300x01", output_tps=1200.0, gpu="AMD Instinct MI300X", vendor="amd",
                       server={"kind": "vllm", "version": "0.8"})
    pair = compare([cost_of_run(h200, RENT, catalog=CATALOG), cost_of_run(mi300x, RENT, catalog=CATALOG)],
                   catalog=CATALOG).pairs[0]
    dec = pair.decomposition
    assert [p.part for p in dec.throughput_parts] == ["hardware", "precision", "software", "load"]
    assert dec.part("hardware").factor == pytest.approx(  # type: ignore[union-attr]
        1.0 / ((1 - 0.1) * 5.3 / 4.8 + 0.1 * _flops("mi300x") / _flops("h200")))  # TTFT ÷ E2E: 10 % prefill
    assert math.prod(p.factor for p in dec.throughput_parts) == pytest.approx(2.0)
    gap = pair.likeness.differs("generation")
    assert gap is not None
    assert (gap.a, gap.b) == ("NVIDIA H200: Hopper, 2024", "AMD Instinct MI300X: CDNA3, 2023")
    stack = pair.likeness.differs("framework")
    assert stack is not None and stack.expected and (stack.a, stack.b) == ("vllm 0.9", "vllm 0.8")
    workload = pair.likeness.differs("workload")
    assert workload is not None and "2400 out" in workload.a and "1200 out" in workload.b
    # Said once, in the differences: no warning of the versions, the engine or the output lengths.
    assert not [w for w in pair.warnings if "version" in w or "engine" in w or "length" in w], pair.warnings


def _flops(key: str) -> float:
    value = CATALOG.get(key).figure("fp16_tflops").value
    assert value is not None
    return value
