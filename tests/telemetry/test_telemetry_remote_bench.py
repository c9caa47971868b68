"""``gpuledger bench --telemetry-from URL``: a server on 127.0.0.1 (tests/bench/stream_server.py) benched
while a replayed dcgm-exporter (its real capture, two of the node's GPUs at known power and a third, busy
with another job, left out by ``?gpu=0,1``) plays the server's node. The run stores each GPU's power and
energy, the hand integral within 0.5 %, records which GPUs it was assigned, and ``cost`` prices it with an
ownership profile that gives no ``power_w``."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest
from exporter_replay import ReplayedDcgmExporter
from stream_server import Scenario, StreamServer

from gpuledger.cli.main import main
from gpuledger.store import open_store

PERIOD_S = 3.0


def wavy(t: float) -> float:
    return 380.0 + 20.0 * math.sin(2 * math.pi * t / PERIOD_S)


@pytest.fixture
def node() -> Iterator[ReplayedDcgmExporter]:
    with ReplayedDcgmExporter({0: 250.0, 1: wavy, 2: 300.0}, util={0: 90.0, 1: 85.0, 2: 100.0}) as ex:
        yield ex


@pytest.fixture
def server() -> Iterator[StreamServer]:
    srv = StreamServer(Scenario(identity="vllm", itl_s=0.01)).start()
    yield srv
    srv.stop()


def bench(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any, str]:
    code = main(["bench", "--no-progress", "--json", *args])
    out = capsys.readouterr()
    return code, json.loads(out.out) if code == 0 else out.out, out.err


def test_a_bench_with_the_servers_exporter_stores_its_gpus_power_and_energy(
        node: ReplayedDcgmExporter, server: StreamServer, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    code, doc, err = bench(capsys, "--no-telemetry", "--telemetry-from", f"{node.url}?gpu=0,1&interval=0.2",
                           "--base-url", server.url, "--duration", "4", "--concurrency", "2",
                           "--output-len", "8", "--warmup", "0")
    assert code == 0, err
    store = open_store(None)
    try:
        run = store.get_run(doc["id"])
        first_send = min(r.t_send for r in store.get_requests(run.id))
    finally:
        store.close()
    assert run.started_at is not None and run.summary is not None
    # the window the run's counts are per: its first send to first send + window_s (bench/writer.py)
    window = run.summary.window_s
    w0 = run.started_at.replace(tzinfo=run.started_at.tzinfo or UTC).timestamp() + first_send
    w1 = w0 + window
    devices = {d.device: d for d in run.telemetry_summary}
    assert set(devices) == {"nvidia:0@gpu-node-1", "nvidia:1@gpu-node-1"}  # GPU 2 is another job's
    for gpu in (0, 1):
        d = devices[f"nvidia:{gpu}@gpu-node-1"]
        hand = node.energy_between(gpu, w0, w1)
        assert d.energy_j == pytest.approx(hand, rel=0.005), (gpu, d)
        assert d.mean_power_w == pytest.approx(hand / window, rel=0.005)
        assert d.valid is True and d.reasons == [] and d.energy_method == "counter"
        assert d.assigned is True and d.name == "Tesla T4"
        assert d.sources == [f"dcgm-exporter {node.url}?gpu=0,1&interval=0.2"]
    assert run.config.telemetry is not None and run.config.telemetry.enabled is False
    assert [s.name for s in run.config.telemetry.sources or []] == devices["nvidia:0@gpu-node-1"].sources

    code = main(["show", run.id, "--json"])
    energy = json.loads(capsys.readouterr().out)["energy"]
    assert code == 0 and energy["valid"] is True and energy["reasons"] == [] and energy["basis"] == "assigned"
    assert energy["joules"] == pytest.approx(sum(d.energy_j or 0.0 for d in devices.values()))

    profile = tmp_path / "t4-own.yaml"
    profile.write_text("name: t4-own\ngpu_price: 2500\nelectricity_per_kwh: 0.12\npue: 1.3\n"
                       "utilisation: 0.6\n")
    code = main(["cost", run.id, "--profile", str(profile), "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    cost = json.loads(out.out)
    power = cost["power"]
    assert power["estimate"] is False and power["power_source"].startswith("measured (dcgm-exporter http")
    per = {p["device"]: p["power_w"] for p in power["per_device"]}
    assert per == pytest.approx({k: d.mean_power_w for k, d in devices.items()})
    assert cost["energy"]["method"].startswith("measured energy in the window (counter)")
    assert cost["energy"]["joules"] == pytest.approx(energy["joules"])


def test_the_machine_running_the_bench_is_not_counted_as_the_server(
        node: ReplayedDcgmExporter, server: StreamServer, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc, err = bench(capsys, "--telemetry", "--telemetry-from", f"{node.url}?gpu=1&interval=0.25",
                           "--base-url", server.url, "--duration", "2", "--concurrency", "1",
                           "--output-len", "4", "--warmup", "0")
    assert code == 0, err
    devices = {d["device"]: d for d in doc["telemetry_summary"]}
    assert "cpu" in devices and devices["cpu"]["assigned"] is None  # the client's CPU, still sampled
    assert devices["nvidia:1@gpu-node-1"]["assigned"] is True
    code = main(["show", doc["id"], "--json"])
    energy = json.loads(capsys.readouterr().out)["energy"]
    assert [d["device"] for d in energy["devices"]] == ["nvidia:1@gpu-node-1"]


def test_an_unreachable_exporter_stops_the_bench_before_a_run_exists(
        server: StreamServer, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = bench(capsys, "--no-telemetry", "--telemetry-from", "http://me:pw@127.0.0.1:9/metrics",
                           "--base-url", server.url, "--num-requests", "2", "--output-len", "4")
    assert code == 8 and out == "" and "Traceback" not in err
    assert "GET http://me:***@127.0.0.1:9/metrics" in err and "pw@" not in err
    store = open_store(None)
    try:
        assert store.list_runs() == []
    finally:
        store.close()


def test_a_malformed_telemetry_url_is_a_usage_error(server: StreamServer,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = bench(capsys, "--telemetry-from", "http://node:9400/metrics?gpu=first",
                         "--base-url", server.url, "--num-requests", "1")
    assert code == 2 and "expected GPU indices such as gpu=0,1" in err
