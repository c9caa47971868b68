"""A real Prometheus (Debian's ``prometheus``, started by tests/telemetry/prometheus_server.py) scrapes the
exporter on loopback, and its HTTP API returns gpuledger series. Skipped, loudly, without the binary; a
failure under CI=true."""

from __future__ import annotations

import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from monitor_helpers import wait_for
from prometheus_server import Prometheus, require_prometheus
from telemetry_fakes import h100, make_fake_pynvml

from gpuledger.monitor import Monitor, MonitorConfig
from gpuledger.telemetry import open_sources

pytestmark = pytest.mark.prometheus


@pytest.fixture
def served_monitor(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Monitor]:
    """The exporter over one fake H100 (fake pynvml, real clock) and this machine's real CPU/RAM."""
    monkeypatch.setitem(sys.modules, "pynvml", make_fake_pynvml([h100(0, power_w=312.0)], time.monotonic))
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    config = MonitorConfig(port=0, interval_s=0.5, hostname="prom-test")
    mon = Monitor(config, sources=open_sources(Path("/"), use_cli=False), log=lambda line: None)
    mon.poll_once()
    mon.start_server()
    thread = threading.Thread(target=mon.run, daemon=True)
    thread.start()
    yield mon
    mon.stop()
    thread.join(timeout=30)
    mon.close()


def test_a_real_prometheus_scrapes_the_exporter_and_serves_gpuledger_series(served_monitor: Monitor) -> None:
    require_prometheus()
    assert served_monitor.server is not None
    target = f"127.0.0.1:{served_monitor.server.port}"
    base = Path(tempfile.mkdtemp(prefix="gpuledger-prom-"))
    prom = Prometheus(target, base)
    try:
        def scraped() -> bool:
            if prom.proc.poll() is not None:
                return True  # exited: reported below
            try:
                return bool(prom.query('gpuledger_gpu_power_watts{gpu="0"}'))
            except OSError:
                return False  # not listening yet

        ok = wait_for(scraped, timeout=60, step=0.5)
        assert prom.proc.poll() is None, f"prometheus exited ({prom.proc.returncode}):\n{prom.tail()}"
        assert ok, f"no gpuledger series in Prometheus after 60 s:\n{prom.tail()}"

        power = prom.query('gpuledger_gpu_power_watts{gpu="0"}')
        assert len(power) == 1
        labels = power[0]["metric"]
        assert labels["model"] == "NVIDIA H100 80GB HBM3" and labels["vendor"] == "nvidia"
        assert labels["hostname"] == "prom-test" and labels["job"] == "gpuledger"
        assert float(power[0]["value"][1]) == 312.0
        up = prom.query('up{job="gpuledger"}')  # Prometheus parsed the whole exposition
        assert [float(r["value"][1]) for r in up] == [1.0]
        assert prom.query("gpuledger_cpu_utilization_ratio")
        assert wait_for(lambda: bool(prom.query("sum(gpuledger_cost_usd_total) > 0")), timeout=30, step=0.5)
    finally:
        prom.stop()
        shutil.rmtree(base, ignore_errors=True)
