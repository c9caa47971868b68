"""Checking a 5x through ``gpuledger compare`` of imported shipped points (issue 28, "Done when";
docs/published.md "Checking a 5x"): the ratio's throughput taken apart into parts that multiply to it, what
differs between the two points with both sides — the B200-vs-MI300X headline names the generation gap, one
submitter's H200 and MI325X (both 2024, FP8, Llama 2 70B, one scenario) do not — and, for a pair that is not
like for like, the closest like-for-like pair the store holds, with its ratio."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuledger.cli.main import app

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cli"))
from termcheck import cut_numbers, split_in_cells, too_wide

Cli = Callable[..., Any]  # the `cli` fixture (tests/published/conftest.py)
INFERENCEX = "inferencex-deepseek-r1-b200-vs-mi300x"
MLPERF = "mlperf-v5.1-llama2-70b"


def imported(cli: Cli, name: str) -> dict[str, str]:
    """``gpuledger import-results NAME``: label -> run id."""
    return {row["label"]: row["id"] for row in cli("import-results", name)["imported"]}


def one(runs: dict[str, str], *words: str) -> str:
    found = [run_id for label, run_id in runs.items() if all(w in label for w in words)]
    assert len(found) == 1, (words, found)
    return found[0]


def pair_of(doc: dict[str, Any]) -> dict[str, Any]:
    (pair,) = doc["pairs"]
    return pair


def aspects(pair: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {d["aspect"]: d for d in pair["differences"]}


def test_b200_against_mi300x_names_the_generation_gap_and_takes_the_throughput_apart(cli: Cli) -> None:
    ix = imported(cli, INFERENCEX)
    b200, mi300x = one(ix, "B200", "23 tok/s"), one(ix, "MI300X", "23 tok/s")
    doc = cli("compare", b200, mi300x, "--profile", f"{b200}=b200-own", "--profile", f"{mi300x}=mi300x-own")
    pair = pair_of(doc)
    gap = aspects(pair)["generation"]
    assert gap["status"] == "differs" and "1 year apart" in gap["why"]
    assert (gap["a"], gap["b"]) == ("NVIDIA B200: Blackwell, 2024?", "AMD Instinct MI300X: CDNA3, 2023")
    assert pair["like_for_like"] is False and "generation" in pair["like_for_like_summary"]
    assert "precision" not in aspects(pair) and "model" not in aspects(pair)  # both FP8 DeepSeek R1
    dec = pair["decomposition"]
    parts = {p["part"]: p for p in dec["throughput_parts"]}
    assert list(parts) == ["hardware", "precision", "software", "load"]
    assert dec["throughput_not_computed"] == []
    assert math.prod(p["factor"] for p in parts.values()) == pytest.approx(dec["throughput_ratio"], rel=1e-9)
    assert dec["throughput_ratio"] == pytest.approx(5856.9 / 725.2)  # the page's tok/s per GPU
    assert parts["hardware"]["factor"] == pytest.approx(8.0 / 5.3)  # no TTFT published: all decode
    for part in parts.values():
        assert part["what"] and part["inputs"]
        for i in part["inputs"]:
            for side in (i["a"], i["b"]):
                assert side["origin"] in ("catalog", "run", "published", "derived", "assumption")
                assert side["source"]


def test_one_submitters_h200_and_mi325x_are_like_for_like_but_for_each_vendors_stack(cli: Cli) -> None:
    v51 = imported(cli, MLPERF)
    h200, mi325x = one(v51, "Quanta", "H200", "Offline"), one(v51, "Quanta", "MI325X", "Offline")
    # Each GPU's own preset prices the H200 owned and the MI325X rented (the catalog has no MI325X price
    # to own it at): the price basis is a difference too.
    basis = aspects(pair_of(cli("compare", h200, mi325x)))["price basis"]
    assert (basis["a"], basis["b"]) == ("owned (h200-own)", "rented (mi325x-rent)")
    tiers = ["--profile", f"{h200}=h200-inferencex-hyperscaler", "--profile",
             f"{mi325x}=mi325x-inferencex-hyperscaler"]
    pair = pair_of(cli("compare", h200, mi325x, *tiers))
    assert "generation" not in aspects(pair)  # both began shipping in 2024
    assert pair["like_for_like"] is True
    (stack,) = pair["differences"]
    assert stack["aspect"] == "framework" and stack["expected"] is True
    assert pair["like_for_like_summary"].startswith("like for like (apart from each vendor's own framework")
    assert "closest_like_for_like" not in pair  # like for like: nothing to look for
    # What the two points published of their workloads (lengths, dataset) is judged by the differences
    # (their mean output lengths within 5 %), not warned about key by key.
    assert pair["warnings"] == []
    # Llama 2 70B is not a known architecture and MLPerf publishes no input length: the hardware part and
    # the unexplained remainder, named as such, with the reason for each part not computed.
    dec = pair["decomposition"]
    assert [p["part"] for p in dec["throughput_parts"]] == ["hardware", "remainder"]
    assert dec["throughput_parts"][1]["what"].startswith("unexplained remainder: precision, software, load")
    assert {n["part"] for n in dec["throughput_not_computed"]} == {"precision", "software", "load"}
    assert dec["throughput_parts"][0]["factor"] == pytest.approx(4.8 / 6.0)
    assert math.prod(p["factor"] for p in dec["throughput_parts"]) == pytest.approx(dec["throughput_ratio"])


def test_compare_of_the_headline_pair_names_the_closest_like_for_like_pair_in_the_store(cli: Cli) -> None:
    ix, v51 = imported(cli, INFERENCEX), imported(cli, MLPERF)
    b200, mi300x = one(ix, "B200", "23 tok/s"), one(ix, "MI300X", "23 tok/s")
    pair = pair_of(cli("compare", b200, mi300x))
    search = pair["closest_like_for_like"]
    assert search["searched"] == len(ix) + len(v51) and search["limit"] == 200
    found = search["found"]
    assert found is not None and found["likeness"]["like_for_like"] is True
    # One submitter's H200 against its MI325X: ASUSTeK's and Quanta's, offline and server, are all like for
    # like and as far from the headline; the tie goes to the first by label, whatever the store's ids.
    assert (found["a"], found["b"]) == (one(v51, "ASUSTeK", "H200", "Offline"),
                                        one(v51, "ASUSTeK", "MI325X", "Offline"))
    ratio = pair_of(cli("compare", found["a"], found["b"]))["decomposition"]["throughput_ratio"]
    assert found["throughput_ratio_per_gpu"] == pytest.approx(ratio)  # 8 GPUs on each side
    assert found["throughput_ratio_per_gpu"] < 1.1  # beside the headline's 8.08x


def test_among_the_headlines_own_set_the_closest_pair_is_no_closer(cli: Cli) -> None:
    ix = imported(cli, INFERENCEX)  # InferenceX's B200 and MI300X only: every other pair is of these runs
    b200, mi300x = one(ix, "B200", "23 tok/s"), one(ix, "MI300X", "23 tok/s")
    search = pair_of(cli("compare", b200, mi300x))["closest_like_for_like"]
    # The other InferenceX points are the same two GPUs at other interactivities: a pair of them is as far
    # from like for like as the headline (a generation apart), and says so.
    found = search["found"]
    assert found is not None and found["likeness"]["like_for_like"] is False
    assert found["likeness"]["summary"] == "not like for like: 2 differences (generation, framework?)"
    assert {found["a"], found["b"]} <= set(ix.values()) - {b200, mi300x}


def test_a_store_without_another_pair_says_there_is_none(cli: Cli) -> None:
    only = imported(cli, "mlperf-v5.1-deepseek-r1")  # NVIDIA's B200 alone, offline and server
    offline, server = one(only, "Offline"), one(only, "Server")
    pair = pair_of(cli("compare", offline, server))
    # MLPerf publishes no input length, and the two scenarios' answers differ: the workload is not known.
    assert pair["like_for_like_summary"] == "not like for like: 2 differences (workload?, scenario)"
    search = pair["closest_like_for_like"]
    assert search["found"] is None and search["searched"] == 2
    assert search["why"] == ("none among the store's 2 runs: no other run with an output rate on a GPU of "
                             "NVIDIA")
    text = " ".join(cli("compare", offline, server, json_out=False).stdout.split())
    assert "closest like-for-like pair in this store: none among the store's 2 runs" in text


def test_the_terminal_shows_parts_differences_and_the_closest_pair_in_80_columns(cli: Cli) -> None:
    ix, _ = imported(cli, INFERENCEX), imported(cli, MLPERF)
    b200, mi300x = one(ix, "B200", "23 tok/s"), one(ix, "MI300X", "23 tok/s")
    args = ["compare", b200, mi300x, "--profile", f"{b200}=b200-own", "--profile", f"{mi300x}=mi300x-own"]

    def at(columns: int) -> str:
        result = CliRunner().invoke(app, args, env={"COLUMNS": str(columns)})
        assert result.exit_code == 0, result.output
        return result.stdout

    narrow, wide = at(80), at(1000)
    assert not too_wide(narrow, 80), too_wide(narrow, 80)
    assert not cut_numbers(narrow, wide) and not split_in_cells(narrow)
    text = " ".join(wide.split())
    assert "throughput parts (A / B; they multiply to the ratio): 8.08x = hardware x1.51 x precision x1 x " \
           "software x1.03 x load x5.19" in text
    assert "Inputs of the throughput parts" in text and "8 catalog [" in text
    assert "generation (differs): NVIDIA B200: Blackwell, 2024? vs AMD Instinct MI300X: CDNA3, 2023" in text
    assert "not like for like: 2 differences (generation, framework?) generation (differs)" in text
    closest = text.index("closest like-for-like pair in this store: MLPerf v5.1 ASUSTeK H200 x8, Llama 2 70B "
                         "(99.9 %), Offline")
    assert text.index("throughput parts") < text.index("generation (differs)") < closest
    assert "MI325X x8, Llama 2 70B (99.9 %), Offline" in text[closest:] and "ratio 1.03x" in text[closest:]
    # The answer names the biggest part of the throughput ratio and what differs.
    assert "the biggest part: load" in text
    assert "not like for like: 2 differences (generation, framework?)" in text[: text.index("Runs (USD")]
