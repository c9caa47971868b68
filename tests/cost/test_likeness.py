"""Like for like (cost/comparison/likeness.py): a comparison lists what differs in ways that change its ratio,
each with both sides and why; "like for like" when nothing does; the closest like-for-like pair among stored
runs (issue 28, "Done when": B200 vs MI300X names the generation gap, H200 vs MI325X does not)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from cost_runs import build_run

from gpuledger.catalog import load_catalog
from gpuledger.cost.comparison.likeness import closest_like_for_like, likeness
from gpuledger.cost.pricing.presets import builtin_presets
from gpuledger.cost.published.published import public_points
from gpuledger.records import RunInfo

CATALOG = load_catalog()


def shipped(name: str) -> dict[str, RunInfo]:
    return {r.label: replace(r, id=f"{name}:{i}") for i, r in enumerate(public_points(name), start=1)}


V51 = shipped("mlperf-v5.1-llama2-70b")
IX = shipped("inferencex-deepseek-r1-b200-vs-mi300x")


def one(points: dict[str, RunInfo], *words: str) -> RunInfo:
    found = [r for label, r in points.items() if all(w in label for w in words)]
    assert len(found) == 1, (words, found)
    return found[0]


def test_b200_against_mi300x_names_the_generation_gap() -> None:
    b200, mi300x = one(IX, "B200", "23 tok/s"), one(IX, "MI300X", "23 tok/s")
    like = likeness(b200, mi300x, catalog=CATALOG)
    gap = like.differs("generation")
    assert gap is not None and not like.like_for_like
    assert gap.a == "NVIDIA B200: Blackwell, 2024?" and gap.b == "AMD Instinct MI300X: CDNA3, 2023"
    assert "1 year apart" in gap.why
    assert like.differs("precision") is None and like.differs("model") is None  # both FP8, DeepSeek R1
    assert like.differs("scenario") is None and like.differs("workload") is None  # 23 tok/s/user, 8k/1k


def test_h200_against_mi325x_of_one_submitter_is_like_for_like_but_for_each_vendors_stack() -> None:
    h200 = one(V51, "Quanta", "H200", "Offline")
    mi325x = one(V51, "Quanta", "MI325X", "Offline")
    like = likeness(h200, mi325x, catalog=CATALOG)
    assert like.differs("generation") is None  # both 2024, one Hopper, one CDNA3
    assert like.like_for_like and like.summary.startswith("like for like")
    (stack,) = like.differences
    assert stack.aspect == "framework" and stack.expected
    assert (stack.a, stack.b) == ("TensorRT 10.8", "vLLM 0.6.5.dev964+mlperf50")
    assert "TensorRT 10.8 vs vLLM" in like.summary


def test_every_difference_that_changes_the_ratio_is_listed_with_both_sides() -> None:
    b200 = one(V51, "NVIDIA B200", "Server")  # NVIDIA's own, FP4
    mi325x = one(V51, "Quanta", "MI325X", "Interactive")  # a third party's, FP8
    like = likeness(b200, mi325x, catalog=CATALOG)
    assert not like.like_for_like
    aspects = {d.aspect: d for d in like.differences}
    assert aspects["precision"].a == "fp4" and aspects["precision"].b == "fp8"
    assert aspects["scenario"].a.startswith("server (mean TTFT")
    assert aspects["scenario"].b.startswith("interactive")
    assert aspects["submitter"].a == "NVIDIA (vendor)" and aspects["submitter"].b.endswith("(third party)")
    assert "generation" not in aspects  # B200 and MI325X both began shipping in 2024
    assert aspects["workload"].a.startswith("input length not published / 274 out")  # FP4's shorter answers
    assert aspects["workload"].b.startswith("input length not published / 300 out")
    assert all(d.why for d in like.differences)
    assert like.summary == "not like for like: 4 differences (precision, workload, scenario, submitter)"


def test_a_side_that_does_not_record_an_aspect_makes_it_unknown_not_equal() -> None:
    v50 = shipped("mlperf-v5.0-llama2-70b")
    like = likeness(one(v50, "H200", "Offline"), one(v50, "MI325X", "Offline"), catalog=CATALOG)
    precision = next(d for d in like.differences if d.aspect == "precision")
    assert precision.status == "unknown" and precision.a == precision.b == "not published"
    assert not like.like_for_like and "precision?" in like.summary


def test_the_price_basis_is_compared_from_the_profiles_of_the_comparison() -> None:
    presets = builtin_presets()
    b200, mi300x = one(IX, "B200", "23 tok/s"), one(IX, "MI300X", "23 tok/s")
    mixed = likeness(b200, mi300x, profile_a=presets["b200-inferencex-hyperscaler"],
                     profile_b=presets["mi300x-own"], catalog=CATALOG)
    basis = mixed.differs("price basis")
    assert basis is not None and basis.a.startswith("publisher tier: InferenceX hyperscaler")
    assert basis.b == "owned (mi300x-own)"
    same = likeness(b200, mi300x, profile_a=presets["b200-inferencex-hyperscaler"],
                    profile_b=presets["mi300x-inferencex-hyperscaler"], catalog=CATALOG)
    assert same.differs("price basis") is None
    assert likeness(b200, mi300x, catalog=CATALOG).differs("price basis") is None  # no profiles: no price


def test_two_runs_of_one_spec_on_one_gpu_are_like_for_like() -> None:
    # Other throughputs of the same requests (1,000 tokens out, 500 in each): 100 and 120 in the window.
    a = build_run("a1", output_tps=1000.0, input_tps=500.0, num_ok=100, gpu="NVIDIA H200")
    b = build_run("b1", output_tps=1200.0, input_tps=600.0, num_ok=120, gpu="NVIDIA H200")
    like = likeness(a, b, catalog=CATALOG)
    assert like.like_for_like and like.differences == [] and like.summary == "like for like"
    other = build_run("c1", output_tps=1000.0, input_tps=4000.0, gpu="AMD Instinct MI300X", vendor="amd")
    found = likeness(a, other, catalog=CATALOG)
    workload = found.differs("workload")
    assert workload is not None and "500 in / 1000 out" in workload.a and "4000 in / 1000 out" in workload.b
    assert found.differs("generation") is not None  # H200 2024, MI300X 2023


def test_the_closest_like_for_like_pair_of_a_headline_pair_is_one_generation() -> None:
    b200, mi300x = one(IX, "B200", "23 tok/s"), one(IX, "MI300X", "23 tok/s")
    stored = [*IX.values(), *V51.values(), *shipped("mlperf-v5.0-llama2-70b").values()]
    closest = closest_like_for_like((b200, mi300x), stored, catalog=CATALOG)
    assert closest is not None and closest.likeness.like_for_like
    a, b = {r.id: r for r in stored}[closest.a], {r.id: r for r in stored}[closest.b]
    assert a.summary is not None and b.summary is not None
    assert CATALOG.get(a.summary.origin().gpu).year == CATALOG.get(b.summary.origin().gpu).year  # type: ignore[union-attr,arg-type]
    assert closest.throughput_ratio_per_gpu == pytest.approx(
        a.summary.rate("output_token") / b.summary.rate("output_token"))  # type: ignore[operator]
    assert closest.throughput_ratio_per_gpu < 1.2  # beside the headline's 8x
    assert {closest.headline_a, closest.headline_b} == {b200.id, mi300x.id}
    assert closest.a not in (b200.id, mi300x.id)


def test_no_closest_pair_without_a_run_of_each_vendor() -> None:
    b200, mi300x = one(IX, "B200", "23 tok/s"), one(IX, "MI300X", "23 tok/s")
    nvidia_only = [r for label, r in V51.items() if "H200" in label or "B200" in label]
    assert closest_like_for_like((b200, mi300x), nvidia_only, catalog=CATALOG) is None
