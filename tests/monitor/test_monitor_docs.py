"""The shipped docs match the exporter: every metric family it serves is documented, and the sample
Prometheus rules and Grafana panel only use series it really serves (rules checked by promtool)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from monitor_helpers import RECORDED, TESTS
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from telemetry_fakes import ManualClock, h100, make_fake_pynvml

from gpuledger.monitor import Monitor, MonitorConfig, parse_engine_metrics
from gpuledger.telemetry import open_sources

DOCS = TESTS.parent / "docs"
RULES = DOCS / "monitor" / "prometheus-rules.yml"
PANEL = DOCS / "monitor" / "grafana-panel.json"
NAME = re.compile(r"\bgpuledger_[a-z0-9_]+")
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"  # looked up before fixtures empty PATH


@pytest.fixture
def everything_served(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> set[str]:
    """Sample names of a monitor with a GPU, a cost profile and an engine window all populated."""
    clock = ManualClock()
    monkeypatch.setitem(sys.modules, "pynvml", make_fake_pynvml([h100(0)], clock))
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    config = MonitorConfig(port=0, engine_url="http://127.0.0.1:9/metrics", hostname="h")
    text = (RECORDED / "vllm-0.32.0.metrics.txt").read_text()
    sources = open_sources(tmp_path, use_cli=False)
    with Monitor(config, sources=sources, clock=clock, log=lambda line: None) as mon:
        for t in (0.0, 1.0, 2.0):
            clock.t = t
            mon.poll_once()
        counters = parse_engine_metrics(text)
        mon.state.engine_scraped(1.0, counters)
        later = parse_engine_metrics(text.replace(
            'vllm:generation_tokens_total{engine="0",model_name="tiny-llama"} 72.0',
            'vllm:generation_tokens_total{engine="0",model_name="tiny-llama"} 172.0').replace(
            'vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny-llama"} 3.0',
            'vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny-llama"} 4.0'))
        mon.state.engine_scraped(2.0, later)
        exposition = generate_latest(mon.registry).decode()
    return {s.name for fam in text_string_to_metric_families(exposition) for s in fam.samples}


def test_every_served_metric_family_is_documented(everything_served: set[str]) -> None:
    doc = (DOCS / "monitor.md").read_text()
    documented = set(NAME.findall(doc))
    served = {n for n in everything_served if not n.startswith("gpuledger_exporter_process_")}
    assert "gpuledger_cost_per_million_tokens_usd" in served and "gpuledger_gpu_seconds_per_request" in served
    missing = sorted(n for n in served if n not in documented and n.removesuffix("_total") not in documented)
    assert missing == []


def test_the_sample_rules_and_panel_query_only_served_series(everything_served: set[str]) -> None:
    served = everything_served | {n.removesuffix("_total") for n in everything_served}
    rules = yaml.safe_load(RULES.read_text())
    exprs = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    panel = json.loads(PANEL.read_text())
    exprs += [t["expr"] for t in panel["targets"]]
    used = {n for e in exprs for n in NAME.findall(e)}
    assert used and used <= served, sorted(used - served)
    assert {"gpuledger_low_utilization_alert", "gpuledger_idle_cost_usd_total"} <= used


@pytest.mark.prometheus
def test_the_sample_rules_pass_promtool() -> None:
    if not Path(PROMTOOL).is_file():
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("promtool (Debian prometheus package) is required under CI=true")
        pytest.skip("promtool check SKIPPED: promtool not found (apt-get install prometheus)")
    done = subprocess.run([PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 7 rules found" in done.stdout
