"""A real Prometheus (Debian's ``prometheus``) on 127.0.0.1 for the tests: a 1 s scrape of one target,
its HTTP API queried with aiohttp-free urllib (the test's own reads). Skipped, loudly, without the binary;
a failure under CI=true (``.ci/run`` installs it)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

PROMETHEUS = os.environ.get("GPULEDGER_PROMETHEUS_BIN") or shutil.which("prometheus") or "/usr/bin/prometheus"


def require_prometheus() -> None:
    if Path(PROMETHEUS).is_file():
        return
    reason = f"{PROMETHEUS} not found"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"Prometheus integration test cannot run under CI=true: {reason}")
    pytest.skip(f"Prometheus integration test SKIPPED: {reason} (apt-get install prometheus)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for(check: Callable[[], bool], timeout: float, step: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(step)
    return check()


class Prometheus:
    """``prometheus`` on 127.0.0.1 scraping ``target`` every second as job ``job``; ``stop()`` ends it."""

    def __init__(self, target: str, base: Path, job: str = "gpuledger") -> None:
        self.port = free_port()
        self.base = base
        config = base / "prometheus.yml"
        config.write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            "scrape_configs:\n"
            f"  - job_name: {job}\n    static_configs: [{{targets: ['{target}']}}]\n"
        )
        self.log = base / "prometheus.log"
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(
                [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={base / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}"],
                stdout=log, stderr=subprocess.STDOUT)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def query(self, promql: str) -> list[dict[str, Any]]:
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/query?{urlencode({'query': promql})}",
                                        timeout=5) as resp:
                doc = json.loads(resp.read())
        except OSError:
            return []  # not listening yet
        assert doc["status"] == "success", doc
        result: list[dict[str, Any]] = doc["data"]["result"]
        return result

    def wait_for_series(self, promql: str, timeout: float = 60.0) -> None:
        ok = wait_for(lambda: self.proc.poll() is not None or bool(self.query(promql)), timeout, 0.5)
        assert self.proc.poll() is None, f"prometheus exited ({self.proc.returncode}):\n{self.tail()}"
        assert ok, f"no {promql} in Prometheus after {timeout:g} s:\n{self.tail()}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        shutil.rmtree(self.base, ignore_errors=True)

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-20:])
