"""Before the window: prompts made lazily and cut short by a signal (issue 16 item 6), the first request soon
whatever the count, and requested input lengths that hold on both endpoints (issue 15)."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from stream_server import Scenario, StreamServer

from gpuledger.bench.prepare import PREPARE_MAX, prepare_count
from gpuledger.bench.progress import BenchProgress, PrepProgress
from gpuledger.bench.runner import Hooks, run_bench
from gpuledger.cli.common import SafeConsole
from gpuledger.cli.main import Terminated, install_signal_handlers, main
from gpuledger.kinds.text.options import server_spec
from gpuledger.records.spec import DatasetSpec
from gpuledger.store import Store, open_store

Serve = Callable[..., StreamServer]
REPO = Path(__file__).resolve().parents[2]


def bench(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["bench", "--no-telemetry", "--no-progress", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def bench_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    code, out, err = bench(capsys, "--json", *args)
    assert code == 0, err
    doc: dict[str, Any] = json.loads(out)
    return doc


def records(run_id: str) -> list[Any]:
    with open_store(None) as st:
        return st.get_requests(run_id)


def runs_in_store() -> list[Any]:
    with open_store(None) as st:
        return st.list_runs()


def start_bench(url: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gpuledger.cli.main", "bench", "--no-telemetry", "--no-progress", "--json",
         "--base-url", url, *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def wait_for(condition: Callable[[], bool], timeout_s: float, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if proc.poll() is not None:
            pytest.fail(f"bench exited early ({proc.returncode}): {proc.communicate()[1]}")
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def generations(srv: StreamServer) -> list[Any]:
    return [r for r in srv.requests if r.number >= 0]


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


# ----------------------------------------------------------------------------------- signals, laziness


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_while_the_prompts_are_prepared_exits_130_at_once_with_one_line(
    serve: Serve, sig: signal.Signals
) -> None:
    # Every /tokenize takes 0.5 s: learning the tokenizer alone would take ~4 s, cutting 2,000 prompts the
    # old way ~6 minutes. The signal lands while the first calls are in flight.
    srv = serve(Scenario(identity="vllm", tokenize_delay_s=0.5))
    proc = start_bench(srv.url, "--input-len", "64", "--num-requests", "2000")
    try:
        wait_for(lambda: any(r.path == "/tokenize" for r in srv.requests), 30, proc)
        t = time.monotonic()
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
        took = time.monotonic() - t
    finally:
        stop(proc)
    assert proc.returncode == 130, err
    assert took < 3.0, took
    assert out == ""
    assert err == "error: interrupted while preparing the prompts: no run was created\n"
    assert runs_in_store() == []
    assert srv.generation_requests == 0


def _peak_kib(pid: int) -> int:
    """The process's peak resident memory since it started its program (``VmHWM``; ``ru_maxrss`` would
    count the test process it was forked from)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmHWM for process {pid}")


def _first_request_s(srv: StreamServer, n: int) -> tuple[float, int]:
    """(seconds from the start of ``gpuledger bench`` to the server's first generation request, the
    process's peak resident memory in KiB by then), the bench stopped with SIGTERM once it has sent one."""
    srv.requests.clear()
    t0 = time.perf_counter()
    proc = start_bench(srv.url, "--input-len", "64", "--output-len", "4", "--num-requests", str(n))
    try:
        wait_for(lambda: bool(generations(srv)), 60, proc)
        first = generations(srv)[0].t - t0
        peak = _peak_kib(proc.pid)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    finally:
        stop(proc)
    return first, peak


def test_the_first_request_does_not_wait_for_the_prompts_of_the_whole_run(serve: Serve) -> None:
    # 10 ms a tokenizer call: cutting a million prompts up front (three calls each) would take an hour.
    # Measured with a 3 ms tokenizer before prompts were made lazily: 1.6 s to the first request at 400
    # requests, 4.0 s at 2,000; now 0.5-0.7 s at 400, 2,000 or 100,000. The bounds leave room for a
    # machine busy with other work.
    srv = serve(Scenario(identity="vllm", tokenize_delay_s=0.01, itl_s=0.01))
    few, _ = _first_request_s(srv, 400)
    many, peak_kib = _first_request_s(srv, 1_000_000)
    assert few < 15.0 and many < 15.0, (few, many)
    assert many < 3 * few + 5.0, (few, many)
    assert peak_kib < 400 * 1024, peak_kib  # no list of a million prompts


