"""A sweep is priced at one stage, so its power and J per token must be that stage's, not the whole sweep's
(issue 15: J/token next to the priced stage was the whole sweep's, 2.1x off at c=8). The writer records each
device's power and energy over each stage's own window; `cost` of the stage uses them.

The server's node is a replayed dcgm-exporter whose GPU draws a rising power (200 W + 60 W/s since it
started), so each stage of the sweep has its own mean power and the hand integral over a stage's window is
known."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC
from pathlib import Path

import pytest
from exporter_replay import ReplayedDcgmExporter
from stream_server import Scenario, StreamServer

from gpuledger.cli.main import main
from gpuledger.kinds.text.summary import TextGenerationSummary
from gpuledger.store import open_store


@pytest.fixture
def node() -> Iterator[ReplayedDcgmExporter]:
    start: list[float] = []

    def rising(t: float) -> float:
        if not start:
            start.append(t)
        return 200.0 + 60.0 * max(0.0, t - start[0])

    with ReplayedDcgmExporter({0: rising}) as ex:
        rising(ex.started)
        yield ex


@pytest.fixture
def server() -> Iterator[StreamServer]:
    srv = StreamServer(Scenario(identity="vllm", itl_s=0.01)).start()
    yield srv
    srv.stop()


def test_each_stage_of_a_sweep_has_its_own_energy_and_the_priced_stage_uses_it(
    node: ReplayedDcgmExporter, server: StreamServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = main(["bench", "--no-progress", "--json", "--no-telemetry", "--telemetry-from",
                 f"{node.url}?gpu=0&interval=0.2", "--base-url", server.url, "--sweep", "1,4",
                 "--duration", "2", "--output-len", "8", "--warmup", "0"])
    out = capsys.readouterr()
    assert code == 0, out.err
    run_id = json.loads(out.out)["id"]
    with open_store(None) as store:
        run = store.get_run(run_id)
    assert isinstance(run.summary, TextGenerationSummary) and run.summary.stages and run.started_at
    w0 = run.started_at.replace(tzinfo=run.started_at.tzinfo or UTC).timestamp()
    gpu = run.telemetry_summary[0]
    stages = gpu.stages or {}
    assert set(stages) == {"c=1", "c=4"}
    means = {}
    for stage in run.summary.stages:
        window = stage.stage_window()
        assert window is not None
        part = stages[stage.stage]
        hand = node.energy_between(0, w0 + window[0], w0 + window[1])
        assert part.energy_j == pytest.approx(hand, rel=0.01), stage.stage
        assert part.window_s == pytest.approx(window[1] - window[0], rel=1e-6)
        assert part.mean_power_w is not None
        means[stage.stage] = part.mean_power_w
    assert means["c=4"] > means["c=1"] + 50  # the later stage drew more: not the sweep's mean for both

    profile = tmp_path / "own.yaml"
    profile.write_text("name: t4-own\ngpu_price: 2500\nelectricity_per_kwh: 0.12\n")
    code = main(["cost", run_id, "--profile", str(profile), "--stage", "c=4", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    cost = json.loads(out.out)
    c4 = next(s for s in run.summary.stages if s.stage == "c=4")
    assert cost["power"]["serving_w"] == pytest.approx(means["c=4"])
    c4_joules = stages["c=4"].energy_j
    assert c4_joules is not None and cost["energy"]["joules"] == pytest.approx(c4_joules)
    assert cost["energy"]["joules_per_output_token"] == pytest.approx(c4_joules / c4.output_tokens_total)
    assert any("power and energy are stage c=4's own" in a for a in cost["assumptions"])
