"""Which inputs are bounded (issue 16 item 6): absurd numbers are one line and exit 2 before anything is
opened, the server's context length bounds the lengths, and a huge concurrency costs nothing up front."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from stream_server import Scenario, StreamServer

from gpuledger.bench.bounds import MAX_CONCURRENCY, in_flight_budget
from gpuledger.cli.main import main
from gpuledger.errors import UsageError
from gpuledger.store import open_store

Serve = Callable[..., StreamServer]
REPO = Path(__file__).resolve().parents[2]
# Nothing listens here: a bound that were not checked first would end in "cannot reach" (exit 6).
NOWHERE = "http://127.0.0.1:9"


def bench(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["bench", "--no-telemetry", "--no-progress", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def runs_in_store() -> list[Any]:
    with open_store(None) as st:
        return st.list_runs()


HOSTILE = [
    (["--concurrency", "1000000000"], "--concurrency must be at most 10000 (requests in flight"),
    (["--num-requests", "100000000000000000000000"], "'--num-requests': 100000000000000000000000 is beyond"),
    (["--num-requests", "2000000"], "--num-requests must be at most 1000000"),
    (["--input-len", "1000000000"], "--input-len must be at most 10000000 tokens"),
    (["--output-len", "1000000000"], "--output-len must be at most 10000000 tokens"),
    (["--rate", "1e-300"], "--rate must be at least 1.65344e-06 requests/s"),
    (["--rate", "0.001", "--num-requests", "1000"], "takes 11.6 days on average, more than the longest"),
    (["--rate", "1e9"], "--rate must be at most 100000 requests/s"),
    (["--rate", "inf"], "'--rate': inf is not a finite number"),
    (["--rate", "nan"], "'--rate': nan is not a finite number"),
    (["--seed", "100000000000000000000000"], "'--seed': 100000000000000000000000 is beyond a 64-bit integer"),
    (["--seed", "-1"], "--seed must be at least 0"),
    (["--sweep", "1,2,20000"], "--sweep must be at most 10000"),
    (["--sweep", ",".join(str(c) for c in range(1, 70))], "--sweep runs at most 64 stages, got 69"),
    (["--duration", "1e9"], "--duration must be at most 604800 s"),
    (["--duration", "inf"], "'--duration': inf is not a finite number"),
    (["--warmup", "1000000"], "--warmup must be at most 10000"),
    (["--request-timeout", "1e12"], "--request-timeout must be at most 86400 s"),
    (["--telemetry-interval", "1e-9"], "--telemetry-interval must be at least 0.01 s"),
    (["--server-metrics", "--server-metrics-interval", "1e-6"], "--server-metrics-interval must be at least"),
    (["--slo", "ttft_ms=1e30"], "--slo ttft_ms must be at most 604800000 ms"),
    (["--range-ratio", "nan"], "'--range-ratio': nan is not a finite number"),
    (["--engine", "torch", "--model", "dummy:x", "--concurrency", "100000"], "must be at most 4096"),
]


@pytest.mark.parametrize(("args", "message"), HOSTILE, ids=[" ".join(a)[:40] for a, _ in HOSTILE])
def test_an_absurd_number_is_one_line_and_exit_2_before_anything_is_opened(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    t = time.monotonic()
    where = [] if "torch" in args else ["--base-url", NOWHERE]  # torch runs in-process
    code, out, err = bench(capsys, *where, *args)
    assert time.monotonic() - t < 10  # no hang, no 100 % CPU for minutes
    assert code == 2, err
    assert out == ""
    assert message in err, err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    assert runs_in_store() == []


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["cost", "abcd", "--slo-attainment", "inf"], "'--slo-attainment': inf is not a finite number"),
        (["cost", "abcd", "--slo-attainment", "nan"], "'--slo-attainment': nan is not a finite number"),
        (["run", "--memory-budget", "inf"], "'--memory-budget': Input should be less than or equal to 1048"),
        (["run", "--memory-budget", "1e9"], "'--memory-budget': Input should be less than or equal to 1048"),
        (["sample", "--interval", "nan"], "'--interval': nan is not a finite number"),
        (["telemetry", "import", "abcd", "x.csv", "--clock-offset", "-inf"], "'--clock-offset': -inf is"),
        (["runs", "--limit", "99999999999999999999999"], "'--limit': 99999999999999999999999 is beyond a"),
    ],
)
def test_no_command_takes_inf_nan_or_an_integer_beyond_64_bits(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err, err
    assert err.count("\n") == 1, err


def test_a_prompt_longer_than_the_servers_context_is_refused_before_a_run_exists(
    serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    srv = serve(Scenario(identity="vllm", max_model_len=256))
    code, _, err = bench(capsys, "--base-url", srv.url, "--input-len", "200", "--range-ratio", "0.5")
    assert code == 2, err
    assert ("--input-len 200 (up to 300 with --range-ratio 0.5) is more than the server's context length, "
            "256 tokens (GET /v1/models max_model_len)") in err
    assert runs_in_store() == [] and srv.generation_requests == 0


def test_the_default_lengths_are_held_to_the_servers_context_as_given_ones_are(
    serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    """--dataset random without --input-len or --output-len: its defaults (128 tokens each) are what is sent,
    so they are what the server's context is checked against."""
    srv = serve(Scenario(identity="vllm", max_model_len=100))
    code, _, err = bench(capsys, "--base-url", srv.url, "--dataset", "random")
    assert code == 2, err
    assert "--input-len 128 (the default) is more than the server's context length, 100 tokens" in err
    assert runs_in_store() == [] and srv.generation_requests == 0
    roomy = serve(Scenario(identity="vllm", max_model_len=200))
    code, out, err = bench(capsys, "--base-url", roomy.url, "--dataset", "random", "--input-len", "100",
                           "--num-requests", "2", "--json")
    assert code == 0, err
    assert any("prompt + output tokens (up to 100 + 128) exceed the server's context length, 200 tokens" in w
               for w in json.loads(out)["server"]["warnings"])