def test_a_timed_run_sends_a_new_prompt_every_time(serve: Serve, capsys: pytest.CaptureFixture[str]) -> None:
    srv = serve(Scenario(identity="vllm"))
    doc = bench_json(capsys, "--base-url", srv.url, "--input-len", "16", "--output-len", "1", "--duration",
                     "1.5", "--concurrency", "8", "--warmup", "0")
    prompts = [r.body["prompt"] for r in generations(srv)]
    assert len(prompts) == doc["summary"]["num_requests"] > 8
    assert len(set(prompts)) == len(prompts)  # not a pool of 256 cycled
    prefixes = doc["workload"]["prompt_prefixes"]
    assert prefixes["each_send_new"] is True and prefixes["prompts"] == min(256, len(prompts))
    check = next(c for c in doc["summary"]["verdict"]["checks"] if c["name"] == "prefix_cache")
    assert check["status"] == "pass" and check["figure"] == 0.0, check


def test_only_the_first_prompts_are_made_before_the_window() -> None:
    assert prepare_count(DatasetSpec(name="random", input_len=128), 9) == 9
    assert prepare_count(DatasetSpec(name="random", input_len=128), 10**6) == PREPARE_MAX
    assert prepare_count(DatasetSpec(name="random", input_len=4_000_000), 64) == 2  # 64 MiB of text at most


# --------------------------------------------------------------------------------- requested lengths


@pytest.mark.parametrize("identity", ["vllm", "llamacpp"])
def test_chat_prompts_have_the_requested_length_with_the_template_counted(
    serve: Serve, capsys: pytest.CaptureFixture[str], identity: str
) -> None:
    srv = serve(Scenario(identity=identity, chat_template_tokens=12))
    doc = bench_json(capsys, "--base-url", srv.url, "--endpoint", "chat", "--input-len", "64",
                     "--output-len", "4", "--num-requests", "8")
    wl = doc["workload"]
    assert wl["chat_template_tokens"] == 12
    assert ("/tokenize with the chat's messages" if identity == "vllm" else "/apply-template") in \
        wl["chat_template_method"]
    assert wl["input_len_method"] == "server_tokenizer" and wl["input_len_exact_ratio"] == 1.0
    assert [r.input_tokens for r in records(doc["id"])] == [64] * 8  # as the server counted them
    checked = wl["prompt_tokens_check"]
    assert checked["server_tokens_total"] == checked["requested_tokens_total"] == 8 * 64
    assert not any("prompt tokens" in w for w in doc["server"]["warnings"])


