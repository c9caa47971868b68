"""SIGINT / SIGTERM while the server's exporter is slow (tests/support/exposition.py holds its answers back
for as long as the test runs: its URL asks a 10-minute timeout, so only the signal can end the wait):
while the exporter is opened, the bench stops at once, exit 130, no run created; after the measured window
(the last reading, the run being saved), it stops at once too, exit 130, the run saved ``incomplete`` with
every finished request and ``summary.interrupted`` — it used to wait the exporter out and exit 0."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from stream_server import Scenario, StreamServer

from gpuledger.store import open_store
from support.exposition import HEAD, ExpositionServer, dcgm_power

REPO = Path(__file__).resolve().parents[2]
ANSWER = HEAD + dcgm_power(300.0, gpu=0)


@pytest.fixture
def server() -> Iterator[StreamServer]:
    srv = StreamServer(Scenario(identity="vllm", itl_s=0.005)).start()
    yield srv
    srv.stop()


def _bench(server: StreamServer, exporter: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gpuledger.cli.main", "bench", "--no-progress", "--json", "--no-telemetry",
         "--telemetry-from", f"{exporter}?interval=0.2s&timeout=10m", "--base-url", server.url,
         "--output-len", "8", "--warmup", "0", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _until(check: Callable[[], bool], proc: subprocess.Popen[str], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if proc.poll() is not None:
            pytest.fail(f"bench exited early ({proc.returncode}): {proc.communicate()[1]}")
        assert time.monotonic() < deadline, "the bench never got there"
        time.sleep(0.02)


def _end(proc: subprocess.Popen[str]) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=60)  # a hang guard: without the fix it waits 10 minutes
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_while_the_exporter_is_opened_stops_the_bench_before_any_run(
        server: StreamServer, sig: signal.Signals) -> None:
    with ExpositionServer(lambda n: ANSWER, hang=lambda n: True) as exporter:
        proc = _bench(server, exporter.url, "--num-requests", "3")
        _until(exporter.hung.is_set, proc)
        proc.send_signal(sig)
        out, err = _end(proc)
    assert proc.returncode == 130, err
    assert "interrupted while opening the telemetry: no run was created" in err and "Traceback" not in err
    assert [r for r in server.requests if r.number >= 0] == []
    store = open_store(None)
    try:
        assert store.list_runs() == []
    finally:
        store.close()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_after_the_window_saves_the_run_incomplete_without_waiting_for_the_exporter(
        server: StreamServer, sig: signal.Signals) -> None:
    # The exporter answers at open and for its first readings, then holds every answer back: a reading
    # hangs while the run's 12 requests (about 0.5 s) finish, and the run's end would wait for it.
    with ExpositionServer(lambda n: ANSWER, hang=lambda n: n >= 3) as exporter:
        proc = _bench(server, exporter.url, "--num-requests", "12", "--concurrency", "1")
        _until(lambda: exporter.hung.is_set() and len([r for r in server.requests if r.number >= 0]) >= 12,
               proc)
        time.sleep(0.5)  # the last answer (8 tokens, 5 ms apart) is received: the window is over
        proc.send_signal(sig)
        out, err = _end(proc)
        abandoned = exporter.gone.wait(5.0)
    assert proc.returncode == 130, err
    doc = json.loads(out)
    assert doc["status"] == "incomplete" and doc["summary"]["num_ok"] == 12
    assert doc["summary"]["interrupted"]["signal"] == sig.name
    assert doc["summary"]["interrupted"]["finished_requests"] == 12
    assert f"{sig.name}: run {doc['id']} saved as incomplete with 12 finished requests" in err
    assert abandoned  # the held reading was given up, not waited for
    (gpu,) = doc["telemetry_summary"]
    assert gpu["device"] == "nvidia:0@gpu-node-1" and gpu["samples"] >= 1  # what was read is kept
