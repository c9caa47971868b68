"""Energy per token is energy in the window ÷ tokens in the window — the same window (docs/design.md, "Metric
definitions"). The run writer integrated power from its start to its finish, a window 0.15–0.6 % longer than
the one the token counts use (first send → last finish); each device's figures are now over exactly the
counts' window, interpolated at its edges (issue #33, item 8).

The server's node is a replayed dcgm-exporter whose GPU draws a rising power (200 W + 60 W/s since it
started), so the hand integral over the counts' window is known and differs from any longer window's."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC

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


def test_a_runs_energy_is_over_the_window_its_token_counts_use(
    node: ReplayedDcgmExporter, server: StreamServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["bench", "--no-progress", "--json", "--no-telemetry", "--telemetry-from",
                 f"{node.url}?gpu=0&interval=0.2", "--base-url", server.url, "--concurrency", "2",
                 "--duration", "1.5", "--output-len", "8", "--warmup", "0"])
    out = capsys.readouterr()
    assert code == 0, out.err
    run_id = json.loads(out.out)["id"]
    with open_store(None) as store:
        run = store.get_run(run_id)
        records = store.get_requests(run_id)
    assert isinstance(run.summary, TextGenerationSummary) and run.started_at and run.duration_s
    first_send = min(r.t_send for r in records)
    window = (first_send, first_send + run.summary.window_s)
    assert run.summary.window_s < run.duration_s  # the writer's own span is longer than the counts'
    gpu = run.telemetry_summary[0]
    assert gpu.window_s == pytest.approx(run.summary.window_s, rel=1e-9)
    w0 = run.started_at.replace(tzinfo=run.started_at.tzinfo or UTC).timestamp()
    assert gpu.energy_j == pytest.approx(node.energy_between(0, w0 + window[0], w0 + window[1]), rel=0.01)
