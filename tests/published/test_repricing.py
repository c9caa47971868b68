"""``compare`` of two published points re-priced with the user's profiles: the published ratio (with the
publisher's tiers) next to the user's ratio, and the parts of the pricing that moved it (price,
utilisation, labour, energy) — the B200-vs-MI300X ratio of InferenceX, re-priced (issue 19, "Done when")."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

A_LABEL, B_LABEL = "B200, 23 tok/s/user", "MI300X, 23 tok/s/user"
B200_TPS, MI300X_TPS = 5856.9, 725.2  # total tok/s per GPU, as published


def _profile(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return str(path)


def test_the_published_ratio_is_shown_next_to_the_users_with_what_moved_it(
    cli, inferencex_runs: dict[str, str], tmp_path: Path
) -> None:
    a, b = inferencex_runs[A_LABEL], inferencex_runs[B_LABEL]
    mine_a = _profile(tmp_path, "b200", "extends: b200-own\nutilisation: 0.5\nsetup_hours: 8\n"
                      "labour_rate_per_hour: 100\n")
    mine_b = _profile(tmp_path, "mi300x", "extends: mi300x-own\nutilisation: 0.5\nsetup_hours: 80\n"
                      "labour_rate_per_hour: 100\n")
    doc = cli("compare", a, b, "--profile", f"{a}={mine_a}", "--profile", f"{b}={mine_b}")
    section = doc["published_repricing"]
    (pair,) = section["pairs"]
    assert pair["publisher_profiles"] == {
        "a": "b200-inferencex-hyperscaler", "b": "mi300x-inferencex-hyperscaler"
    }
    # the publisher's tiers: (5856.9 / 1.95) / (725.2 / 1.12) per output token as per any token (same lengths)
    assert pair["published_ratio"] == pytest.approx((B200_TPS / 1.95) / (MI300X_TPS / 1.12))
    assert pair["as_published_ratio"] == pytest.approx(0.429 / 0.092)
    # the user's ratio is what `cost` gives each run under its profile, the change is that over the
    # publisher's tiers' ratio worked out by hand above
    per_usd = [cli("cost", run, "--profile", prof, "--no-save")["output_tokens_per_usd"]
               for run, prof in ((a, mine_a), (b, mine_b))]
    assert pair["user_ratio"] == pytest.approx(per_usd[0] / per_usd[1])
    published = (B200_TPS / 1.95) / (MI300X_TPS / 1.12)
    assert pair["change"] == pytest.approx(per_usd[0] / per_usd[1] / published)
    steps = pair["steps"]
    assert [s["part"] for s in steps] == ["price", "utilisation", "labour", "energy"]
    assert math.prod(s["factor"] for s in steps) == pytest.approx(pair["change"])
    assert steps[-1]["ratio_after"] == pytest.approx(pair["user_ratio"])
    # both at 50 %: utilisation moves nothing; ten times the setup hours on MI300X makes it dearer (A gains)
    assert steps[1]["factor"] == pytest.approx(1.0)
    assert steps[2]["factor"] > 1.0
    assert pair["rates"]["a"] == pair["rates"]["b"] == (
        "published by SemiAnalysis InferenceX (2026-12-01), not measured here"
    )
    order = "in the order price (hardware amortisation or rental), utilisation, labour, energy"
    assert order in pair["steps_note"]


def test_publisher_tiers_as_user_profiles_change_nothing(cli, inferencex_runs: dict[str, str]) -> None:
    a, b = inferencex_runs[A_LABEL], inferencex_runs[B_LABEL]
    doc = cli("compare", a, b, "--profile", f"{a}=b200-inferencex-hyperscaler",
              "--profile", f"{b}=mi300x-inferencex-hyperscaler")
    (pair,) = doc["published_repricing"]["pairs"]
    assert pair["change"] == pytest.approx(1.0)
    assert all(s["factor"] == pytest.approx(1.0) for s in pair["steps"])


def test_another_currency_gives_both_ratios_without_a_split(
    cli, inferencex_runs: dict[str, str], tmp_path: Path
) -> None:
    a, b = inferencex_runs[A_LABEL], inferencex_runs[B_LABEL]
    cny = "currency: CNY\ngpu_price: {p}\nelectricity_per_kwh: 0.6\n"
    doc = cli("compare", a, b, "--profile", f"{a}={_profile(tmp_path, 'a', cny.format(p=250000))}",
              "--profile", f"{b}={_profile(tmp_path, 'b', cny.format(p=110000))}")
    (pair,) = doc["published_repricing"]["pairs"]
    assert pair["steps"] == [] and "no currency conversion" in pair["steps_note"]
    assert pair["user_ratio"] == pytest.approx(doc["ratio"])


def test_the_terminal_shows_the_section(cli, inferencex_runs: dict[str, str]) -> None:
    a, b = inferencex_runs[A_LABEL], inferencex_runs[B_LABEL]
    out = cli("compare", a, b, json_out=False)
    assert out.exit_code == 0, out.output
    text = " ".join(out.stdout.split())
    assert f"Published comparison re-priced: {a} vs {b}" in text
    tiers = "publisher's tiers (b200-inferencex-hyperscaler, mi300x-inferencex-hyperscaler; USD): 4.64x"
    assert tiers in text
    assert "(as printed: 4.66x)" in text
    assert "your profiles (b200-own, mi300x-own; USD)" in text
    assert "What moved it" in text


def test_a_point_that_names_no_publisher_tier_has_no_section(
    cli, inferencex_runs: dict[str, str], tmp_path: Path
) -> None:
    other = tmp_path / "p.csv"
    other.write_text("gpu,gpus,model,input_len,output_len,output_tokens_per_s\n"
                     "b200,1,DeepSeek R1,8192,1024,700\n")
    (row,) = cli("import-results", str(other))["imported"]
    doc = cli("compare", inferencex_runs[A_LABEL], row["id"])
    assert "published_repricing" not in doc