def test_llamacpps_slot_context_bounds_the_prompt(serve: Serve, capsys: pytest.CaptureFixture[str]) -> None:
    srv = serve(Scenario(identity="llamacpp"))  # /props: n_ctx 2048
    code, _, err = bench(capsys, "--base-url", srv.url, "--input-len", "3000")
    assert code == 2
    assert "2048 tokens (GET /props default_generation_settings.n_ctx (llama.cpp, per slot))" in err


def test_prompt_and_output_over_the_context_run_with_a_stored_warning(
    serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    srv = serve(Scenario(identity="vllm", max_model_len=256))
    code, out, err = bench(capsys, "--base-url", srv.url, "--input-len", "200", "--output-len", "100",
                           "--num-requests", "2", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["server"]["details"]["context_length"] == 256
    assert any("prompt + output tokens (up to 200 + 100) exceed the server's context length, 256 tokens" in w
               for w in doc["server"]["warnings"])


def test_an_output_that_leaves_no_room_for_a_prompt_is_refused(
    serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    srv = serve(Scenario(identity="vllm", max_model_len=256))
    code, _, err = bench(capsys, "--base-url", srv.url, "--output-len", "256")
    assert code == 2
    assert "--output-len 256 leaves no room for a prompt in the server's context length, 256 tokens" in err


def test_a_concurrency_above_the_requests_starts_only_as_many_workers(
    serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    srv = serve(Scenario(identity="vllm"))
    t = time.monotonic()
    code, out, err = bench(capsys, "--base-url", srv.url, "--concurrency", str(MAX_CONCURRENCY),
                           "--num-requests", "3", "--output-len", "2", "--warmup", "0", "--json")
    assert code == 0, err
    assert time.monotonic() - t < 20
    assert json.loads(out)["summary"]["num_ok"] == 3
    assert srv.max_active <= 3


def _limited(files: int) -> Callable[[], None]:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (files, files))

    return limit


def test_more_in_flight_than_the_process_may_open_is_refused_naming_the_limit(serve: Serve) -> None:
    srv = serve(Scenario(identity="vllm"))
    proc = subprocess.run(
        [sys.executable, "-m", "gpuledger.cli.main", "bench", "--no-telemetry", "--no-progress",
         "--base-url", srv.url, "--concurrency", "5000", "--num-requests", "2"],
        capture_output=True, text=True, timeout=60, cwd=REPO, preexec_fn=_limited(256),
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.returncode == 2, proc.stderr
    assert ("--concurrency 5000 needs 5064 open files and this process may open 256 (ulimit -n; hard limit "
            "256): at most 192 requests can be in flight") in proc.stderr
    assert srv.generation_requests == 0


def test_the_open_file_limit_is_raised_towards_the_hard_limit_when_needed() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 600:
        pytest.skip(f"the hard open-file limit here is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (300, hard))
    try:
        assert in_flight_budget(500) == 500
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= 564
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_budget_of_an_uncapped_rate_is_what_the_process_can_hold() -> None:
    budget = in_flight_budget(None)
    assert 1 <= budget <= MAX_CONCURRENCY
    with pytest.raises(UsageError, match="needs"):
        in_flight_budget(10**9)


@pytest.mark.parametrize("path", ["/dev/zero", "FIFO"])
def test_a_dataset_path_that_is_not_a_regular_file_is_refused_not_read_forever(
    serve: Serve, capsys: pytest.CaptureFixture[str], tmp_path: Path, path: str
) -> None:
    srv = serve(Scenario(identity="vllm"))
    if path == "FIFO":
        os.mkfifo(tmp_path / "fifo")
        path = str(tmp_path / "fifo")
    t = time.monotonic()
    code, _, err = bench(capsys, "--base-url", srv.url, "--dataset", "jsonl", "--dataset-path", path)
    assert time.monotonic() - t < 10
    assert code == 4, err
    assert f"dataset file {path} is not a regular file" in err
    assert runs_in_store() == []
