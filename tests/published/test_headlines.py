"""`gpuledger public` offers, next to each shipped headline pair that is not like for like, the closest
like-for-like pair of the shipped points (cost/headlines.py; issue 28): the InferenceX B200-vs-MI300X pair at
23 tok/s/user sits beside an H200-vs-MI325X pair of one generation, precision, model and scenario."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gpuledger.cost.headlines import headline_offers
from gpuledger.cost.pricing.presets import builtin_presets


def test_public_offers_a_same_generation_pair_next_to_the_b200_vs_mi300x_headline(
    cli: Callable[..., Any],
) -> None:
    doc = cli("public")
    offers = {o["set"]: o for o in doc["offers"]}
    head = offers["inferencex-deepseek-r1-b200-vs-mi300x"]
    assert head["operating_point"] == "23 tok/s per user"
    assert (head["a"]["gpu"], head["b"]["gpu"]) == ("b200", "mi300x")
    assert head["throughput_ratio_per_gpu"] == pytest.approx(5856.9 / 725.2)
    assert head["published_cost_ratio"] == pytest.approx(0.429 / 0.092)  # the "4.7x" of the page
    gap = next(d for d in head["likeness"]["differences"] if d["aspect"] == "generation")
    assert gap["status"] == "differs" and "2023" in gap["b"]
    offered = head["like_for_like"]
    assert offered["likeness"]["like_for_like"] is True
    assert "H200" in offered["label_a"] and "MI325X" in offered["label_b"]
    assert not any(d["aspect"] == "generation" for d in offered["likeness"]["differences"])
    assert offered["throughput_ratio_per_gpu"] < 1.2
    presets = builtin_presets()
    tier = head["like_for_like_cost"]
    assert tier["tier"] == "hyperscaler"
    price_a = presets["h200-inferencex-hyperscaler"].rental_per_gpu_hour
    price_b = presets["mi325x-inferencex-hyperscaler"].rental_per_gpu_hour
    assert price_a is not None and price_b is not None
    assert tier["ratio"] == pytest.approx(offered["throughput_ratio_per_gpu"] * price_b / price_a)


def test_a_headline_pair_that_is_like_for_like_needs_no_offer() -> None:
    offers = headline_offers()
    assert offers and all(not o.likeness.like_for_like for o in offers)
    assert "mlperf-v5.1-llama2-70b" not in {o.set for o in offers}  # its first pair: Quanta H200 vs MI325X


def test_public_prints_each_offer_beside_its_headline(cli: Callable[..., Any]) -> None:
    out = cli("public", json_out=False)
    assert out.exit_code == 0
    text = " ".join(out.stdout.split())
    assert "Headline pairs and the like-for-like pair next to each" in text
    assert "generation (differs): NVIDIA B200: Blackwell, 2024? vs AMD Instinct MI300X: CDNA3, 2023" in text
    assert "next to it: MLPerf v5.1" in text
    assert "like for like (apart from each vendor's own framework" in text
