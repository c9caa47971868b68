"""The public points shipped with gpuledger and the three InferenceX cost tiers: every shipped figure has
its page, date and how it was read, and a CSV of published InferenceX points priced with the tier their
publisher used reproduces the publisher's cost per 1M tokens within 3 % (issue 19, "Done when")."""

from __future__ import annotations

import csv

import pytest
from published_data import INFERENCEX_CSV

from gpuledger.catalog import load_catalog
from gpuledger.cost import builtin_presets
from gpuledger.cost.published.published import public_points, public_sets

LABEL = "published by SemiAnalysis InferenceX (2026-12-01), not measured here"
# InferenceX GPU_SPECS (packages/app/src/lib/constants.ts at commit 77ca49a): costh / costn / costr.
TIERS = {
    "h100-sxm": (1.30, 1.69, 1.30), "h200": (1.41, 1.74, 1.60), "b200": (1.95, 2.34, 2.90),
    "gb200": (2.21, 2.75, 3.30), "mi300x": (1.12, 1.40, 1.55), "mi325x": (1.28, 1.59, 1.80),
    "mi355x": (1.48, 1.90, 2.10),
}


@pytest.mark.parametrize("gpu", sorted(TIERS))
def test_three_inferencex_tiers_per_gpu_are_presets_with_their_source(gpu: str) -> None:
    presets = builtin_presets()
    for tier, price in zip(("hyperscaler", "neocloud", "rental"), TIERS[gpu], strict=True):
        p = presets[f"{gpu}-inferencex-{tier}"]
        assert p.mode == "rental" and p.currency == "USD" and p.rental_per_gpu_hour == price
        source = p.sources["rental_per_gpu_hour"]
        assert "InferenceX-app/blob/77ca49a679198bbf593bd1a57fe26a27c9967bb3" in source
        assert "2026-04-03" in source and f"{tier} tier" in source
        assert p.setup_hours == 0 and p.maintenance_hours_per_month == 0 and p.utilisation == 1.0
    # the old name keeps working: it always was the neocloud-owned tier, which the catalog also carries
    old = presets[f"{gpu}-inferencex"]
    assert old.rental_per_gpu_hour == presets[f"{gpu}-inferencex-neocloud"].rental_per_gpu_hour
    assert f"the same as {gpu}-inferencex-neocloud" in old.description
    spec = load_catalog().resolve(gpu)
    assert spec.figure("inferencex_usd_per_gpu_hour").value == old.rental_per_gpu_hour


def test_public_sets_are_listed_with_their_page_date_and_how_read(cli) -> None:
    doc = cli("public")
    assert doc["snapshot"] == "2026-12-01" and "tput_per_gpu" in doc["about"]
    names = [s["name"] for s in doc["sets"]]
    assert "inferencex-deepseek-r1-b200-vs-mi300x" in names and "mlperf-v5.1-llama2-70b" in names
    for s in doc["sets"]:
        if s["name"].startswith("inferencex-"):
            assert s["url"].startswith("https://inferencex.semianalysis.com/compare/")
            assert "Read off the compare page's table" in s["how_read"]
        else:  # MLPerf: the results repository, and what was looked for and is not there
            assert s["url"].startswith("https://github.com/mlcommons/inference_results_v5.")
            assert "summary_results.json" in s["how_read"] or "results page" in s["how_read"]
            assert s["about"]
        assert s["date"] and s["points"]


@pytest.mark.parametrize("name", sorted(n for n in public_sets() if n.startswith("inferencex-")))
def test_every_shipped_point_reproduces_its_publisher_cost_within_3_percent(name: str) -> None:
    from gpuledger.cost import cost_of_run, load_profile

    runs = public_points(name)
    assert runs
    for run in runs:
        s = run.summary
        assert s is not None and s.publisher_profile and s.published_usd_per_1m_total_tokens
        cost = cost_of_run(run, load_profile(s.publisher_profile))
        ours = cost.evaluation.cost_per("token")
        assert ours == pytest.approx(s.published_usd_per_1m_total_tokens, rel=0.03), run.label


def test_a_csv_of_published_points_priced_with_its_tier_reproduces_the_published_cost(
    cli, inferencex_runs: dict[str, str]
) -> None:
    rows = list(csv.DictReader(INFERENCEX_CSV.open()))
    assert len(inferencex_runs) == len(rows) == 6
    for row in rows:
        doc = cli("cost", inferencex_runs[row["label"]], "--profile", row["publisher_profile"])
        published = float(row["published_usd_per_1m_total_tokens"])
        assert doc["usd_per_1m_tokens"] == pytest.approx(published, rel=0.03), row["label"]
        # the InferenceX formula: $/GPU-hour / (tok/s/GPU x 3600 / 1e6)
        hourly = doc["usd_per_hour"]
        per_hour = float(row["total_tokens_per_s"]) * 3600 / 1e6
        assert doc["usd_per_1m_tokens"] == pytest.approx(hourly / per_hour)
        assert doc["throughput"]["source"] == LABEL


def test_a_shipped_set_is_importable_by_name(cli) -> None:
    doc = cli("import-results", "inferencex-gptoss-120b-b200-vs-mi325x")
    assert doc["from"] == "public set inferencex-gptoss-120b-b200-vs-mi325x"
    assert len(doc["imported"]) == 6
    assert {r["gpu"] for r in doc["imported"]} == {"b200", "mi325x"}
