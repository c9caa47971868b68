"""``gpuledger serve`` as a user starts it: a process that says where it listens (``--json``: one document on
stdout), logs a line per request, and stops cleanly on SIGTERM (exit 0); a port already taken is one line and
exit 8, a bad profile exit 3, never a traceback."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from serve_support import H200, golden_copy, request

SERVE = [sys.executable, "-m", "gpuledger.cli.main", "serve"]


def _env(db: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "GPULEDGER_SERVE_TOKEN"}
    return env | {"GPULEDGER_DB": db}


def test_serve_says_where_it_listens_logs_each_request_and_stops_on_sigterm(tmp_path: Path) -> None:
    db = golden_copy(tmp_path / "golden.sqlite")
    proc = subprocess.Popen([*SERVE, "--port", "0", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=_env(db))
    try:
        assert proc.stdout is not None
        lines = []
        while not lines or lines[-1].rstrip() != "}":
            line = proc.stdout.readline()
            assert line, "serve ended before it listened"
            lines.append(line)
        started = json.loads("".join(lines))
        assert started["host"] == "127.0.0.1" and started["read_only"] is True and started["token"] is False
        assert request(f"{started['url']}/runs/{H200}").status == 200
        assert request(f"{started['url']}/api/runs?label=secret-label").status == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert f"serving {started['url']}" in err and "stopped" in err
    assert f"GET /runs/{H200} 200" in err
    assert "secret-label" not in err  # the log names the path, never the query
    assert "Traceback" not in err and out == ""


def test_a_port_already_taken_is_one_line_and_exit_8(tmp_path: Path) -> None:
    db = golden_copy(tmp_path / "golden.sqlite")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([*SERVE, "--port", str(port)], capture_output=True, text=True, timeout=120,
                              env=_env(db))
    assert done.returncode == 8
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr and "Traceback" not in done.stderr


def test_an_unknown_profile_is_refused_before_serving(tmp_path: Path) -> None:
    db = golden_copy(tmp_path / "golden.sqlite")
    done = subprocess.run([*SERVE, "--port", "0", "--profile", "no-such-preset"], capture_output=True,
                          text=True, timeout=120, env=_env(db))
    assert done.returncode == 3, done.stderr
    assert "no-such-preset" in done.stderr and "serving" not in done.stderr and "Traceback" not in done.stderr
