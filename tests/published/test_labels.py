"""A published point is priced like a measured run and never called measured: cost, compare, estimate,
report and show say "published by SOURCE (DATE), not measured here" for its rates, its power and its GPUs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

LABEL = "published by Vendor blog (2026-05-01), not measured here"
HEADER = "gpu,gpus,model,input_len,output_len,output_tokens_per_s,source,date,power_kw_per_gpu"


def _import(cli, tmp_path: Path, *rows: str) -> list[str]:
    path = tmp_path / "points.csv"
    path.write_text("\n".join([HEADER, *rows]) + "\n")
    return [r["id"] for r in cli("import-results", str(path))["imported"]]


def _strings(doc: object) -> list[str]:
    if isinstance(doc, dict):
        return [s for v in doc.values() for s in _strings(v)]
    if isinstance(doc, list):
        return [s for v in doc for s in _strings(v)]
    return [doc] if isinstance(doc, str) else []


def _says_measured(text: str) -> bool:
    """Calls a figure measured (not "not measured")."""
    return "measured" in text.replace("not measured", "").replace("Not measured", "")


def test_cost_labels_the_rates_gpus_and_published_power(cli, tmp_path: Path) -> None:
    (run,) = _import(cli, tmp_path, "b200,8,Llama 3 70B,1024,1024,12000,Vendor blog,2026-05-01,1.5")
    doc = cli("cost", run, "--profile", "b200-own")
    assert doc["throughput"]["source"] == LABEL
    assert doc["inputs"]["output_tokens_per_s"]["source"] == LABEL
    assert doc["inputs"]["gpu_count"] == {"value": 8, "unit": "GPUs", "source": LABEL}
    assert doc["devices"] == {"kind": "unknown", "count": 8, "names": ["NVIDIA B200"] * 8, "idle_gpus": []}
    power = doc["power"]
    assert power["serving_w"] == pytest.approx(8 * 1500)
    assert power["power_source"] == f"{LABEL}: 1500 W per GPU x 8"
    assert doc["energy"]["basis"] == "published"
    assert doc["energy"]["joules_per_output_token"] == pytest.approx(12000 / 12000)
    assert not [s for s in _strings(doc) if _says_measured(s)]


def test_without_a_published_power_an_ownership_price_uses_the_catalog_tdp_as_an_estimate(
    cli, tmp_path: Path
) -> None:
    (run,) = _import(cli, tmp_path, "mi300x,8,Llama 3 70B,1024,1024,9000,Vendor blog,2026-05-01,")
    doc = cli("cost", run)  # default profile: the catalog preset of the GPU it was published on
    assert doc["profile"]["name"] == "mi300x-own"
    assert doc["power"]["estimate"] is True
    assert doc["power"]["power_source"] == (
        "estimate: catalog TDP of AMD Instinct MI300X x 8 (not measured: a point published by Vendor blog "
        "(2026-05-01), published without its power)"
    )
    rental = cli("cost", run, "--profile", "mi300x-inferencex-rental")
    assert rental["power"]["serving_w"] is None and rental["energy"]["joules"] is None
    assert not [s for s in _strings(rental) if _says_measured(s)]


def test_other_gpus_than_published_are_refused(cli, tmp_path: Path) -> None:
    (run,) = _import(cli, tmp_path, "b200,8,m,1024,1024,12000,Vendor blog,2026-05-01,")
    gpus = cli("cost", run, "--gpus", "4", json_out=False)
    assert gpus.exit_code == 4
    assert "published by Vendor blog (2026-05-01) on 8 GPU(s): --gpus 4" in gpus.output
    gpu = cli("cost", run, "--gpu", "mi300x", json_out=False)
    assert gpu.exit_code == 4 and "--gpu mi300x would price another GPU" in gpu.output
    assert "gpuledger estimate" in gpu.output


def test_show_and_runs_say_where_the_rate_comes_from(cli, tmp_path: Path) -> None:
    (run,) = _import(cli, tmp_path, "b200,8,m,1024,1024,12000,Vendor blog,2026-05-01,")
    shown = cli("show", run)
    assert shown["output_tokens_per_s"]["source"] == LABEL
    assert shown["summary"]["kind"] == "published_inference"
    listed = next(r for r in cli("runs") if r["id"] == run)
    assert listed["output_tokens_per_s"]["source"] == LABEL
    text = cli("show", run, json_out=False)
    assert text.exit_code == 0
    flat = " ".join(text.stdout.split())
    assert f"origin {LABEL}" in flat
    assert "measured window" not in flat


def test_the_report_answer_block_and_provenance_label_it(cli, tmp_path: Path) -> None:
    a, b = _import(cli, tmp_path, "b200,8,m,1024,1024,12000,Vendor blog,2026-05-01,",
                   "mi300x,8,m,1024,1024,9000,Vendor blog,2026-05-01,")
    md = tmp_path / "r.md"
    result = cli("report", a, b, "--md", str(md), json_out=False)
    assert result.exit_code == 0, result.output
    text = md.read_text()
    assert f"rates {LABEL}" in text  # under each run's price in the answer block
    assert f"{LABEL} (stored by gpuledger import-results)" in text  # how measured: provenance per run
    assert "8 GPU(s), as published by Vendor blog (2026-05-01)" in text


def test_an_estimate_from_a_published_point_says_both(cli, tmp_path: Path) -> None:
    (run,) = _import(cli, tmp_path, "b200,8,m,1024,1024,12000,Vendor blog,2026-05-01,")
    doc = cli("estimate", run, "--gpu", "mi355x")
    assert doc["source_gpu"]["key"] == "b200" and doc["target_gpu"]["key"] == "mi355x"
    source = json.dumps(doc["cost"]["throughput"]["source"])
    assert source.startswith(f'"estimate: the run\'s rates {LABEL} x')
    assert doc["cost"]["devices"]["count"] == 8


def test_under_a_rental_price_a_published_power_is_reported_not_priced(cli, tmp_path: Path) -> None:
    (run,) = _import(cli, tmp_path, "b200,8,m,1024,1024,12000,Vendor blog,2026-05-01,1.5")
    doc = cli("cost", run, "--profile", "b200-inferencex-rental")
    assert doc["hourly"]["energy_usd_per_hour"] == 0 and doc["usd_per_hour"] == pytest.approx(8 * 2.90)
    assert doc["power"]["power_source"] == f"{LABEL}: 1500 W per GPU x 8"
    assert doc["energy"]["basis"] == "published" and doc["energy"]["joules_per_token"] == pytest.approx(0.5)


def test_a_published_point_is_not_judged_by_rules_that_read_what_was_not_measured_here() -> None:
    """The validity verdict reads a run's requests, client and telemetry: a published point has none, so it
    is "not judged", never "valid: all checks passed"."""
    from gpuledger.bench.validity import run_verdict
    from gpuledger.cost.published.published import RawPoint, runs_of

    (run,) = runs_of(
        [RawPoint(row=1, line=2, fields={
            "gpu": "B200", "gpus": 8, "model": "dummy:qwen2.5-7b", "input_len": 1024, "output_len": 1024,
            "output_tokens_per_s": 20000, "source": "InferenceX", "date": "2026-11-01"})],
        "test", "test",
    )
    verdict = run_verdict(run)
    assert verdict is not None and verdict.checks == [] and verdict.not_checked
    assert verdict.headline().startswith("not judged: published by InferenceX")
