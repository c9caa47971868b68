"""The gate's rules one by one: its statistics against published values, its bounded flags, what it writes for
hostile labels, its cost judged under a profile, and a ``gate --help`` that imports nothing heavy."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from gatecase import ITL_S, TTFT_S, judged

from gpuledger.cli.main import main
from gpuledger.gate import stats

Serve = Callable[..., Any]
Run = Callable[..., dict[str, Any]]

# Welch's t-test, the worked example of its Wikipedia article (two samples of 15: t = −2.46, ν ≈ 25.0).
A1 = [27.5, 21.0, 19.0, 23.6, 17.0, 17.9, 16.9, 20.1, 21.9, 22.6, 23.1, 19.6, 19.0, 21.7, 21.4]
A2 = [27.1, 22.0, 20.8, 23.4, 23.4, 23.5, 25.8, 22.0, 24.8, 20.2, 21.9, 22.1, 22.9, 20.5, 24.4]


def test_the_difference_of_two_groups_is_welchs_t_test() -> None:
    a, b = stats.group_estimate(A1), stats.group_estimate(A2)
    assert a is not None and b is not None
    diff = stats.difference(a, b)
    assert diff.df == pytest.approx(24.99, abs=0.01)
    se = math.hypot(a.se or 0.0, b.se or 0.0)
    assert diff.value / se == pytest.approx(2.46, abs=0.005)
    assert diff.half_width == pytest.approx(2.0595 * se, rel=1e-3)  # t(0.975, 25) = 2.0595
    assert diff.distinguishable is True  # p = 0.021 < 0.05


def test_a_percentiles_interval_comes_from_its_order_statistics() -> None:
    est = stats.quantile_estimate([float(i) for i in range(1, 101)], 0.5, "requests")
    assert est is not None and est.value == 50.5
    assert "x(40) … x(60)" in est.method  # ranks 50 ± 1.96·5
    assert est.se == pytest.approx((60 - 40) / (2 * stats.Z))
    p99 = stats.quantile_estimate([float(i) for i in range(1, 41)], 0.99, "requests")
    assert p99 is not None and p99.se is None and p99.why is not None and "do not bound p99" in p99.why


def test_a_closed_loops_rate_is_as_precise_as_its_items_and_a_share_has_agresti_caffo() -> None:
    steady = stats.ratio_spread([8.0] * 24, [0.5] * 24, concurrency=6)
    assert steady.relative_se == 0.0 and steady.df == 23
    varied = stats.ratio_spread([8.0] * 24, [0.4, 0.6] * 12, concurrency=6)
    assert varied.relative_se == pytest.approx(math.sqrt(0.1**2 * 24 / 23 / 0.5**2 / 24))
    assert stats.count_spread(100).relative_se == pytest.approx(0.1)
    share = stats.share_estimate(0, 40)
    assert share is not None and share.value == 0.0
    assert share.se == pytest.approx(math.sqrt((1 / 42) * (41 / 42) / 42))


@pytest.mark.parametrize(
    ("flag", "says"),
    [
        ("tpot_p50=0", "more than 0 and at most 1000"),
        ("tpot_p50=1001", "more than 0 and at most 1000"),
        ("error_rate=150", "at most 100 (percentage points)"),
        ("tpot_p50=nan", "more than 0"),
        ("tpot_p50=fast", "PCT must be a number"),
        ("nope=5", "'nope' is not a metric the gate judges"),
        ("tpot_p50", "expected METRIC=PCT"),
        ("cost=5", "needs --profile"),
    ],
)
def test_a_bad_max_regression_is_one_line_and_exit_2(flag: str, says: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    # Refused before any store is read: the runs named need not exist.
    assert main(["gate", "aaaa1111", "bbbb2222", "--max-regression", flag]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and says in err[0], err


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["gate", "aaaa1111"], "needs BASELINE CANDIDATE, or BASELINE --run"),
        (["gate", "aaaa1111", "bbbb2222", "--run"], "--run makes the candidate"),
        (["gate", "aaaa1111", "bbbb2222", "--repeat", "3"], "--repeat is for --run only"),
        (["gate", "aaaa1111", "bbbb2222", "--base-url", "http://x"], "--base-url is for --run only"),
    ],
)
def test_gate_usage_errors(args: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and says in err


def test_unknown_runs_are_not_found(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gate", "zzzz9999", "yyyy8888"]) == 3
    assert capsys.readouterr().err.startswith("error: ")


def test_hostile_labels_reach_junit_and_markdown_inert(serve: Serve, bench: Run, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    hostile = "\x1b[31m<b>&lab|el</b>\x07"
    srv = serve(ttft_s=0.01, itl_s=0.005)
    a = bench(srv.url, "--num-requests", "8", "--label", hostile)
    b = bench(srv.url, "--num-requests", "8", "--label", hostile)
    junit, md = tmp_path / "g.xml", tmp_path / "g.md"
    code = main(["gate", a["id"], b["id"], "--junit", str(junit), "--md", str(md)])
    out = capsys.readouterr().out
    assert code in (0, 1)
    assert "\x1b" not in out and "\x07" not in out
    xml = junit.read_text()
    assert "\x1b" not in xml and "\x07" not in xml
    props = {p.get("name"): p.get("value") for p in ET.parse(junit).getroot().iter("property")}
    assert "<b>&lab|el</b>" in (props["baseline"] or "")  # escaped in the file, exact once parsed
    text = md.read_text()
    assert "\x1b" not in text and "<b>" not in text and "&lt;b&gt;" in text and "lab\\|el" in text


def test_the_cost_per_unit_is_judged_under_one_profile(serve: Serve, bench: Run, gate: Run,
                                                       tmp_path: Path) -> None:
    profile = tmp_path / "instance.yaml"
    profile.write_text("name: test-instance\ncurrency: USD\nrental_per_hour: 2.0\n")
    before = bench(serve(ttft_s=TTFT_S, itl_s=ITL_S).url)
    after = bench(serve(ttft_s=TTFT_S, itl_s=ITL_S * 1.3).url)
    verdict = gate(before["id"], after["id"], "--profile", str(profile), code=1)
    cost = judged(verdict)["cost"]
    assert verdict["profile"] == "test-instance"
    assert cost["unit"] == "USD per 1M output tokens" and cost["status"] == "fail"
    rate = judged(verdict)["throughput"]
    # The price is the reciprocal of the throughput under one hourly cost: its change is theirs, inverted.
    ratio = rate["baseline"]["value"] / rate["candidate"]["value"]
    assert cost["change"]["relative"] == pytest.approx(ratio - 1.0, rel=1e-6)
    assert cost["change"]["low"] < cost["change"]["relative"] < cost["change"]["high"]
    assert cost["baseline"]["value"] == pytest.approx(2.0 / (rate["baseline"]["value"] * 3600) * 1e6)


def test_gate_help_imports_nothing_heavy() -> None:
    probe = ("import json, sys\nfrom gpuledger.cli.main import main\ncode = main(['gate', '--help'])\n"
             "sys.stdout.flush()\n"
             "sys.stderr.write(json.dumps({'code': code, 'modules': sorted(sys.modules)}))\n")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    doc = json.loads(proc.stderr.strip().splitlines()[-1])
    heavy = ("gpuledger.bench", "gpuledger.store", "gpuledger.cost", "gpuledger.gate", "gpuledger.report",
             "aiohttp", "sqlalchemy", "torch")
    assert doc["code"] == 0 and "--max-regression" in proc.stdout
    assert [m for m in doc["modules"] if any(m == h or m.startswith(h + ".") for h in heavy)] == []
