"""A replayed NVIDIA dcgm-exporter on 127.0.0.1 (dcgm-exporter needs a GPU, so it cannot run here).

It serves the real capture tests/fixtures/captures/exporters/datadog-dcgm-exporter-tesla-t4.txt (a T4's
default counters, byte for byte in its shape: HELP/TYPE lines, label set, value formats), repeated once per
GPU of the scenario with that GPU's index, UUID and device name, and with the values that matter set from
the scenario on the wall clock: ``DCGM_FI_DEV_POWER_USAGE`` (W) = the GPU's power,
``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` (mJ) = the captured counter + the integral of that power since the
server started, ``DCGM_FI_DEV_GPU_UTIL`` (%) and ``DCGM_FI_DEV_FB_USED`` (MiB). The hand integral of a GPU
over any wall-clock span is ``energy_between(gpu, t0, t1)``.

    with ReplayedDcgmExporter({0: 250.0, 1: 400.0, 2: 300.0}) as exporter:
        exporter.url   # http://127.0.0.1:PORT/metrics
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

CAPTURE = (Path(__file__).resolve().parents[1] / "fixtures" / "captures" / "exporters"
           / "datadog-dcgm-exporter-tesla-t4.txt")
_GPU0_UUID = "GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e"
_VALUE = re.compile(r"^(?P<name>DCGM_FI_DEV_[A-Z0-9_]+)\{(?P<labels>[^}]*)\} (?P<value>\S+)$")

PowerFn = Callable[[float], float]  # wall-clock time -> W


def _first_host_block(text: str) -> list[str]:
    """The capture's lines up to the second host's families (the first host is one T4: one complete
    dcgm-exporter answer)."""
    lines = text.splitlines()
    end = next(i for i, line in enumerate(lines) if line.startswith("# HELP DCGM_FI_DEV_SLOWDOWN_TEMP"))
    return lines[:end]


class ReplayedDcgmExporter:
    """See the module docstring. ``power``: GPU index -> constant W or a function of the wall clock;
    ``util``: GPU index -> % (default 90); ``stop_after``: GPU index -> wall-clock time after which that
    GPU's series are no longer served (a GPU that falls off the exporter)."""

    def __init__(self, power: Mapping[int, float | PowerFn], *, util: Mapping[int, float] | None = None,
                 fb_used_mib: float = 30000.0, hostname: str = "gpu-node-1",
                 stop_after: Mapping[int, float] | None = None) -> None:
        self.power: dict[int, PowerFn] = {
            gpu: (p if callable(p) else (lambda _t, w=float(p): w)) for gpu, p in power.items()
        }
        self.util = dict(util or {})
        self.fb_used_mib = fb_used_mib
        self.hostname = hostname
        self.stop_after = dict(stop_after or {})
        self.template = _first_host_block(CAPTURE.read_text())
        self.started = time.time()
        self.requests = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def uuid(self, gpu: int) -> str:
        return f"{_GPU0_UUID[:-2]}{gpu:02d}"

    def energy_between(self, gpu: int, t0: float, t1: float, steps: int = 20000) -> float:
        """The hand integral of the GPU's power over ``[t0, t1]`` (wall clock), J (midpoint rule)."""
        fn = self.power[gpu]
        dt = (t1 - t0) / steps
        return sum(fn(t0 + (i + 0.5) * dt) for i in range(steps)) * dt

    def body(self, now: float) -> str:
        out: list[str] = []
        gpus = [g for g in sorted(self.power) if now <= self.stop_after.get(g, float("inf"))]
        for line in self.template:
            m = _VALUE.match(line)
            if m is None:
                out.append(line)
                continue
            for gpu in gpus:
                labels = (m["labels"].replace('gpu="0"', f'gpu="{gpu}"').replace(_GPU0_UUID, self.uuid(gpu))
                          .replace('device="nvidia0"', f'device="nvidia{gpu}"')
                          .replace('Hostname="424773df46e0"', f'Hostname="{self.hostname}"'))
                value = m["value"]
                if m["name"] == "DCGM_FI_DEV_POWER_USAGE":
                    value = f"{self.power[gpu](now):.6f}"
                elif m["name"] == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION":
                    joules = self.energy_between(gpu, self.started, now, 2000) if now > self.started else 0
                    value = str(int(float(m["value"]) + joules * 1000.0))
                elif m["name"] == "DCGM_FI_DEV_GPU_UTIL":
                    value = str(int(self.util.get(gpu, 90.0)))
                elif m["name"] == "DCGM_FI_DEV_FB_USED":
                    value = str(int(self.fb_used_mib))
                out.append(f"{m['name']}{{{labels}}} {value}")
        return "\n".join(out) + "\n"

    def start(self) -> ReplayedDcgmExporter:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.requests += 1
                if not self.path.startswith("/metrics"):
                    self.send_error(404)
                    return
                data = owner.body(time.time()).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, format: str, *args: object) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> ReplayedDcgmExporter:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
