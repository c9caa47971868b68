"""The monitor running for real: its HTTP endpoint on loopback, a loopback engine serving the real
recorded vLLM /metrics text, engine faults (garbage, HTTP 500, down, slow), the CLI, and Ctrl-C."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from monitor_helpers import RECORDED, FakeEngine, Series, http_get, one, parse_exposition, values, wait_for
from telemetry_fakes import h100, make_fake_pynvml

from gpuledger.cli.main import main
from gpuledger.monitor import Monitor, MonitorConfig
from gpuledger.telemetry import open_sources

VLLM_TEXT = (RECORDED / "vllm-0.32.0.metrics.txt").read_text(encoding="utf-8")
HOST = "testhost"


def advanced(text: str, *, prompt: float, output: float, requests: float, e2e_sum: float) -> str:
    """The same real vLLM exposition text with its counters moved on, as after more requests
    (format untouched: only the sample values of these series change)."""
    subs = {
        r'^(vllm:prompt_tokens_total\{[^}]*\}) .*$': prompt,
        r'^(vllm:generation_tokens_total\{[^}]*\}) .*$': output,
        r'^(vllm:request_success_total\{[^}]*finished_reason="length"[^}]*\}) .*$': requests,
        r'^(vllm:e2e_request_latency_seconds_count\{[^}]*\}) .*$': requests,
        r'^(vllm:e2e_request_latency_seconds_sum\{[^}]*\}) .*$': e2e_sum,
    }
    for pattern, value in subs.items():
        text, n = re.subn(pattern, lambda m, v=value: f"{m.group(1)} {v!r}", text, flags=re.M)
        assert n == 1, pattern
    return text


def serve(mon: Monitor) -> Iterator[str]:
    server = mon.start_server()
    thread = threading.Thread(target=mon.run, daemon=True)
    thread.start()
    try:
        yield server.url
    finally:
        mon.stop()
        thread.join(timeout=30)
        assert not thread.is_alive(), "monitor did not stop"
        mon.close()


def fetch(url: str) -> Series:
    status, text = http_get(url)
    assert status == 200
    return parse_exposition(text)


@pytest.fixture
def gpu_monitor(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                fake_engine: FakeEngine) -> Iterator[tuple[Monitor, str]]:
    """Two fake H100s (fake pynvml on the real clock) and the loopback engine, served for real."""
    monkeypatch.setitem(sys.modules, "pynvml", make_fake_pynvml(
        [h100(0, power_w=312.0), h100(1, power_w=118.0)], time.monotonic))
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    config = MonitorConfig(port=0, interval_s=0.2, engine_url=fake_engine.url, engine_window_s=60.0,
                           engine_timeout_s=0.5, hostname=HOST)
    mon = Monitor(config, sources=open_sources(tmp_path, use_cli=False), log=lambda line: None)
    yield from ((mon, url) for url in serve(mon))


def test_live_cost_per_million_tokens_from_a_vllm_endpoint(
        gpu_monitor: tuple[Monitor, str], fake_engine: FakeEngine) -> None:
    mon, url = gpu_monitor
    fake_engine.body = VLLM_TEXT
    assert wait_for(lambda: mon.state.engine is not None and mon.state.engine.scrapes >= 1)
    fake_engine.body = advanced(VLLM_TEXT, prompt=143.0, output=572.0, requests=13.0, e2e_sum=10.95)

    def moved() -> bool:
        stats = mon.state.engine.window.stats() if mon.state.engine else None
        return stats is not None and stats.output_tokens == 500.0

    assert wait_for(moved)
    s = fetch(url)
    eng = {"engine": "vllm", "hostname": HOST}
    assert one(s, "gpuledger_source_up", source="engine") == 1.0
    assert one(s, "gpuledger_engine_info", engine="vllm", models="tiny-llama", url=fake_engine.url) == 1.0
    span = one(s, "gpuledger_engine_window_seconds", **eng)
    rate = one(s, "gpuledger_cost_rate_usd_per_hour")
    per_m_out = one(s, "gpuledger_cost_per_million_tokens_usd", basis="output", **eng)
    per_m_all = one(s, "gpuledger_cost_per_million_tokens_usd", basis="total", **eng)
    # the window's cost is the hourly rate over its span (constant power), spread over its tokens
    assert per_m_out == pytest.approx(rate * span / 3600 / 500 * 1e6, rel=0.05)
    assert per_m_all == pytest.approx(rate * span / 3600 / 600 * 1e6, rel=0.05)
    alloc = one(s, "gpuledger_gpu_seconds_per_request", basis="allocated", **eng)
    assert alloc == pytest.approx(2 * span / 10, rel=0.01)  # 2 GPUs x span / 10 requests
    busy = one(s, "gpuledger_gpu_seconds_per_request", basis="busy", **eng)
    # 87 % busy; readings and scrapes are not aligned, so the busy time in the window is within a
    # reading interval of 0.87 x the allocated time
    assert 0.5 * alloc < busy < 1.2 * alloc
    assert one(s, "gpuledger_engine_e2e_latency_mean_seconds", **eng) == pytest.approx(
        (10.95 - 0.9510617256164551) / 10)
    assert one(s, "gpuledger_engine_output_tokens_per_second", **eng) == pytest.approx(500 / span)


def test_llamacpp_endpoint_gives_cost_per_token_and_says_why_there_is_no_per_request_figure(
        gpu_monitor: tuple[Monitor, str], fake_engine: FakeEngine, fixtures_dir: Path) -> None:
    mon, url = gpu_monitor
    text = (fixtures_dir / "servers/llamacpp/ik-llama-cpp-pr695-metrics.txt").read_text()
    fake_engine.body = text
    assert wait_for(lambda: mon.state.engine is not None and mon.state.engine.scrapes >= 1)
    fake_engine.body = text.replace("llamacpp:tokens_predicted_total 3469",
                                    "llamacpp:tokens_predicted_total 3969")  # 500 more tokens
    assert wait_for(lambda: bool(values(fetch(url), "gpuledger_cost_per_million_tokens_usd", basis="output")))
    s = fetch(url)
    assert one(s, "gpuledger_engine_info", engine="llamacpp") == 1.0
    assert one(s, "gpuledger_engine_output_tokens_per_second", engine="llamacpp") > 0
    assert values(s, "gpuledger_gpu_seconds_per_request") == []
    assert values(s, "gpuledger_engine_requests_per_second") == []
    engine = mon.state.status(time.monotonic()).engine
    assert engine is not None and engine.window is not None
    assert "no finished-request counter" in engine.window.reasons["device_seconds_per_request"]


def test_engine_garbage_or_errors_mark_only_the_engine_down(
        gpu_monitor: tuple[Monitor, str], fake_engine: FakeEngine) -> None:
    mon, url = gpu_monitor
    fake_engine.body = "<html><body><h1>502 Bad Gateway</h1></body></html>"
    assert wait_for(lambda: mon.state.engine is not None and mon.state.engine.failures >= 1)
    s = fetch(url)
    assert one(s, "gpuledger_source_up", source="engine") == 0.0
    assert one(s, "gpuledger_gpu_power_watts", gpu="0") == 312.0  # the rest is served
    assert values(s, "gpuledger_cost_per_million_tokens_usd") == []
    assert mon.state.engine is not None and "not Prometheus exposition text" in str(mon.state.engine.reason)

    fake_engine.body, fake_engine.status = VLLM_TEXT, 500
    assert wait_for(lambda: "HTTP 500" in str(mon.state.engine.reason if mon.state.engine else ""))
    fake_engine.status = 200
    assert wait_for(lambda: one(fetch(url), "gpuledger_source_up", source="engine") == 1.0)


def test_a_slow_engine_times_out_and_is_marked_down(
        gpu_monitor: tuple[Monitor, str], fake_engine: FakeEngine) -> None:
    mon, url = gpu_monitor
    fake_engine.body, fake_engine.delay_s = VLLM_TEXT, 3.0
    assert wait_for(lambda: "no answer within 0.5 s" in str(mon.state.engine and mon.state.engine.reason))
    assert one(fetch(url), "gpuledger_source_up", source="engine") == 0.0


def test_an_engine_that_is_not_running_is_down_and_nothing_else_is_affected(
        no_gpu_stack: None, tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    config = MonitorConfig(port=0, interval_s=0.2, engine_url=f"http://127.0.0.1:{closed}", hostname=HOST)
    logs: list[str] = []
    mon = Monitor(config, sources=open_sources(tmp_path, use_cli=False), log=logs.append)
    for url in serve(mon):
        assert wait_for(lambda: any("unavailable" in line for line in logs))
        s = fetch(url)
        assert one(s, "gpuledger_source_up", source="engine") == 0.0
        assert one(s, "gpuledger_source_up", source="psutil") == 1.0
        assert one(s, "gpuledger_memory_total_bytes", device="ram") > 0
    assert any(f"127.0.0.1:{closed}/metrics unavailable: GET" in line for line in logs)


# --------------------------------------------------------------------------- CLI


def test_cli_serves_for_a_duration_and_prints_a_json_summary(
        no_gpu_stack: None, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["monitor", "--listen", "127.0.0.1:0", "--interval", "200ms", "--duration", "1s",
                 "--profile", "cpu-cloud", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)  # stdout holds the JSON and nothing else
    assert doc["listen"].startswith("http://127.0.0.1:")
    assert doc["cost"]["profile"] == "cpu-cloud" and doc["cost"]["currency"] == "USD"
    assert doc["cost"]["usd_total"] > 0
    cpu = next(d for d in doc["devices"] if d["device"] == "cpu")
    assert cpu["accounted"] and cpu["up"]
    assert {"name": "nvml", "up": False, "available_at_start": False} .items() <= next(
        s for s in doc["sources"] if s["name"] == "nvml").items()
    assert "serving http://127.0.0.1:" in err and "stopped" in err


@pytest.mark.parametrize(("argv", "code", "message"), [
    (["--listen", "0.0.0.0:9835"], 2, "not a loopback address"),
    (["--interval", "fast"], 2, "--interval"),
    (["--alert-util", "20"], 2, "--alert-util"),
    (["--engine-metrics", "localhost:8000"], 2, "--engine-metrics"),
    (["--profile", "no-such-profile"], 3, "no cost profile"),
])
def test_cli_refuses_bad_flags_with_one_line_and_the_documented_code(
        no_gpu_stack: None, capsys: pytest.CaptureFixture[str], argv: list[str], code: int,
        message: str) -> None:
    assert main(["monitor", "--duration", "1s", *argv]) == code
    out, err = capsys.readouterr()
    assert message in err and "Traceback" not in err
    assert out == ""


def test_cli_port_in_use_is_a_resource_error(no_gpu_stack: None, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert main(["monitor", "--listen", f"127.0.0.1:{port}", "--duration", "1s"]) == 8
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_or_sigterm_stops_the_cli_cleanly(tmp_path: Path, sig: signal.Signals) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PATH": str(tmp_path)}  # no vendor CLIs
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuledger.cli.main", "monitor", "--listen", f"127.0.0.1:{port}",
         "--interval", "200ms", "--profile", "cpu-cloud"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        def serving() -> bool:
            try:
                return http_get(f"http://127.0.0.1:{port}/metrics", timeout=2)[0] == 200
            except OSError:
                return False

        assert wait_for(serving, timeout=90, step=0.5), "monitor did not start"
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "stopped" in err and "Traceback" not in err
    assert "cost accrued:" in out
