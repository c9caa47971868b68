"""The verdict and the repeats end to end: ``gpuledger bench`` against the programmable loopback server
(127.0.0.1 only) into a real SQLite store, then ``show``, ``cost``, ``compare`` and ``report`` of what it
stored (issue 22, "Done when")."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuledger.cli.main import main

Serve = Callable[..., Any]
REPO = Path(__file__).resolve().parents[2]


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    code = main([*args, "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    doc: dict[str, Any] = json.loads(out.out)
    return doc


def bench(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> dict[str, Any]:
    return cli(capsys, "bench", "--no-telemetry", "--no-progress", "--base-url", url, *args)


def checks(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    verdict = run["summary"]["verdict"]
    return {c["name"]: c for c in verdict["checks"]}


LOAD = ("--dataset", "random", "--input-len", "16", "--output-len", "16", "--concurrency", "4")


# -- the verdict of one run ------------------------------------------------------------------------


def test_five_requests_warn_that_p99_is_not_supported_by_5_samples(
    serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    srv = serve(ttft_s=0.005, itl_s=0.001)
    run = bench(capsys, srv.url, *LOAD, "--num-requests", "5")
    samples = checks(run)["samples"]
    assert samples["status"] == "warn" and samples["figure"] == 5
    assert "p99" in samples["why"] and "not supported by 5 samples" in samples["why"]
    assert run["summary"]["verdict"]["status"] in ("warn", "fail")


def test_a_dataset_that_repeats_one_long_prompt_warns_about_the_prefix_cache(
    serve: Serve, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    prompt = "You are a careful reviewer. Read the whole contract below and list every risk. " * 30
    data = tmp_path / "same.jsonl"
    data.write_text("".join(json.dumps({"prompt": prompt}) + "\n" for _ in range(40)))
    srv = serve(ttft_s=0.002, itl_s=0.001)
    run = bench(
        capsys,
        srv.url,
        "--dataset",
        "jsonl",
        "--dataset-path",
        str(data),
        "--output-len",
        "8",
        "--num-requests",
        "30",
    )
    prefix = checks(run)["prefix_cache"]
    assert prefix["status"] == "warn" and prefix["figure"] > 0.9
    assert "prefix cache" in prefix["why"]
    assert run["workload"]["prompt_prefixes"]["longest_repeated_prefix_chars"] == len(prompt)


def test_distinct_random_prompts_pass_the_prefix_check_and_a_clean_run_stores_a_verdict(
    serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    srv = serve(ttft_s=0.002, itl_s=0.001)
    run = bench(capsys, srv.url, *LOAD, "--num-requests", "120")
    c = checks(run)
    assert c["prefix_cache"]["status"] == "pass"
    assert c["client_bound"]["status"] == "pass"  # the client waited for the server's tokens
    assert c["samples"]["status"] == "pass" and c["errors"]["status"] == "pass"
    # What the writer records for the checks: the machine's CPU use over the window, judged as it was stored.
    busy = run["client"]["machine_cpu_busy_ratio"]
    assert isinstance(busy, float) and c["cpu_contention"]["figure"] == pytest.approx(busy)


def test_a_rate_load_records_its_send_schedule(serve: Serve, capsys: pytest.CaptureFixture[str]) -> None:
    srv = serve(ttft_s=0.002, itl_s=0.001)
    run = bench(
        capsys,
        srv.url,
        "--dataset",
        "random",
        "--input-len",
        "16",
        "--output-len",
        "8",
        "--rate",
        "200",
        "--num-requests",
        "60",
    )
    sched = run["client"]["send_schedule"]
    # Every request's lateness is recorded and the check reads it (how late a loaded machine sends is not
    # the code's to bound: the check's thresholds judge it, and tests/validity/test_verdict.py those).
    assert sched["requests"] == 60 and sched["lag_ms"]["p50"] >= 0, sched
    assert sched["lag_ms"]["max"] >= sched["lag_ms"]["p99"] >= sched["lag_ms"]["p50"]
    check = checks(run)["send_schedule"]
    assert check["unit"] == "ms" and check["figure"] == pytest.approx(sched["lag_ms"]["p99"])


def pinned(core: int, code: str) -> list[str]:
    """A Python child that pins itself to ``core`` (``os.sched_setaffinity``), then runs ``code``."""
    return [sys.executable, "-c", f"import os, runpy, sys\nos.sched_setaffinity(0, {{{core}}})\n{code}"]


def test_a_client_pinned_to_one_core_against_an_instant_server_fails_client_bound() -> None:
    """The instant server (no delay, 512-token answers written in one go) on one core, the client pinned
    to another with 64 requests in flight: the client's event loop is the bottleneck."""
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("os.sched_setaffinity is Linux-only")
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("needs two CPUs: one for the server, one for the client")
    script = str(REPO / "tests" / "bench" / "stream_server.py")
    serve_code = (
        f"sys.argv = [{script!r}, '--port', '0', '--batch', '512']\n"
        f"runpy.run_path({script!r}, run_name='__main__')"
    )
    server = subprocess.Popen(
        pinned(cores[1], serve_code),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        assert server.stdout is not None
        ready = server.stdout.readline().split()
        assert ready and ready[0] == "READY", ready
        argv = [
            "bench",
            "--no-telemetry",
            "--no-progress",
            "--json",
            "--base-url",
            ready[1],
            "--dataset",
            "random",
            "--input-len",
            "8",
            "--output-len",
            "512",
            "--concurrency",
            "64",
            "--num-requests",
            "3000",
        ]
        client = subprocess.run(
            pinned(cores[0], f"from gpuledger.cli.main import main\nsys.exit(main({argv!r}))"),
            capture_output=True,
            text=True,
            timeout=300,
            cwd=REPO,
            env=os.environ.copy(),
        )
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    assert client.returncode == 0, client.stderr[-2000:]
    run = json.loads(client.stdout)
    bound = checks(run)["client_bound"]
    assert bound["status"] == "fail", bound
    assert bound["figure"] >= 0.85 and "limited the run" in bound["why"]
    assert run["client"]["cores_usable"] == 1


def test_show_prints_the_verdict_first_and_compare_names_the_check_that_differs(
    serve: Serve, capsys: pytest.CaptureFixture[str], prof: tuple[str, str]
) -> None:
    srv = serve(ttft_s=0.002, itl_s=0.001)
    few = bench(capsys, srv.url, *LOAD, "--num-requests", "5")
    many = bench(capsys, srv.url, *LOAD, "--num-requests", "120")
    assert main(["show", few["id"]]) == 0
    text = " ".join(capsys.readouterr().out.split())
    first = text.index("validity")
    assert first < text.index("summary") and "not supported by 5 samples" in text
    comp = cli(capsys, "compare", many["id"], few["id"], *prof)
    warnings = comp["pairs"][0]["warnings"]
    assert any("validity differs on samples" in w for w in warnings), warnings


# -- repeats ---------------------------------------------------------------------------------------

REPEAT = (
    "--dataset",
    "random",
    "--input-len",
    "8",
    "--output-len",
    "16",
    "--concurrency",
    "2",
    "--num-requests",
    "12",
    "--warmup",
    "1",
)
PER_REPEAT = 13  # warm-up + measured generation requests of one repeat


def group_of(capsys: pytest.CaptureFixture[str], url: str, n: int = 3) -> dict[str, Any]:
    doc = bench(capsys, url, *REPEAT, "--repeat", str(n))
    assert doc["group"].startswith("g-") and len(doc["runs"]) == n
    assert [r["workload"]["repeat"]["index"] for r in doc["runs"]] == list(range(1, n + 1))
    assert {r["workload"]["repeat"]["group"] for r in doc["runs"]} == {doc["group"]}
    return doc


def rate_interval(capsys: pytest.CaptureFixture[str], group: str, prof: tuple[str, str]) -> dict[str, Any]:
    doc = cli(capsys, "cost", group, *prof)
    assert doc["group"] == group and doc["level"] == 0.95
    fig: dict[str, Any] = doc["figures"]["output tokens"]
    assert fig["n"] == 3 and fig["unit"] == "output tok/s"
    return fig


def test_a_pace_changed_between_repeats_widens_the_interval(
    paced: Serve, capsys: pytest.CaptureFixture[str], prof: tuple[str, str]
) -> None:
    steady = group_of(capsys, paced([0.004, 0.004, 0.004], PER_REPEAT).url)
    varied = group_of(capsys, paced([0.002, 0.004, 0.008], PER_REPEAT).url)
    a, b = rate_interval(capsys, steady["group"], prof), rate_interval(capsys, varied["group"], prof)
    assert b["ci95_half_width"] / b["mean"] > 3 * (a["ci95_half_width"] / a["mean"])
    assert b["cv"] > 0.3 > a["cv"]
    assert a["ci95_low"] < a["mean"] < a["ci95_high"]


def test_groups_with_overlapping_intervals_are_not_distinguishable_and_2x_apart_are(
    paced: Serve, capsys: pytest.CaptureFixture[str], prof: tuple[str, str]
) -> None:
    wide_a = group_of(capsys, paced([0.002, 0.004, 0.008], PER_REPEAT).url)
    wide_b = group_of(capsys, paced([0.003, 0.005, 0.006], PER_REPEAT).url)
    fast = group_of(capsys, paced([0.004, 0.004, 0.004], PER_REPEAT).url)
    slow = group_of(capsys, paced([0.008, 0.008, 0.008], PER_REPEAT).url)

    overlap = cli(capsys, "compare", wide_a["group"], wide_b["group"], *prof)["ratio"]
    assert overlap["ci95_low"] < 1 < overlap["ci95_high"]
    assert overlap["distinguishable_at_95"] is False
    assert overlap["meaning"].startswith("not distinguishable at 95 %")

    apart = cli(capsys, "compare", fast["group"], slow["group"], *prof)["ratio"]
    assert 1 < apart["ci95_low"] < apart["ratio"] < apart["ci95_high"]
    assert apart["ratio"] == pytest.approx(1.9, rel=0.25)
    assert apart["distinguishable_at_95"] is True

    # On the terminal: the ratio with its interval, to the precision it supports, and the words.
    assert main(["compare", wide_a["group"], wide_b["group"], *prof]) == 0
    text = capsys.readouterr().out
    assert "not distinguishable at 95 %" in text and "95 % CI" in text


def test_the_report_of_a_group_leads_with_its_interval(
    paced: Serve, capsys: pytest.CaptureFixture[str], prof: tuple[str, str]
) -> None:
    g = group_of(capsys, paced([0.003, 0.004, 0.005], PER_REPEAT).url)
    doc = cli(capsys, "report", g["group"], *prof)
    answer = doc["sections"][0]["answers"][0]
    assert answer["title"] == f"group {g['group']} (3 runs)"
    assert "95 % CI" in answer["headline"] and "CV" in answer["headline"]
    assert [r["id"] for r in doc["runs"]] == [r["id"] for r in g["runs"]]
