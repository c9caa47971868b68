"""``gpuledger gate`` end to end (issue 29, "Done when"): runs made by the real ``gpuledger bench`` path
against the programmable loopback server (127.0.0.1 only) into a real SQLite store, then gated. The server's
delays are programmed large (tests/gate/gatecase.py) so that what the gate must see is far outside a loaded
machine's noise; every assertion is on what the code decided, none on how long anything took."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from gatecase import ITL_S, TTFT_S, judged

from gpuledger.cli.main import main

Serve = Callable[..., Any]
Run = Callable[..., dict[str, Any]]


def test_a_candidate_30_percent_slower_in_tpot_fails_naming_tpot_with_its_interval_and_a_junit_failure(
    serve: Serve, bench: Run, gate: Run, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = bench(serve(ttft_s=TTFT_S, itl_s=ITL_S).url)
    after = bench(serve(ttft_s=TTFT_S, itl_s=ITL_S * 1.3).url)
    junit = tmp_path / "gate.xml"
    verdict = gate(before["id"], after["id"], "--junit", str(junit), code=1)

    assert verdict["status"] == "fail" and verdict["exit_code"] == 1
    tpot = judged(verdict)["tpot_p50"]
    assert tpot["status"] == "fail"
    change = tpot["change"]
    assert change["distinguishable"] is True
    assert 0.10 < change["low"] < change["relative"] < change["high"]  # beyond the 10 % allowed, all of it
    assert tpot["baseline"]["n_values"] == 24 and "order statistics" in tpot["baseline"]["method"]
    assert "TPOT p50" in verdict["headline"] and "95 % CI" in verdict["headline"]
    assert verdict["like_for_like"]["same"] is True, verdict["like_for_like"]
    assert verdict["stack"]["same"] is True

    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    failure = cases["TPOT p50 (tpot_p50)"].find("failure")
    assert failure is not None and "95 % CI" in (failure.get("message") or "")
    assert int(suite.get("failures") or 0) == sum(1 for m in verdict["metrics"] if m["status"] == "fail")
    assert cases["like for like"].find("failure") is None

    # The terminal names TPOT, its change and its interval, and says FAIL first.
    assert main(["gate", before["id"], after["id"]]) == 1
    out = capsys.readouterr().out
    assert out.startswith("FAIL: ") and "TPOT p50 (ms)" in out
    lo, hi = (f"{x * 100:+.0f} %" for x in (change["low"], change["high"]))
    assert f"{lo} … {hi}".replace("+", "") in out.replace("+", "")


def test_an_unchanged_candidate_passes(serve: Serve, bench: Run, gate: Run) -> None:
    srv = serve(ttft_s=TTFT_S, itl_s=ITL_S)
    before, after = bench(srv.url), bench(srv.url)
    verdict = gate(before["id"], after["id"])  # exit 0
    metrics = judged(verdict)
    assert verdict["exit_code"] == 0 and not [m for m in metrics.values() if m["status"] == "fail"]
    for key in ("throughput", "ttft_p50", "tpot_p50", "itl_p50", "e2e_p50", "error_rate"):
        assert metrics[key]["status"] == "pass", metrics[key]["why"]
    assert abs(metrics["tpot_p50"]["change"]["relative"]) < 0.10  # within its threshold, either way
    # Energy cannot be judged without telemetry: a reason, never a zero.
    assert metrics["energy"]["status"] == "not_available" and "telemetry" in metrics["energy"]["why"]
    assert metrics["energy"]["baseline"]["value"] is None


def test_a_3_percent_change_under_a_10_percent_threshold_passes(serve: Serve, bench: Run, gate: Run) -> None:
    before = bench(serve(ttft_s=TTFT_S, itl_s=ITL_S).url)
    after = bench(serve(ttft_s=TTFT_S, itl_s=ITL_S * 1.03).url)
    verdict = gate(before["id"], after["id"], "--max-regression", "tpot_p50=10", "--max-regression",
                   "throughput=10")
    tpot = judged(verdict)["tpot_p50"]
    assert tpot["threshold"] == {"metric": "tpot_p50", "pct": 10.0, "kind": "relative",
                                 "source": "--max-regression"}
    assert tpot["status"] == "pass", tpot["why"]
    # 3 % slower as programmed, give or take what the loaded machine adds: well within the 10 % allowed.
    assert -0.10 < tpot["change"]["relative"] < 0.10
    assert tpot["why"].endswith("within the 10 % allowed" if tpot["change"]["relative"] >= 0 else "better")
    assert verdict["exit_code"] == 0


def test_overlapping_noisy_groups_are_not_distinguishable(paced: Serve, bench: Run, gate: Run) -> None:
    # Each group's three repeats run at other paces: the candidate's mean TPOT is 25 % worse than the
    # baseline's, but the repeats spread far more than that.
    per_repeat = 13  # warm-up + measured generation requests of one repeat
    fast, slow = 0.04, 0.08
    base = bench(paced([fast, slow, fast], per_repeat, ttft_s=TTFT_S).url, "--num-requests", "12", "--repeat",
                 "3")
    cand = bench(paced([slow, fast, slow], per_repeat, ttft_s=TTFT_S).url, "--num-requests", "12", "--repeat",
                 "3")
    verdict = gate(base["group"], cand["group"])  # exit 0: nothing regressed distinguishably

    tpot = judged(verdict)["tpot_p50"]
    assert tpot["status"] == "not_distinguishable", tpot
    assert tpot["change"]["worse_by"] > 0.10 and tpot["change"]["distinguishable"] is False, tpot
    assert tpot["change"]["low"] < 0 < tpot["change"]["high"]
    assert tpot["baseline"]["n_runs"] == 3 and tpot["candidate"]["n_runs"] == 3
    assert "Welch's t over the runs (n = 3 and 3)" in tpot["change"]["method"]
    assert verdict["status"] == "not_distinguishable" and verdict["exit_code"] == 0
    assert verdict["headline"].startswith("NOT DISTINGUISHABLE")
    assert verdict["baseline"]["group"] == base["group"] and len(verdict["candidate"]["runs"]) == 3


def test_a_changed_torch_version_in_the_fingerprint_is_named(
    serve: Serve, bench: Run, gate: Run, upgraded_torch: Callable[[str], None], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    srv = serve(ttft_s=TTFT_S, itl_s=ITL_S)
    before = bench(srv.url)
    upgraded_torch("2.99.0+cpu")
    after = bench(srv.url)
    assert after["environment"]["torch"] == "2.99.0+cpu" != before["environment"]["torch"]

    verdict = gate(before["id"], after["id"])
    stack = verdict["stack"]
    assert stack["known"] is True and stack["same"] is False
    (torch,) = [d for d in stack["drifts"] if d["key"] == "torch"]
    assert torch == {"key": "torch", "baseline": before["environment"]["torch"], "candidate": "2.99.0+cpu",
                     "matters": True, "reason": "torch changed"}
    assert stack["baseline_hash"] != stack["candidate_hash"]

    md = tmp_path / "summary.md"
    assert main(["gate", before["id"], after["id"], "--md", str(md)]) == verdict["exit_code"]
    out = capsys.readouterr().out
    line = f"torch: {before['environment']['torch']} → 2.99.0+cpu (matters: torch changed)"
    assert line in out
    assert "### What changed in the stack" in md.read_text() and "2.99.0+cpu" in md.read_text()


def test_runs_that_are_not_like_for_like_fail_naming_the_difference_unless_allowed(
    serve: Serve, bench: Run, gate: Run
) -> None:
    srv = serve(ttft_s=TTFT_S, itl_s=ITL_S)
    before, after = bench(srv.url), bench(srv.url, "--seed", "7")
    refused = gate(before["id"], after["id"], code=1)
    assert refused["status"] == "fail" and refused["like_for_like"]["same"] is False
    assert any("seed = 0 vs 7" in d for d in refused["like_for_like"]["differences"])
    assert "not like for like" in refused["headline"] and "seed" in refused["headline"]

    allowed = gate(before["id"], after["id"], "--allow-different")
    assert allowed["like_for_like"] == {**refused["like_for_like"], "allowed": True}
    assert allowed["exit_code"] == 0 and not [m for m in allowed["metrics"] if m["status"] == "fail"]


def test_gate_run_repeats_the_baselines_workload_here_and_gates_it(
    serve: Serve, bench: Run, gate: Run, capsys: pytest.CaptureFixture[str]
) -> None:
    before = bench(serve(ttft_s=TTFT_S, itl_s=ITL_S).url, "--label", "nightly")
    slower = serve(ttft_s=TTFT_S, itl_s=ITL_S * 1.3)
    verdict = gate(before["id"], "--run", "--base-url", slower.url, "--no-progress", code=1)
    assert judged(verdict)["tpot_p50"]["status"] == "fail"
    assert verdict["like_for_like"]["same"] is True  # the very workload, as bench --like makes it
    (new,) = verdict["candidate"]["runs"]
    assert verdict["candidate"]["labels"] == ["nightly"]
    stored = json.loads(_show(capsys, new))
    assert stored["config"]["like"]["run_id"] == before["id"]
    assert stored["config"]["dataset"] == before["config"]["dataset"]
    assert stored["config"]["load"] == before["config"]["load"]


def test_gate_run_with_repeat_makes_a_group(serve: Serve, bench: Run,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    srv = serve(ttft_s=0.01, itl_s=0.005)
    before = bench(srv.url, "--num-requests", "8")
    # What the group is judged to be (fast delays: the verdict is the noise's) is not this test's matter.
    code = main(["gate", before["id"], "--run", "--repeat", "2", "--base-url", srv.url, "--no-progress",
                 "--json"])
    verdict = json.loads(capsys.readouterr().out)
    assert code == verdict["exit_code"] and code in (0, 1)
    cand = verdict["candidate"]
    assert cand["group"] is not None and cand["group"].startswith("g-") and len(cand["runs"]) == 2
    assert cand["name"] == cand["group"] and before["id"] not in cand["runs"]
    assert judged(verdict)["tpot_p50"]["candidate"]["n_runs"] == 2


def test_bench_like_gate_gates_the_new_run_in_one_command(
    serve: Serve, bench: Run, capsys: pytest.CaptureFixture[str]
) -> None:
    before = bench(serve(ttft_s=TTFT_S, itl_s=ITL_S).url)
    slower = serve(ttft_s=TTFT_S, itl_s=ITL_S * 1.3)
    code = main(["bench", "--like", before["id"], "--base-url", slower.url, "--no-telemetry", "--no-progress",
                 "--gate", "--json"])
    verdict = json.loads(capsys.readouterr().out)  # the verdict is bench's only document
    assert code == 1 == verdict["exit_code"] and verdict["status"] == "fail"
    assert judged(verdict)["tpot_p50"]["status"] == "fail"
    assert verdict["baseline"]["runs"] == [before["id"]] and verdict["like_for_like"]["same"] is True

    assert main(["bench", "--base-url", slower.url, "--gate"]) == 2
    assert "--gate judges the new run(s) against the run repeated: give --like RUN" in capsys.readouterr().err


def _show(capsys: pytest.CaptureFixture[str], run_id: str) -> str:
    assert main(["show", run_id, "--json"]) == 0
    return capsys.readouterr().out
