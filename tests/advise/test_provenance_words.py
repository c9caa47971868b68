"""Issue 33, item 6: provenance words are exact. A publisher gives rates; the MBU and MFU of a published point
are gpuledger's arithmetic over them, with gpuledger's own assumptions (one replica of 8 GPUs for a model
one GPU cannot hold, a 16-bit KV cache, the sequences in flight from tokens/s per user): "derived from
published", with those assumptions named — never "(published)" — wherever the figure is shown or carried
(show, cost, estimate, advise, their --json). Figures between published points (the advisor's interpolation)
are derived from published too; a figure at a published point, as published, is "published"."""

from __future__ import annotations

import json

import pytest

from gpuledger.catalog import Catalog
from gpuledger.cli.main import main
from gpuledger.cost import CostProfile, estimate_run
from gpuledger.cost.advise.advise import Request, advise
from gpuledger.cost.estimate.estimate_model import efficiency_pool, estimate_model, shipped_points
from gpuledger.cost.estimate.roofline_estimate import Workload
from gpuledger.cost.pricing.efficiency import run_efficiency
from gpuledger.cost.pricing.modelarch import find_known
from gpuledger.cost.published.advise_published import FrontPoint, interpolate, points_for
from gpuledger.kinds.text.published import PublishedSummary
from gpuledger.records import RunInfo

R1 = find_known("deepseek-r1")
QWEN = find_known("dummy:qwen2.5-7b")


@pytest.fixture(scope="module")
def published(catalog: Catalog) -> list[RunInfo]:
    return shipped_points(catalog)


def _b200_point(published: list[RunInfo]) -> RunInfo:
    return next(r for r in published if isinstance(r.summary, PublishedSummary) and r.summary.gpu == "b200")


def test_a_published_points_mbu_is_derived_from_published_with_its_assumptions(
    catalog: Catalog, published: list[RunInfo]
) -> None:
    eff = run_efficiency(_b200_point(published), catalog=catalog)
    assert eff.origin == "derived from published" and eff.mbu is not None
    # DeepSeek R1 (671 GB at FP8) does not fit one B200: gpuledger assumes a replica of 8, and a 16-bit KV
    assert eff.premises[:3] == ("one replica of 8 GPUs", "fp8 weights (1 byte)", "2-byte KV cache")
    assert eff.text().endswith("(derived from published, assuming one replica of 8 GPUs, fp8 weights (1 "
                               "byte), 2-byte KV cache, sequences in flight from tok/s per user)")
    assert "(published)" not in eff.text()
    listed = "; ".join(eff.assumptions)
    assert "one replica spans 8 GPU(s)" in listed and "16-bit KV cache assumed" in listed
    doc = eff.document().model_dump(mode="json")
    assert doc["origin"] == "derived from published" and doc["premises"] == list(eff.premises)
    assert doc["label"].startswith("derived by gpuledger from rates published by SemiAnalysis InferenceX")


def test_carried_to_another_model_and_gpu_it_keeps_its_words_and_its_assumptions(
    catalog: Catalog, published: list[RunInfo]
) -> None:
    assert QWEN is not None
    carried = efficiency_pool(published, catalog).carried(catalog.get("h200"))
    assert carried.origin == "derived from published"
    assert "MBU" in carried.text() and "(derived from published)" in carried.text()
    assert "assuming" in carried.label and "one replica of 8 GPUs" in carried.label
    est = estimate_model(QWEN, catalog.get("h200"), Workload(1024, 256, 16),
                         pool=efficiency_pool(published, catalog),
                         profile=CostProfile(rental_per_gpu_hour=3.0))
    doc = est.document().model_dump(mode="json")
    assert doc["efficiency"]["origin"] == "derived from published"
    assert "derived from published" in doc["roofline"]["tpot_ms"]["how"]


def test_an_estimate_of_a_published_point_says_derived_not_measured(
    catalog: Catalog, published: list[RunInfo]
) -> None:
    est = estimate_run(_b200_point(published), "h200", CostProfile(rental_per_gpu_hour=3.0), catalog=catalog)
    assert est.efficiency.origin == "derived from published"
    carried = est.document().model_dump(mode="json")["cost"]["efficiency"]
    assert carried["origin"] == "estimate" and "measured" not in carried["label"]
    assert carried["label"].startswith("estimate: the MBU/MFU derived from published, assuming one replica")
    assert est.cost.efficiency is not None
    assert est.cost.efficiency.text().endswith("(estimate, assuming one replica of 8 GPUs, fp8 weights (1 "
                                               "byte), 2-byte KV cache, sequences in flight from tok/s per "
                                               "user)")


def test_the_advisor_says_derived_between_published_points_and_published_at_one(
    catalog: Catalog, published: list[RunInfo]
) -> None:
    assert R1 is not None
    front = points_for(published, R1, "b200", 8192, 1024, "fp8")
    between = interpolate(front, 30.0)
    at = interpolate(front, 32.0)
    assert not isinstance(between, str) and not isinstance(at, str)
    assert between.origin == "derived from published" and between.how.startswith("derived from published")
    # the shipped B200 points publish total tok/s only: even at a point, the output rate is derived
    assert at.origin == "derived from published" and "output rate derived" in at.how
    # points that publish their output rate: at one of them the figure is the publisher's
    own = [FrontPoint("a", 25.0, 600.0, 5400.0, "published by X (2026)", True),
           FrontPoint("b", 32.0, 550.0, 4950.0, "published by X (2026)", True)]
    hit, mid = interpolate(own, 25.0), interpolate(own, 28.0)
    assert not isinstance(hit, str) and hit.origin == "published" and hit.output_tokens_per_s_per_gpu == 600.0
    assert not isinstance(mid, str) and mid.origin == "derived from published"
    rq = Request(arch=R1, input_len=8192, output_len=1024, interactivity=30.0, gpus=("b200",))
    advice = advise(rq, efficiency_pool(published, catalog), published, catalog=catalog)
    doc = advice.document().model_dump(mode="json")
    best = doc["ranking"][0]["best"]
    assert best["throughput"]["origin"] == "derived from published"
    assert best["cost"]["usd_per_1m_output_tokens"]["origin"] == "derived from published rate, priced here"


def test_show_of_an_imported_point_names_the_assumptions(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["import-results", "inferencex-deepseek-r1-b200-vs-mi300x", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)["imported"][0]["id"]
    assert main(["show", first, "--json"]) == 0
    eff = json.loads(capsys.readouterr().out)["efficiency"]
    assert eff["origin"] == "derived from published" and "one replica of 8 GPUs" in eff["provenance"]
    assert main(["show", first]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.strip().startswith("MBU / MFU:"))
    assert "(derived from published, assuming one replica of 8 GPUs" in " ".join(out.split()), line
