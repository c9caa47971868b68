"""A bench stopped before any request finished stores nothing measured, and says so: the run is
`cancelled` (issue 15: Ctrl-C in that phase left an empty `incomplete` run)."""

from __future__ import annotations

import json
import signal
import time

import pytest
from stream_server import Scenario, StreamServer
from test_bench_prepare import generations, start_bench, stop, wait_for

from gpuledger.store import open_store


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_bench_stopped_before_its_first_answer_is_stored_as_cancelled(sig: signal.Signals) -> None:
    # the server takes 30 s to its first token: the signal arrives while the first requests are in flight
    with StreamServer(Scenario(identity="vllm", ttft_s=30.0)) as srv:
        proc = start_bench(srv.url, "--input-len", "8", "--output-len", "4", "--num-requests", "4",
                           "--concurrency", "2", "--warmup", "0")
        try:
            wait_for(lambda: bool(generations(srv)), 60, proc)
            time.sleep(0.3)
            proc.send_signal(sig)
            out, err = proc.communicate(timeout=60)
        finally:
            stop(proc)
    assert proc.returncode == 130, err
    assert err.count("error:") == 1 and "no request had finished" in err and "cancelled" in err
    run_id = json.loads(out)["id"]
    with open_store(None) as store:
        run = store.get_run(run_id)
        assert store.get_requests(run_id) == []
    assert run.status == "cancelled"
    assert run.summary is not None and run.summary.interrupted is not None
    assert run.summary.interrupted.finished_requests == 0