def test_like_a_completions_run_on_the_chat_endpoint_is_the_same_workload(
    serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    srv = serve(Scenario(identity="vllm", chat_template_tokens=20))
    a = bench_json(capsys, "--base-url", srv.url, "--input-len", "48", "--range-ratio", "0.5",
                   "--output-len", "4", "--num-requests", "10", "--seed", "3")
    b = bench_json(capsys, "--like", a["id"], "--base-url", srv.url, "--endpoint", "chat")
    assert b["config"]["like"] == {"run_id": a["id"], "overridden": ["endpoint"]}
    by_index = {r.index: r.input_tokens for r in records(a["id"])}
    assert {r.index: r.input_tokens for r in records(b["id"])} == by_index  # request by request
    assert b["summary"]["input_tokens_total"] == a["summary"]["input_tokens_total"]
    assert len(set(by_index.values())) > 1  # the lengths varied, and varied alike


def test_an_input_len_shorter_than_the_chat_template_is_refused(
    serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    srv = serve(Scenario(identity="vllm", chat_template_tokens=12))
    code, _, err = bench(capsys, "--base-url", srv.url, "--endpoint", "chat", "--input-len", "10")
    assert code == 2
    assert ("--input-len 10 (from 10) leaves no room for content after the chat template's 12 tokens: give "
            "at least 13") in err
    assert runs_in_store() == []


def test_prompt_counts_more_than_5_percent_off_are_a_stored_one_line_warning(
    serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    # SGLang here has no tokenizer endpoint: lengths are estimated and its chat template is not counted.
    srv = serve(Scenario(identity="sglang", chat_template_tokens=12))
    code, out, err = bench(capsys, "--json", "--base-url", srv.url, "--endpoint", "chat", "--input-len", "64",
                           "--output-len", "4", "--num-requests", "5")
    assert code == 0, err
    doc = json.loads(out)
    line = ("prompt tokens: the server counted 76.0 per request where 64.0 were asked (+19%; 5 of 5 "
            "requests off by more than 5 %): the lengths were estimated (the server has no tokenizer "
            "endpoint to count them)")
    assert err == f"warning: {line}\n"
    assert line in doc["server"]["warnings"]
    assert doc["workload"]["prompt_tokens_check"] == {
        "requests": 5, "requested_tokens_total": 320, "server_tokens_total": 380,
        "requests_off_by_more_than_5_percent": 5,
        "source": "the server's usage.prompt_tokens of the measured requests",
    }


def test_a_tokenizer_whose_word_counts_do_not_add_up_gets_each_prompt_cut_to_length(
    serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    srv = serve(Scenario(identity="vllm", merge_after="of"))
    doc = bench_json(capsys, "--base-url", srv.url, "--input-len", "96", "--output-len", "2",
                     "--num-requests", "30", "--concurrency", "4")
    wl = doc["workload"]
    assert wl["input_len_how"].startswith("each prompt cut to length with the server's /tokenize + /detok")
    assert [r.input_tokens for r in records(doc["id"])] == [96] * 30
    assert wl["input_len_exact_ratio"] == 1.0


# ------------------------------------------------------------------------------ progress and signals


def test_the_preparation_and_the_window_are_drawn_on_the_console_passed_in(
    serve: Serve, store: Store
) -> None:
    srv = serve(Scenario(identity="vllm", tokenize_delay_s=0.002))
    buf = io.StringIO()
    console = SafeConsole(file=buf, force_terminal=True, width=100, highlight=False)
    spec = server_spec(base_url=srv.url, input_len=32, output_len=2, num_requests=4, telemetry=False)
    run_bench(spec, store, progress=True, hooks=Hooks(console=console))
    shown = buf.getvalue()
    assert "preparing: learning the server's tokenizer" in shown
    assert "c=8" in shown  # the window's bar


def test_without_a_console_no_progress_is_drawn(
    serve: Serve, store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    srv = serve(Scenario(identity="vllm"))
    spec = server_spec(base_url=srv.url, input_len=8, output_len=2, num_requests=2, telemetry=False)
    run_bench(spec, store, progress=True)
    assert capsys.readouterr().err == ""
    assert BenchProgress(object(), enabled=True).enabled is False  # type: ignore[arg-type]
    with PrepProgress(None) as prep:
        prep.step("anything", 1, 2)
    assert capsys.readouterr() == ("", "")  # without a console nothing is drawn, on either stream


def test_the_signal_handlers_installed_before_a_run_are_back_after_it(serve: Serve, store: Store) -> None:
    import gpuledger.cli.main as cli_main

    srv = serve(Scenario(identity="vllm"))
    restore = install_signal_handlers()
    # SIGINT as this process has it: Python's default_int_handler, or SIG_IGN when it was started in the
    # background of a non-interactive shell (`cmd &`), which the CLI leaves as it is.
    sigint_before = signal.getsignal(signal.SIGINT)
    try:
        spec = server_spec(base_url=srv.url, input_len=8, output_len=2, num_requests=2, telemetry=False)
        run_bench(spec, store)
        assert signal.getsignal(signal.SIGTERM) is cli_main._on_sigterm
        assert signal.getsignal(signal.SIGINT) is sigint_before
        # What `gpuledger run` does next (cost, report) is still interrupted with a line, not killed (143).
        with pytest.raises(Terminated):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
    finally:
        restore()
