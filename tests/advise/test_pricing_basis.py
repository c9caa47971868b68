"""Issue 33, item 5: an advise ranking has one pricing basis — every GPU owned (the default), every GPU
rented, or every GPU at one InferenceX tier — stated in the output. A GPU with no preset of that basis is
listed as not ranked, with the reason, never priced on the other basis (before, MI325X had no -own preset
and was ranked at its rental price among owned GPUs, 2.8x "dearer" than the owned MI300X mostly for that
reason). A GPU you price with your own profile of another basis says so in its row."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gpuledger.catalog import Catalog
from gpuledger.cli.main import app
from gpuledger.cost.advise.advise import Advice, Request, advise
from gpuledger.cost.estimate.estimate_model import EfficiencyPool
from gpuledger.cost.pricing.modelarch import find_known
from gpuledger.cost.pricing.presets import builtin_presets
from gpuledger.report.sections.advise import ranking_table

QWEN = find_known("dummy:qwen2.5-7b")
GPUS = ("b200", "h200", "mi300x", "mi325x", "mi355x", "gb200")


def _advice(catalog: Catalog, **kw: object) -> Advice:
    assert QWEN is not None
    fields = {"arch": QWEN, "input_len": 1024, "output_len": 256, "interactivity": 30.0, "gpus": GPUS, **kw}
    return advise(Request(**fields), EfficiencyPool(), [], catalog=catalog)  # type: ignore[arg-type]


def _row(advice: Advice, key: str):  # type: ignore[no-untyped-def]
    return next(r for r in advice.rows if r.spec.key == key)


def test_by_default_every_ranked_gpu_is_priced_as_owned_and_one_without_a_purchase_price_is_not_ranked(
    catalog: Catalog,
) -> None:
    advice = _advice(catalog)
    assert advice.request.tier == "own"
    ranked = advice.ranked
    assert {r.spec.key for r in ranked} == {"b200", "h200", "mi300x", "gb200"}
    for r in ranked:
        assert r.best is not None and r.best.cost is not None
        assert r.best.cost.profile.name == f"{r.spec.key}-own" and r.best.cost.profile.mode == "ownership"
        assert r.basis.key == "own" and not r.basis.yours
    for key in ("mi325x", "mi355x"):  # the catalog has no purchase price for them
        row = _row(advice, key)
        assert row.rank is None and row.best is None
        assert all(p.cost is None for p in row.options)  # never priced on another basis
        assert row.status.startswith(f"not priced: no {key}-own preset: the catalog has no purchase price")
        assert "never on another basis" in row.status
    assert "--profile-tier rent" in _row(advice, "mi325x").status  # MI325X has a -rent preset
    assert not advice.mixed_basis
    table = ranking_table(advice)
    assert "every GPU priced owned" in table.title and "priced as" not in table.columns
    doc = advice.document().model_dump(mode="json")
    assert doc["pricing_basis"]["basis"] == "own" and doc["pricing_basis"]["default"] == "own"
    assert "(the default" in doc["pricing_basis"]["text"]
    assert {row["pricing_basis"]["basis"] for row in doc["ranking"]} == {"own"}


@pytest.mark.parametrize(("tier", "unranked"), [("rent", {"mi355x", "gb200"}), ("hyperscaler", set())])
def test_another_tier_prices_every_gpu_on_that_basis_alone(
    catalog: Catalog, tier: str, unranked: set[str]
) -> None:
    advice = _advice(catalog, tier=tier)
    presets = builtin_presets(catalog)
    suffix = "-rent" if tier == "rent" else f"-inferencex-{tier}"
    for r in advice.rows:
        name = f"{r.spec.key}{suffix}"
        if r.spec.key in unranked:
            assert name not in presets and r.rank is None and f"no {name} preset" in r.status
            continue
        assert r.rank is not None and r.best is not None and r.best.cost is not None
        assert r.best.cost.profile.name == name and r.basis.key == tier
    assert ranking_table(advice).title.startswith("Ranking by USD per 1M output tokens, every GPU priced ")


def test_your_profile_of_another_basis_is_said_in_its_row(catalog: Catalog) -> None:
    presets = builtin_presets(catalog)
    advice = _advice(catalog, gpus=("b200", "mi325x"), profiles={"mi325x": presets["mi325x-rent"]})
    mi = _row(advice, "mi325x")
    assert mi.rank is not None and mi.basis.yours and mi.basis.short == "rented (your profile)"
    assert _row(advice, "b200").basis.short == "owned"
    assert advice.mixed_basis
    table = ranking_table(advice)
    col = table.columns.index("priced as")
    assert {row[1]: row[col] for row in table.rows} == {"NVIDIA B200": "owned",
                                                        "AMD Instinct MI325X": "rented (your profile)"}
    assert "each GPU priced as its row says" in table.title
    doc = advice.document().model_dump(mode="json")
    assert doc["pricing_basis"]["mixed"] is True
    rows = {r["gpu"]: r["pricing_basis"] for r in doc["ranking"]}
    assert rows["mi325x"] == {"basis": "rent", "profile": "mi325x-rent", "yours": True,
                              "text": "rented: your profile mi325x-rent for AMD Instinct MI325X"}


def test_the_command_line_states_the_basis_and_refuses_a_tier_that_mixes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["advise", "--model", "dummy:qwen2.5-7b", "--input-len", "1024", "--output-len", "256",
            "--interactivity", "30", "--gpus", "b200,mi300x,mi325x"]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    flat = " ".join(result.stdout.split())
    assert "priced as: owned: each GPU's -own preset" in flat
    assert "every GPU priced owned" in flat
    assert "not ranked: AMD Instinct MI325X: not priced: no mi325x-own preset" in flat
    doc = json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)
    assert [r["gpu"] for r in doc["ranking"] if r["rank"] is not None] == ["b200", "mi300x"]
    from gpuledger.cli.main import main

    assert main([*args, "--profile-tier", "default"]) == 2  # the old mixed basis
    assert "one of own, rent, hyperscaler, neocloud, rental" in capsys.readouterr().err
