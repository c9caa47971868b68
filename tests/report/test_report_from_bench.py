"""End to end: `gpuledger bench` measures a real loopback streaming server, `gpuledger report` reports it.

The server is the bench area's programmable one (tests/bench/stream_server.py, 127.0.0.1 only) with a
first-token delay and an inter-token gap, so every latency is real and non-zero.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest

from gpuledger.cli.main import main

SERVER_FILE = Path(__file__).resolve().parents[1] / "bench" / "stream_server.py"


def _server_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("report_stream_server", SERVER_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture()
def server() -> Iterator[Any]:
    if not SERVER_FILE.exists():
        pytest.fail(f"{SERVER_FILE} is missing (the bench area's loopback server)")
    mod = _server_module()
    with mod.StreamServer(mod.Scenario(ttft_s=0.02, itl_s=0.002, tokens=12)) as srv:
        yield srv


def _bench(url: str, label: str, sweep: str, capsys: pytest.CaptureFixture[str]) -> str:
    code = main(
        [
            "bench",
            "--engine",
            "openai",
            "--base-url",
            url,
            "--model",
            "test-model",
            "--sweep",
            sweep,
            "--num-requests",
            "6",
            "--label",
            label,
            "--no-telemetry",
            "--json",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    run_id: str = orjson.loads(out)["id"]
    return run_id


def test_a_benched_sweep_and_a_comparison_report_from_the_store(
    server: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _bench(server.url, "first", "1,2", capsys)
    b = _bench(server.url, "second", "2", capsys)
    html, md = tmp_path / "r.html", tmp_path / "r.md"
    assert main(["report", a, b, "--html", str(html), "--md", str(md), "--json"]) == 0
    doc = orjson.loads(capsys.readouterr().out)
    sections = {s["key"]: s for s in doc["sections"]}
    latency = next(t for t in sections["latency"]["tables"] if t["key"] == "latency")
    ttft_rows = [r for r in latency["rows"] if r[1] == "TTFT"]
    assert [r[0] for r in ttft_rows] == ["first", "second"]
    assert all(float(r[3]) >= 20.0 for r in ttft_rows)  # p50 TTFT at least the server's 20 ms delay
    throughput = next(t for t in sections["throughput"]["tables"] if t["key"] == "throughput")
    assert [(r[0], r[1], r[2]) for r in throughput["rows"]] == [
        ("first", "c=1", "1"),
        ("first", "c=2", "2"),
        ("second", "c=2", "2"),
    ]
    assert {f["key"] for f in sections["latency"]["figures"]} == {"cdf_ttft_ms", "cdf_itl_ms", "cdf_e2e_ms"}
    # benched with --no-telemetry: the report says so instead of drawing nothing
    assert any("--no-telemetry" in m for m in sections["telemetry"]["not_measured"])
    # no GPU and no power here: the cost section gives the cost model's reason per run
    assert sections["cost"]["not_measured"]
    text = md.read_text()
    assert "| first | TTFT |" in text and "| second | TTFT |" in text
    assert html.stat().st_size > 4_000_000
