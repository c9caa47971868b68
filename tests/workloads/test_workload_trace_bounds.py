"""A trace's times are bounded like everything else from outside: an arrival 10^15 ms after the first is a
corrupt row (refused, naming it), and a replay longer than the longest stage (7 days at the run's
--trace-speed, when no --duration ends it) is refused before any run exists, with the speed that fits."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from stream_server import Scenario, StreamServer
from workload_helpers import bench

from gpuledger.bench.bounds import MAX_DURATION_S
from gpuledger.errors import InvalidInputError
from gpuledger.store import open_store
from gpuledger.workload.traces import MAX_REPLAY_S, read_trace

DAY_MS = 86_400_000


def _trace(tmp_path: Path, times_ms: list[int]) -> Path:
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps({"timestamp": t, "input_length": 8, "output_length": 2}) + "\n"
                            for t in times_ms))
    return path


def test_an_arrival_far_beyond_any_trace_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError) as err:
        read_trace(_trace(tmp_path, [0, 5, 10**15]))
    assert ("an arrival 11,574,074 days after the first (its row 3 in time order): a trace spans at most "
            "366 days") in err.value.message
    assert read_trace(_trace(tmp_path, [0, 300 * DAY_MS])).times[-1] == 300 * 86_400.0  # months: a trace


def test_a_replay_longer_than_the_longest_stage_is_refused_before_any_run(
    serve: Callable[..., StreamServer], tmp_path: Path
) -> None:
    assert MAX_REPLAY_S == MAX_DURATION_S
    srv = serve(Scenario())
    trace = _trace(tmp_path, [0, 10 * DAY_MS])  # ten days of arrivals
    run = bench("--base-url", srv.url, "--trace", str(trace), "--warmup", "0")
    assert run.code == 2 and not run.doc
    assert ("the trace spans 10.0 days: replayed at --trace-speed 1 it would take 10.0 days, more than the "
            "longest stage (7 days)") in run.output and "--trace-speed 1.43 or more" in run.output
    assert [r for r in srv.requests if r.number >= 0] == []
    with open_store(None) as store:
        assert store.list_runs() == []


def test_the_same_trace_replays_at_a_speed_that_fits_or_for_a_duration(
    serve: Callable[..., StreamServer], tmp_path: Path
) -> None:
    srv = serve(Scenario())
    trace = _trace(tmp_path, [0, 1000, 10 * DAY_MS])
    fast = bench("--base-url", srv.url, "--trace", str(trace), "--warmup", "0", "--trace-speed", "1000000")
    assert fast.code == 0, fast.output
    assert fast.summary["num_requests"] == 3
    cut = bench("--base-url", srv.url, "--trace", str(trace), "--warmup", "0", "--duration", "2")
    assert cut.code == 0, cut.output
    assert cut.summary["num_requests"] == 2  # the third arrival is ten days out: after the stage's end
