"""The worked "5x" example in docs/cost.md is a test: its inputs are read from the doc, every number it
states is recomputed here, and the doc must state exactly what the code computes."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from cost_runs import build_run

from gpuledger.catalog import load_catalog
from gpuledger.cost import RunCost, compare, cost_of_run, evaluate, profile_from_text, ratio_of

DOC = Path(__file__).resolve().parents[2] / "docs" / "cost.md"


def doc_blocks() -> dict[str, str]:
    text = DOC.read_text(encoding="utf-8")
    blocks = re.findall(r"```yaml\n# worked-example: (\w+)\n(.*?)```", text, flags=re.S)
    return {name: body for name, body in blocks}


def results_section() -> str:
    text = DOC.read_text(encoding="utf-8")
    match = re.search(r"<!-- worked-example: results -->(.*?)<!-- /worked-example -->", text, flags=re.S)
    assert match, "docs/cost.md lost its worked-example results section"
    return " ".join(match.group(1).split())


@pytest.fixture(scope="module")
def example() -> tuple[RunCost, RunCost]:
    blocks = doc_blocks()
    assert set(blocks) == {"runs", "A", "B"}
    runs: dict[str, Any] = yaml.safe_load(blocks["runs"])
    catalog = load_catalog()
    costs = []
    for name in ("A", "B"):
        r = runs[name]
        run = build_run(
            f"example{name}",
            gpu=r["gpu"],
            vendor=r["vendor"],
            output_tps=r["output_tokens_per_s"],
            input_tps=r["input_tokens_per_s"],
            power_w=r["mean_power_w"],
        )
        profile = profile_from_text(blocks[name], f"docs/cost.md profile {name}")
        costs.append(cost_of_run(run, profile, catalog=catalog))
    return costs[0], costs[1]


def stated(text: str) -> None:
    section = results_section()
    assert text in section, f"docs/cost.md should state {text!r}; it says: {section}"


def test_hourly_costs_and_cost_per_token_are_as_stated(example: tuple[RunCost, RunCost]) -> None:
    a, b = example
    for cost, label in ((a, "A"), (b, "B")):
        h = cost.evaluation.hourly
        stated(
            f"{label} **{h.total:.2f} CNY/h** (hardware {h.capex:.2f}, energy {h.energy:.2f}, "
            f"labour {h.labour:.2f})"
        )
    per_a, per_b = a.evaluation.cost_per("output_token"), b.evaluation.cost_per("output_token")
    assert per_a is not None and per_b is not None
    stated(f"A **{per_a:.2f} CNY**, B **{per_b:.2f} CNY**")


def test_the_ratio_and_its_decomposition_are_as_stated(example: tuple[RunCost, RunCost]) -> None:
    a, b = example
    pair = compare([a, b]).pairs[0]
    dec = pair.decomposition
    stated(
        f"ratio: **{pair.ratio:.2f}x** = throughput **{dec.throughput_ratio:.2f}x** × utilisation "
        f"**{dec.utilisation_ratio:.2f}x** × hourly cost (B/A) **{dec.hourly_cost_ratio:.2f}x**"
    )
    carried = dec.share_of_log_ratio
    assert carried is not None
    stated(f"throughput **{carried.throughput:.0%}**".replace("%", " %"))
    stated(f"utilisation **{carried.utilisation:.0%}**".replace("%", " %"))
    stated(f"hourly cost **{carried.hourly_cost:.0%}**".replace("%", " %"))
    diff = dec.hourly.difference_as_share_of_a
    stated(f"labour adds **+{diff.labour:.0%}** of A's hourly cost".replace("%", " %"))
    stated(f"hardware takes **−{-diff.capex:.0%}** off".replace("%", " %"))
    # the headline this example reproduces
    assert 5.0 <= pair.ratio < 5.5
    # and the largest share of it is the throughput (the software stack), as the doc says
    assert max(carried.model_dump().items(), key=lambda kv: kv[1])[0] == "throughput"


def test_the_break_even_values_are_as_stated(example: tuple[RunCost, RunCost]) -> None:
    a, b = example
    found = {be.input: be for be in compare([a, b]).pairs[0].break_even}
    tps = found["output_tokens_per_s"]
    assert tps.value is not None and tps.verified_ratio == pytest.approx(1.0)
    stated(f"B would need **{tps.value:.0f}** output tok/s (from {b.inputs.rates['output_token']:.0f})")
    assert all(found[k].value is None for k in ("gpu_price", "utilisation", "setup_hours"))


def test_what_flips_it_is_as_stated(example: tuple[RunCost, RunCost]) -> None:
    a, b = example
    fast = dataclasses.replace(b.inputs, rates=a.inputs.rates)
    same_throughput = ratio_of(a.evaluation, evaluate(fast), "output_token")
    stated(f"B at A's throughput → **{same_throughput:.2f}x**")
    cared = dataclasses.replace(
        fast,
        profile=fast.profile.model_copy(
            update={
                "utilisation": a.profile.utilisation,
                "maintenance_hours_per_month": a.profile.maintenance_hours_per_month,
            }
        ),
    )
    flipped = ratio_of(a.evaluation, evaluate(cared), "output_token")
    stated(
        f"(setup still two weeks) → **{flipped:.2f}x**, i.e. B becomes **{1 / flipped:.2f}x** more "
        "cost-efficient"
    )
    assert flipped < 1 < same_throughput


def test_the_setup_labour_sentence_is_right(example: tuple[RunCost, RunCost]) -> None:
    _, b = example
    text = " ".join(DOC.read_text(encoding="utf-8").split())
    setup_cny = b.inputs.setup_hours * b.profile.labour_rate_per_hour
    assert f"(80 h × 115 CNY = {setup_cny:,.0f} CNY" in text
    assert f"is {b.evaluation.hourly.labour_setup:.2f} CNY/h)" in text
