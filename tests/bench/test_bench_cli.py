"""``gpuledger bench`` end to end: loopback server → real SQLite store → summary and JSON."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from stream_server import Scenario, StreamServer

from gpuledger.cli.main import main
from gpuledger.kinds.text.summary import TextGenerationSummary
from gpuledger.store import open_store

Serve = Callable[..., StreamServer]
REPO = Path(__file__).resolve().parents[2]


def bench(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["bench", "--no-telemetry", "--no-progress", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def bench_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    code, out, err = bench(capsys, "--json", *args)
    assert code == 0, err
    doc: dict[str, Any] = json.loads(out)  # stdout is the JSON document and nothing else
    return doc


def runs_in_store() -> list[Any]:
    st = open_store(None)
    try:
        return st.list_runs()
    finally:
        st.close()


def test_a_run_is_stored_with_every_request_and_printed_as_json(
    serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    srv = serve(Scenario(identity="vllm", ttft_s=0.01, itl_s=0.002))
    doc = bench_json(
        capsys,
        "--base-url",
        srv.url,
        "--input-len",
        "24",
        "--output-len",
        "16",
        "--num-requests",
        "12",
        "--concurrency",
        "3",
        "--label",
        "smoke",
        "--warmup",
        "2",
    )
    assert list(doc)[0] == "id"
    assert doc["status"] == "complete" and doc["label"] == "smoke" and doc["engine"] == "openai"
    assert doc["server"]["kind"] == "vllm" and doc["server"]["version"] == "0.0.0-streamserver"
    assert doc["config"]["load"] == {"kind": "concurrency", "stages": [{"stage": "c=3", "concurrency": 3}]}
    assert (
        doc["workload"]["dataset"] == "random" and doc["workload"]["input_len_method"] == "server_tokenizer"
    )
    assert doc["workload"]["warmup"] == {"requests": 2, "failed": 0}
    assert "hash" in doc["environment"] or "error" in doc["environment"]
    s = doc["summary"]
    assert s["num_requests"] == 12 and s["num_ok"] == 12 and s["error_rate"] == 0.0
    assert s["output_tokens_total"] == 12 * 16
    assert s["input_tokens_total"] == 12 * 24  # exact input lengths through the server's tokenizer
    assert s["token_source"] == {"server_usage": 12}
    assert s["output_len_mismatch"]["count"] == 0 and s["output_len_mismatch"]["checked"] == 12
    for key in (
        "window_s",
        "output_tokens_per_s",
        "total_tokens_per_s",
        "input_tokens_per_s",
        "requests_per_s",
    ):
        assert s[key] > 0
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        assert s[key]["n"] > 0
    assert doc["client"]["cpu_util_ratio"] >= 0 and doc["client"]["cores_usable"] >= 1
    assert srv.generation_requests == 14  # 2 warmup + 12 measured
    assert srv.max_active <= 3

    st = open_store(None)
    try:
        run = st.get_run(doc["id"])
        reqs = st.get_requests(doc["id"])
    finally:
        st.close()
    assert run.status == "complete" and len(reqs) == 12
    assert sorted(r.index for r in reqs) == list(range(12))
    assert all(r.t_send >= 0 for r in reqs)  # on the run's clock, zero at the window start
    assert isinstance(run.summary, TextGenerationSummary)
    assert run.summary.output_tokens_total == 192


def test_human_output_shows_the_summary_and_run_id(serve: Serve, capsys: pytest.CaptureFixture[str]) -> None:
    srv = serve(Scenario(identity="llamacpp"))
    code, out, err = bench(
        capsys, "--base-url", srv.url, "--num-requests", "4", "--output-len", "8", "--slo", "ttft_ms=60000"
    )
    assert code == 0, err
    run_id = runs_in_store()[0].id
    assert f"run id: {run_id}" in out
    assert "output throughput" in out and "tok/s" in out and "TTFT" in out and "goodput" in out
    assert "server=llamacpp b0000-streamserver" in out
    assert "server's own timings (llamacpp" in out


def test_api_key_is_sent_but_never_stored_or_printed(
    serve: Serve, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "sk-very-secret-7c1d9e"
    monkeypatch.setenv("MY_KEY", key)
    srv = serve(Scenario(identity="vllm"))
    code, out, err = bench(
        capsys, "--base-url", srv.url, "--num-requests", "3", "--api-key-env", "MY_KEY", "--json"
    )
    assert code == 0, err
    assert all(r.headers.get("Authorization") == f"Bearer {key}" for r in srv.requests)
    assert key not in out and key not in err
    db = Path(os.environ["GPULEDGER_DB"].removeprefix("sqlite:///"))
    for f in db.parent.glob(db.name + "*"):  # the database and its WAL
        assert key.encode() not in f.read_bytes()
    assert json.loads(out)["config"]["api_key_env"] == "MY_KEY"


def test_faults_fail_their_requests_and_the_run_continues(
    serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    faults = {1: "http_500", 3: "sse_error", 5: "malformed", 7: "cut", 9: "http_429", 10: "no_done"}
    srv = serve(Scenario(identity="vllm", faults=faults))
    doc = bench_json(
        capsys,
        "--base-url",
        srv.url,
        "--num-requests",
        "14",
        "--concurrency",
        "1",
        "--output-len",
        "6",
        "--warmup",
        "0",
    )
    s = doc["summary"]
    assert doc["status"] == "complete"
    assert s["num_requests"] == 14 and s["num_failed"] == 6 and s["num_ok"] == 8
    assert s["error_rate"] == pytest.approx(6 / 14)
    assert s["output_tokens_total"] == 8 * 6  # failed requests do not count as throughput
    assert s["errors"] == {
        "HTTP 500": 1,
        "HTTP 429": 1,
        "server error event": 1,
        "malformed JSON in stream": 1,
        "stream cut": 1,
        "stream ended before completion (no finish_reason and no [DONE])": 1,
    }
    st = open_store(None)
    try:
        failed = {r.index: r.error for r in st.get_requests(doc["id"]) if r.error}
    finally:
        st.close()
    assert set(failed) == set(faults)  # concurrency 1: arrival order == index order


def test_request_timeout_is_a_failed_request(serve: Serve, capsys: pytest.CaptureFixture[str]) -> None:
    srv = serve(Scenario(identity="vllm", faults={2: "hang"}))
    doc = bench_json(
        capsys,
        "--base-url",
        srv.url,
        "--num-requests",
        "4",
        "--concurrency",
        "2",
        "--request-timeout",
        "0.5",
        "--warmup",
        "0",
        "--output-len",
        "4",
    )
    assert doc["summary"]["num_failed"] == 1
    assert doc["summary"]["error_examples"][0]["error"] == "timeout: no complete response within 0.5 s"


def test_server_down_at_start_exits_6_and_creates_no_run(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, out, err = bench(capsys, "--base-url", f"http://127.0.0.1:{port}", "--num-requests", "2")
    assert code == 6
    assert out == ""
    assert err.startswith("error: cannot reach the inference server") and "Traceback" not in err
    assert runs_in_store() == []


def test_all_warmup_requests_failing_is_an_engine_error_without_a_run(
    serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    srv = serve(Scenario(identity="vllm", faults={0: "http_400", 1: "http_400"}))
    code, _, err = bench(capsys, "--base-url", srv.url, "--warmup", "2", "--num-requests", "2")
    assert code == 6 and "all 2 warmup requests failed" in err
    assert runs_in_store() == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--concurrency", "4", "--sweep", "1,2"], "--sweep runs its own concurrencies"),
        (["--rate", "2", "--sweep", "1,2"], "--sweep runs its own concurrencies"),
        (["--num-requests", "5", "--duration", "3"], "give --num-requests or --duration, not both"),
        (["--dataset", "builtin", "--input-len", "5"], "--input-len only applies to --dataset random"),
        (["--dataset", "jsonl"], "--dataset jsonl needs --dataset-path"),
        (["--slo", "latency=5"], "--slo"),
        (["--endpoint", "generate"], "--endpoint generate is not an endpoint of --engine openai"),
        (["--engine", "ollama", "--endpoint", "completions"], "is not an endpoint of --engine ollama"),
        (["--device", "cpu"], "--device and --dtype are for --engine torch only"),
        (
            ["--engine", "grpc"],
            "--engine must be openai, ollama, torch, diffusers, comfyui, openai-images or torch-train",
        ),
        (["--rate", "-1"], "--rate must be a positive"),
        (["--warmup", "-1"], "--warmup must be 0 or more"),
        (["--concurrency", "0"], "--concurrency must be at least 1"),
        (["--sweep", "1,x"], "--sweep takes comma-separated"),
        (["--engine", "torch"], "--engine torch needs --model"),
        (
            ["--engine", "torch", "--model", "dummy:x", "--base-url", "http://h"],
            "--engine torch runs in-process",
        ),
        (
            ["--engine", "torch", "--model", "dummy:x", "--sweep", "1,2"],
            "--engine torch supports --concurrency",
        ),
    ],
)
def test_invalid_flag_combinations_exit_2_with_one_line(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code, out, err = bench(capsys, *args)
    assert code == 2
    assert out == ""
    assert message in err, err
    assert err.count("\n") == 1 and err.startswith("error: ")
    assert runs_in_store() == []


def test_sweep_runs_each_concurrency_as_a_stage(serve: Serve, capsys: pytest.CaptureFixture[str]) -> None:
    srv = serve(Scenario(identity="vllm", itl_s=0.001))
    doc = bench_json(
        capsys,
        "--base-url",
        srv.url,
        "--sweep",
        "1,3",
        "--num-requests",
        "6",
        "--output-len",
        "5",
        "--warmup",
        "0",
    )
    s = doc["summary"]
    assert s["num_requests"] == 12
    assert [(st["stage"], st["concurrency"], st["num_requests"]) for st in s["stages"]] == [
        ("c=1", 1, 6),
        ("c=3", 3, 6),
    ]
    assert srv.max_active <= 3


def test_poisson_rate_with_a_concurrency_cap(serve: Serve, capsys: pytest.CaptureFixture[str]) -> None:
    srv = serve(Scenario(identity="vllm", itl_s=0.01))
    doc = bench_json(
        capsys,
        "--base-url",
        srv.url,
        "--rate",
        "200",
        "--concurrency",
        "2",
        "--num-requests",
        "10",
        "--output-len",
        "5",
        "--warmup",
        "0",
    )
    assert doc["summary"]["num_ok"] == 10
    assert doc["config"]["load"]["stages"] == [
        {"stage": "rate=200", "rate_requests_per_s": 200.0, "max_concurrency": 2}
    ]
    assert srv.max_active <= 2


def test_duration_bounds_the_sends(serve: Serve, capsys: pytest.CaptureFixture[str]) -> None:
    srv = serve(Scenario(identity="vllm", itl_s=0.02))
    t = time.perf_counter()
    doc = bench_json(
        capsys,
        "--base-url",
        srv.url,
        "--duration",
        "1",
        "--concurrency",
        "2",
        "--output-len",
        "5",
        "--warmup",
        "0",
    )
    assert time.perf_counter() - t < 60
    s = doc["summary"]
    assert s["num_ok"] >= 2
    assert s["window_s"] >= 1.0  # the last send is before the deadline, its request finishes after
    assert doc["config"]["duration_s"] == 1.0 and doc["config"]["num_requests_per_stage"] is None


def test_timings_are_never_below_the_servers_programmed_delays(
    serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    srv = serve(Scenario(identity="plain", ttft_s=0.05, itl_s=0.01, batch=1))
    doc = bench_json(
        capsys,
        "--base-url",
        srv.url,
        "--num-requests",
        "8",
        "--concurrency",
        "4",
        "--output-len",
        "10",
        "--warmup",
        "0",
    )
    s = doc["summary"]
    # Lower bounds are exact (nothing arrives before the server sends it); upper bounds are loose.
    assert 50.0 <= s["ttft_ms"]["p50"] < 50.0 + 1000.0
    assert 10.0 <= s["tpot_ms"]["p50"] < 10.0 + 200.0
    assert s["itl_ms"]["n"] == 8 * 9
    assert s["e2e_ms"]["min"] >= 50.0 + 9 * 10.0


def test_ollama_run_compares_server_and_client_timings(
    serve: Serve, capsys: pytest.CaptureFixture[str], server_fixtures: Path
) -> None:
    srv = serve(
        Scenario(
            identity="ollama",
            ollama_size_vram=0,
            itl_s=0.001,
            ollama_fixture=server_fixtures / "ollama/langchaingo-api-generate-stream-gemma3-1b.ndjson",
        ),
        model="gemma3:1b",
    )
    doc = bench_json(
        capsys,
        "--engine",
        "ollama",
        "--base-url",
        srv.url,
        "--model",
        "gemma3:1b",
        "--num-requests",
        "3",
        "--concurrency",
        "1",
        "--output-len",
        "22",
    )
    s = doc["summary"]
    assert s["token_source"] == {"server_usage": 3}
    assert s["output_tokens_total"] == 3 * 22  # eval_count of the recorded stream
    assert s["server_timings"]["n"] == 3 and s["server_timings"]["servers"] == ["ollama"]
    assert s["server_timings"]["server_decode_tokens_per_s_mean"] > 0
    assert doc["server"]["placement"]["processor"] == "100% CPU"
    assert any("entirely on the CPU" in w for w in doc["server"]["warnings"])


def test_telemetry_is_sampled_over_the_window_and_stored(
    serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    srv = serve(Scenario(identity="vllm", itl_s=0.01))
    code, out, err = bench(
        capsys,
        "--telemetry",
        "--telemetry-interval",
        "0.05",
        "--base-url",
        srv.url,
        "--num-requests",
        "4",
        "--output-len",
        "10",
        "--json",
    )
    assert code == 0, err
    doc = json.loads(out)
    devices = {d["device"] for d in doc["telemetry_summary"]}
    assert "cpu" in devices
    assert doc["config"]["telemetry"]["enabled"] is True
    st = open_store(None)
    try:
        samples = st.get_telemetry(doc["id"])
    finally:
        st.close()
    assert samples and all(s.t >= -0.5 for s in samples)


def test_sigterm_mid_run_keeps_every_finished_request(serve: Serve, tmp_path: Path) -> None:
    srv = serve(Scenario(identity="vllm", itl_s=0.02))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuledger.cli.main",
            "bench",
            "--no-telemetry",
            "--no-progress",
            "--json",
            "--base-url",
            srv.url,
            "--num-requests",
            "500",
            "--concurrency",
            "2",
            "--output-len",
            "10",
            "--warmup",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=REPO,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            runs = runs_in_store()
            if runs and runs[0].num_requests >= 4:
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        else:
            pytest.fail("the bench never wrote 4 requests")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    doc = json.loads(out)
    assert doc["status"] == "incomplete"
    interrupted = doc["summary"]["interrupted"]
    assert interrupted["signal"] == "SIGTERM"
    st = open_store(None)
    try:
        run = st.get_run(doc["id"])
        reqs = st.get_requests(doc["id"])
    finally:
        st.close()
    assert run.status == "incomplete"
    assert len(reqs) == interrupted["finished_requests"] == doc["summary"]["num_requests"]
    assert all(
        r.ok and r.output_tokens == 10 for r in reqs
    )  # finished ones are whole; cut ones were not kept
    assert len(reqs) < 500
    assert "saved as incomplete" in err.decode()


def test_run_writer_stores_requests_as_they_finish_for_any_engine(store: Any) -> None:
    import threading

    from gpuledger.bench.writer import RunWriter
    from gpuledger.records import RequestRecord, RunInfo

    w = RunWriter(
        store, RunInfo(id="", engine="torch", model="dummy:tiny"), telemetry=False, slo={"ttft_ms": 100.0}
    )
    run_id = w.start()
    assert store.get_run(run_id).status == "running"

    def produce(offset: int) -> None:
        for i in range(25):
            t = 0.01 * i
            w.add(
                RequestRecord(
                    index=offset + i,
                    t_send=t,
                    t_first=t + 0.05,
                    t_end=t + 0.2,
                    chunk_times=[t + 0.05, t + 0.1, t + 0.2],
                    output_tokens=3,
                    input_tokens=4,
                    token_source="engine",
                )
            )

    threads = [threading.Thread(target=produce, args=(k * 25,)) for k in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    deadline = time.monotonic() + 30
    while len(store.get_requests(run_id)) < 50 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(store.get_requests(run_id)) == 50  # on disk before the run is finished
    info = w.finish()
    assert info.status == "complete" and info.num_requests == 50
    assert isinstance(info.summary, TextGenerationSummary)
    assert info.summary.token_source == {"engine": 50}
    assert info.summary.slo is not None and info.summary.slo.met == 50
    assert info.client["cpu_util_ratio"] >= 0
    assert info.duration_s is not None and info.finished_at is not None


@pytest.mark.slow
def test_engine_torch_runs_in_process_through_the_same_writer(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pytest.importorskip("torch")
    from support.tiny_model import make_tiny_llama

    model_dir = make_tiny_llama(tmp_path / "tiny")
    doc = bench_json(
        capsys,
        "--engine",
        "torch",
        "--model",
        str(model_dir),
        "--device",
        "cpu",
        "--input-len",
        "8",
        "--output-len",
        "4",
        "--num-requests",
        "2",
        "--concurrency",
        "2",
    )
    assert doc["engine"] == "torch" and doc["status"] == "complete"
    assert doc["summary"]["num_ok"] == 2 and doc["summary"]["output_tokens_total"] == 8
    assert doc["summary"]["token_source"] == {"engine": 2}
    assert [r.id for r in runs_in_store()] == [doc["id"]]


def test_server_going_away_mid_run_stops_the_run_and_keeps_what_finished(
    serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    import threading

    srv = serve(Scenario(identity="vllm", itl_s=0.01))

    def stop_when_running() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            runs = runs_in_store()
            if runs and runs[0].num_requests >= 3:
                srv.stop()
                return
            time.sleep(0.05)

    killer = threading.Thread(target=stop_when_running, daemon=True)
    killer.start()
    code, out, err = bench(
        capsys,
        "--base-url",
        srv.url,
        "--num-requests",
        "100000",
        "--concurrency",
        "2",
        "--output-len",
        "10",
        "--warmup",
        "0",
        "--json",
    )
    killer.join(5)
    assert code == 6, err
    assert "stopped and was kept as incomplete" in err and "could not connect" in err
    doc = json.loads(out)
    assert doc["status"] == "incomplete"
    s = doc["summary"]
    assert s["aborted"].startswith("the server went away: 20 requests in a row could not connect")
    assert s["num_ok"] >= 3
    assert s["num_requests"] < 200


def test_a_slow_rate_never_sleeps_past_the_duration(serve: Serve, capsys: pytest.CaptureFixture[str]) -> None:
    srv = serve(Scenario(identity="vllm"))
    doc = bench_json(
        capsys,
        "--base-url",
        srv.url,
        "--rate",
        "0.05",
        "--duration",
        "1",
        "--output-len",
        "4",
        "--warmup",
        "0",
    )
    assert doc["summary"]["num_ok"] == 1  # sent at once; the next send (mean gap 20 s) is past the deadline
    assert doc["duration_s"] < 10
