"""The typed views of a run's open records (``bench.rundocs``): they read the keys they name from what the
engines and the run writer store, leave the other keys to the document, and read a value they cannot read
(an imported document of another shape) as absent instead of failing the command that renders it."""

from __future__ import annotations

from gpuledger.bench.rundocs import ClientView, ServerView, WorkloadView
from gpuledger.bench.server_state import ServerStateSampler, StateUnavailable, summarize_state
from gpuledger.bench.validity import schedule_summary
from gpuledger.engines.base import ServerInfo
from gpuledger.engines.server_metrics import StatePoint
from gpuledger.quantity import Quantity


def test_the_server_view_reads_what_an_engine_and_the_sampler_stored() -> None:
    sampler = ServerStateSampler("vllm", "http://127.0.0.1:1/metrics", None)
    sampler.edges = [StatePoint(0.0, 0, 0, 0.0, 1.0, 0.0, 0.0), StatePoint(2.0, 0, 0, 0.0, 4.0, 0.3, 6.0)]
    state = summarize_state(sampler)
    peak = Quantity(2.5e9, "B", "torch.cuda.max_memory_allocated")
    doc = {
        **ServerInfo(kind="vllm", version="0.32.0", warnings=["slow tokenizer"]).to_dict(),
        "state": state.model_dump(mode="json"),
    }
    doc["details"] = {"peak_memory": peak.to_dict(), "sha": "abc"}
    view = ServerView.of(doc)
    assert view.who() == "vllm 0.32.0" and view.warnings == ["slow tokenizer"]
    assert view.state == state and view.details.peak_memory == peak
    assert ServerView.of({}).who() == "unknown" and ServerView.of({}).state is None


def test_a_value_the_view_cannot_read_is_absent_and_a_state_of_another_shape_says_why() -> None:
    view = ServerView.of({"kind": "vllm", "version": 32, "warnings": ["ok", {"not": "text"}],
                          "state": {"source": "x", "scrapes": "many"}})
    assert view.who() == "vllm" and view.warnings == []  # the version and warnings are left out
    assert isinstance(view.state, StateUnavailable)
    assert view.state.reason.startswith("the stored server state is not one this gpuledger reads (1 problem")
    assert ServerView.of({"state": {"reason": "GET /metrics answered 404"}}).state == StateUnavailable(
        reason="GET /metrics answered 404"
    )


def test_the_client_view_reads_the_cpu_share_and_the_send_schedule() -> None:
    schedule = schedule_summary([0.001, 0.002, 0.004])
    client = ClientView.of({"cpu_user_s": 0.5, "cpu_system_s": 0.1, "wall_s": 2.0, "cpu_util_ratio": 0.3,
                            "warnings": ["w"], "send_schedule": schedule, "pid": 7})
    assert client.cpu_share_percent() == 30.0 and client.warnings == ["w"]
    assert client.send_schedule is not None and client.send_schedule.requests == 3
    assert client.send_schedule.lag_ms.max == 4.0
    assert ClientView.of({"cpu_percent": 12.0, "cpu_util_ratio": 0.5}).cpu_share_percent() == 12.0
    assert ClientView.of({}).cpu_share_percent() is None
    assert WorkloadView.of({"trace": "not a record"}).trace is None
