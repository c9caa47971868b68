"""The Store API (docs/contracts.md "Store"), on SQLite and on a real PostgreSQL."""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from store_factories import make_request, make_run, make_samples

from gpuledger.errors import InvalidInputError, NotFoundError, StoreError
from gpuledger.kinds.text.summary import TextGenerationSummary
from gpuledger.records import DoctorRunRecord, Latency, RequestRecord, RunInfo, TelemetrySample, dump_summary
from gpuledger.store import Store, open_store
from gpuledger.store.liveness import STALE_AFTER_S
from gpuledger.store.models import runs


def _raw_update(db_url: str, run_id: str, **values: object) -> None:
    """Change a run's row behind the store's back (as another machine's writer would have)."""
    engine = sa.create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(sa.update(runs).where(runs.c.id == run_id).values(**values))
    engine.dispose()


# ---- runs -----------------------------------------------------------------------------------------


def test_a_new_run_gets_a_short_random_lowercase_id_and_starts_running(store: Store) -> None:
    ids = {store.create_run(make_run()) for _ in range(20)}
    assert len(ids) == 20
    assert all(re.fullmatch(r"[a-z2-7]{8}", i) for i in ids)
    assert {store.get_run(i).status for i in ids} == {"running"}


def test_every_run_field_reads_back_as_written(store: Store) -> None:
    t0 = datetime(2025, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
    info = RunInfo(
        id="", label="h200-vs-mi300", created_at=t0, started_at=t0 + timedelta(seconds=2), status="complete",
        engine="vllm", model="meta-llama/Llama-3.1-8B", base_url="http://127.0.0.1:8000/v1", unit="token",
        workload={"dataset": "sharegpt", "requests": 200, "nested": {"a": [1, 2.5, None]}},
        config={"load": {"kind": "concurrency", "stages": [{"stage": "c=32", "concurrency": 32}]}},
        environment={"hash": "sha256:abc", "driver": "550.54"},
        server={"version": "0.6.0"},
        summary=TextGenerationSummary(output_tokens_per_s=1234.5, ttft_ms=Latency(p50=41.0)),
        telemetry_summary=[{"device": "nvidia:0", "vendor": "nvidia", "energy_j": 1.5e4,
                            "energy_method": "counter"}],
        client={"gpuledger": "0.1.0"}, duration_s=61.25, num_requests=0,
        finished_at=t0 + timedelta(minutes=1),
    )
    run_id = store.create_run(info)
    got = store.get_run(run_id)
    assert got == RunInfo(**{**{f: getattr(info, f) for f in RunInfo.__dataclass_fields__}, "id": run_id})
    assert dump_summary(got.summary) == {"output_tokens_per_s": 1234.5, "ttft_ms": {"p50": 41.0}}
    assert got.created_at is not None and got.created_at.tzinfo is not None
    assert store.env_hash(run_id) == "sha256:abc"


def test_a_naive_datetime_is_taken_as_local_time_and_read_back_in_utc(store: Store) -> None:
    naive = datetime(2025, 6, 1, 8, 30)
    run_id = store.create_run(make_run(created_at=naive))
    got = store.get_run(run_id).created_at
    assert got == naive.astimezone(UTC)
    assert got is not None and got.utcoffset() == timedelta(0)


def test_a_chosen_id_is_kept_and_a_second_run_with_it_is_refused(store: Store) -> None:
    assert store.create_run(make_run(id="h200-run1")) == "h200-run1"
    with pytest.raises(InvalidInputError, match="already exists"):
        store.create_run(make_run(id="h200-run1", label="other"))
    assert store.get_run("h200-run1").label == "nightly"


def test_an_invalid_chosen_id_is_refused(store: Store) -> None:
    with pytest.raises(InvalidInputError, match="invalid run id"):
        store.create_run(make_run(id="has space"))
    assert store.list_runs() == []


def test_update_run_sets_fields_and_refuses_id_unknown_fields_and_bad_values(store: Store) -> None:
    run_id = store.create_run(make_run())
    done = datetime(2025, 1, 2, tzinfo=UTC)
    store.update_run(run_id, status="complete", summary=TextGenerationSummary(output_tokens_per_s=99.0),
                     finished_at=done, duration_s=12.5, environment={"hash": "h2"})
    got = store.get_run(run_id)
    assert (got.status, dump_summary(got.summary), got.finished_at, got.duration_s) == (
        "complete", {"output_tokens_per_s": 99.0}, done, 12.5)
    assert store.env_hash(run_id) == "h2"
    for bad in ({"id": "x"}, {"colour": "red"}, {"status": "done"}, {"summary": [1]}, {"created_at": None}):
        with pytest.raises(InvalidInputError):
            store.update_run(run_id, **bad)
    assert store.get_run(run_id) == got


def test_update_of_an_unknown_run_is_not_found(store: Store) -> None:
    with pytest.raises(NotFoundError):
        store.update_run("nosuchrun", label="x")


def test_list_runs_is_newest_first_and_filters_by_label_and_since(store: Store) -> None:
    base = datetime(2025, 1, 1, tzinfo=UTC)
    a = store.create_run(make_run(label="a", created_at=base))
    b = store.create_run(make_run(label="b", created_at=base + timedelta(days=1)))
    c = store.create_run(make_run(label="a", created_at=base + timedelta(days=2)))
    assert [r.id for r in store.list_runs()] == [c, b, a]
    assert [r.id for r in store.list_runs(label="a")] == [c, a]
    assert [r.id for r in store.list_runs(since=base + timedelta(hours=12))] == [c, b]
    assert [r.id for r in store.list_runs(label="a", since=base + timedelta(days=1))] == [c]
    assert [r.id for r in store.list_runs(limit=1)] == [c]


def test_get_run_accepts_an_unambiguous_prefix_of_four_or_more_characters(store: Store) -> None:
    store.create_run(make_run(id="abcd2345"))
    store.create_run(make_run(id="abce2345"))
    assert store.get_run("abcd").id == "abcd2345"
    assert store.get_run("ABCD23").id == "abcd2345"
    assert store.get_requests("abce") == []


def test_an_ambiguous_prefix_is_not_found_and_names_the_candidates(store: Store) -> None:
    store.create_run(make_run(id="abcd2345"))
    store.create_run(make_run(id="abcd7777"))
    with pytest.raises(NotFoundError, match=r"ambiguous: abcd2345, abcd7777"):
        store.get_run("abcd")


def test_unknown_ids_and_too_short_prefixes_are_not_found(store: Store) -> None:
    store.create_run(make_run(id="abcd2345"))
    with pytest.raises(NotFoundError, match="no run 'zzzz'"):
        store.get_run("zzzz")
    with pytest.raises(NotFoundError, match="at least 4 characters"):
        store.get_run("abc")
    with pytest.raises(NotFoundError):
        store.get_run("   ")


def test_prefix_wildcards_are_matched_literally(store: Store) -> None:
    store.create_run(make_run(id="ab_d2345"))
    store.create_run(make_run(id="abxd2345"))
    assert store.get_run("ab_d").id == "ab_d2345"
    with pytest.raises(NotFoundError):
        store.get_run("ab%d")


def test_delete_run_removes_its_requests_telemetry_and_cost_evaluations(store: Store) -> None:
    keep = store.create_run(make_run())
    gone = store.create_run(make_run(status="complete"))  # a run still being written is not deleted
    for run_id in (keep, gone):
        store.add_requests(run_id, [make_request(i) for i in range(3)])
        store.add_telemetry(run_id, make_samples(5))
        store.save_cost_evaluation(run_id, "h200-rental", {"usd_per_hour": 3.5}, {"usd_per_1m_tokens": 0.4})
    assert store.delete_run(gone[:6]) == gone
    with pytest.raises(NotFoundError):
        store.get_run(gone)
    assert len(store.get_requests(keep)) == 3
    assert len(store.get_telemetry(keep)) == 5
    assert len(store.list_cost_evaluations(keep)) == 1
    assert [r.id for r in store.list_runs()] == [keep]


# ---- requests and telemetry ---------------------------------------------------------------------


def test_requests_read_back_exactly_as_written_bit_for_bit(store: Store) -> None:
    run_id = store.create_run(make_run())
    odd = RequestRecord(
        index=7, t_send=0.1 + 0.2, t_first=1 / 3, t_end=123456.78901234567,
        chunk_times=[1 / 3, 2 / 3, 1e-9, 5e6], chunk_tokens=[1, 3, 0, 2], input_tokens=0, output_tokens=6,
        token_source="server_tokenizer", requested_output_tokens=8, error=None, stage="rate=4",
        server_timings={"queue_ms": 1.5, "k": [1, "x"]}, output_chars=17,
    )
    failed = RequestRecord(
        index=8, t_send=2.0, t_end=2.5, error="HTTP 500: engine died — ünïcode", stage="rate=4"
    )
    empty = RequestRecord(index=9, t_send=3.0, t_first=None, t_end=3.1, chunk_times=[], chunk_tokens=[])
    store.add_requests(run_id, [odd, failed, empty])
    assert store.get_requests(run_id) == [odd, failed, empty]


def test_requests_come_back_in_index_order_and_are_counted(store: Store) -> None:
    run_id = store.create_run(make_run())
    store.add_requests(run_id, [make_request(i) for i in (5, 3)])
    store.add_requests(run_id, [make_request(i) for i in (4, 0, 1, 2)])
    assert [r.index for r in store.get_requests(run_id)] == [0, 1, 2, 3, 4, 5]
    assert store.get_run(run_id).num_requests == 6


def test_an_empty_batch_is_fine(store: Store) -> None:
    run_id = store.create_run(make_run())
    store.add_requests(run_id, [])
    store.add_telemetry(run_id, [])
    assert store.get_requests(run_id) == [] and store.get_telemetry(run_id) == []


def test_requests_for_an_unknown_run_are_refused_and_nothing_is_written(store: Store, db_url: str) -> None:
    with pytest.raises(NotFoundError):
        store.add_requests("nosuchrun", [make_request(0)])
    engine = sa.create_engine(db_url)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM requests")).scalar_one() == 0
    engine.dispose()


def test_a_malformed_request_refuses_the_whole_batch(store: Store) -> None:
    run_id = store.create_run(make_run())
    bad_source = make_request(1)
    bad_source.token_source = "guess"  # type: ignore[assignment]
    mismatched = make_request(2)
    mismatched.chunk_tokens = [1]
    for bad in (bad_source, mismatched):
        with pytest.raises(InvalidInputError):
            store.add_requests(run_id, [make_request(0), bad])
    assert store.get_requests(run_id) == []
    assert store.get_run(run_id).num_requests == 0


def test_telemetry_reads_back_in_time_order(store: Store) -> None:
    run_id = store.create_run(make_run())
    late = make_samples(3, device="nvidia:1")
    store.add_telemetry(run_id, [TelemetrySample(0.35, "cpu", "util_ratio", 0.5, "psutil"), *late])
    store.add_telemetry(run_id, make_samples(2))
    got = store.get_telemetry(run_id)
    assert [s.t for s in got] == sorted(s.t for s in got)
    assert sorted(got, key=lambda s: (s.device, s.t)) == sorted(
        [TelemetrySample(0.35, "cpu", "util_ratio", 0.5, "psutil"), *late, *make_samples(2)],
        key=lambda s: (s.device, s.t),
    )


def test_a_non_finite_telemetry_value_is_refused_and_nothing_is_written(store: Store) -> None:
    run_id = store.create_run(make_run())
    with pytest.raises(InvalidInputError, match="non-finite"):
        store.add_telemetry(
            run_id, [*make_samples(2), TelemetrySample(0.3, "nvidia:0", "power_w", float("nan"), "nvml")]
        )
    assert store.get_telemetry(run_id) == []


# ---- writer liveness ----------------------------------------------------------------------------


def test_a_running_run_whose_writer_is_this_live_process_reads_running(store: Store) -> None:
    run_id = store.create_run(make_run())
    assert store.get_run(run_id).status == "running"
    assert [r.status for r in store.list_runs()] == ["running"]


def test_a_running_run_whose_local_writer_is_gone_reads_incomplete(store: Store, db_url: str) -> None:
    run_id = store.create_run(make_run())
    _raw_update(db_url, run_id, writer_pid=2**30)  # above any pid_max: certainly not alive
    assert store.get_run(run_id).status == "incomplete"


def test_a_reused_pid_does_not_keep_a_dead_run_running(store: Store, db_url: str) -> None:
    run_id = store.create_run(make_run())
    # Same pid as ours, but the writer process started an hour earlier: a different process.
    _raw_update(db_url, run_id, writer_pid=os.getpid(), writer_started=datetime.now().timestamp() - 3600)
    assert store.get_run(run_id).status == "incomplete"


def test_a_writer_on_another_host_is_alive_while_its_heartbeat_is_fresh(store: Store, db_url: str) -> None:
    run_id = store.create_run(make_run())
    _raw_update(db_url, run_id, writer_host="gpu-node-17")
    assert store.get_run(run_id).status == "running"
    stale = datetime.now(UTC) - timedelta(seconds=STALE_AFTER_S + 60)
    _raw_update(db_url, run_id, updated_at=stale)
    assert store.get_run(run_id).status == "incomplete"
    store.heartbeat(run_id)
    assert store.get_run(run_id).status == "running"


def test_mark_incomplete_ends_a_running_run_but_leaves_a_finished_one(store: Store) -> None:
    running = store.create_run(make_run())
    store.add_requests(running, [make_request(0)])
    done = store.create_run(make_run(status="complete"))
    store.mark_incomplete(running)
    store.mark_incomplete(done)
    got = store.get_run(running)
    assert got.status == "incomplete" and got.finished_at is not None
    assert len(store.get_requests(running)) == 1
    assert store.get_run(done).status == "complete"
    with pytest.raises(NotFoundError):
        store.mark_incomplete("nosuchrun")


def test_setting_a_run_running_again_makes_this_process_its_writer(store: Store, db_url: str) -> None:
    run_id = store.create_run(make_run())
    _raw_update(db_url, run_id, writer_pid=2**30)
    assert store.get_run(run_id).status == "incomplete"
    store.update_run(run_id, status="running")
    assert store.get_run(run_id).status == "running"


# ---- doctor runs, cost evaluations, lifecycle -----------------------------------------------------


def test_doctor_runs_are_kept_per_machine_oldest_first(store: Store) -> None:
    t = datetime(2025, 2, 1, tzinfo=UTC)
    findings = [{"id": "nvidia.nouveau", "layer": "driver", "severity": "error", "title": "nouveau loaded"}]
    second = store.add_doctor_run(DoctorRunRecord("box-a", t + timedelta(hours=2), 0, 1, [], {"gpus": 1}))
    first = store.add_doctor_run(DoctorRunRecord("box-a", t, 1, 0, findings, {"gpus": 1}))
    other = store.add_doctor_run(DoctorRunRecord("box-b", t, 0, 0))
    assert len({first, second, other}) == 3
    got = store.list_doctor_runs("box-a")
    assert [d.id for d in got] == [first, second]
    assert got[0] == DoctorRunRecord("box-a", t, 1, 0, findings, {"gpus": 1}, id=first)
    assert len(store.list_doctor_runs()) == 3


def test_cost_evaluations_are_kept_with_their_run(store: Store) -> None:
    run_id = store.create_run(make_run())
    store.save_cost_evaluation(run_id, "h200", {"currency": "USD", "usd_per_hour": 3.5}, {"usd_per_1m": 0.41})
    store.save_cost_evaluation(run_id, "mi300x", {"currency": "USD"}, {"usd_per_1m": 0.37})
    got = store.list_cost_evaluations(run_id)
    assert [(c["profile_name"], c["result"]) for c in got] == [("h200", {"usd_per_1m": 0.41}),
                                                               ("mi300x", {"usd_per_1m": 0.37})]
    with pytest.raises(NotFoundError):
        store.save_cost_evaluation("nosuchrun", "h200", {}, {})


def test_a_closed_store_refuses_to_work(db_url: str) -> None:
    s = open_store(db_url)
    s.close()
    with pytest.raises(StoreError, match="closed"):
        s.list_runs()


def test_reopening_a_store_sees_what_was_written(db_url: str) -> None:
    with open_store(db_url) as first:
        run_id = first.create_run(make_run())
        first.add_requests(run_id, [make_request(0)])
    with open_store(db_url) as second:
        assert second.get_run(run_id).num_requests == 1
        assert second.backend == sa.make_url(db_url).get_backend_name()
        password = sa.make_url(db_url).password
        assert password is None or str(password) not in second.url


def test_requests_can_be_read_without_their_chunk_times_for_fast_latency_views(store: Store) -> None:
    run_id = store.create_run(make_run())
    store.add_requests(run_id, [
        RequestRecord(index=0, t_send=0.0, t_first=0.1, t_end=0.5, chunk_times=[0.1, 0.2, 0.5],
                      chunk_tokens=[1, 1, 2], output_tokens=4, token_source="server_usage"),
    ])
    full, light = store.get_requests(run_id)[0], store.get_requests(run_id, chunks=False)[0]
    assert full.chunk_times == [0.1, 0.2, 0.5] and full.chunk_tokens == [1, 1, 2]
    assert light.chunk_times == [] and light.chunk_tokens is None
    assert (light.t_send, light.t_first, light.t_end, light.output_tokens) == (0.0, 0.1, 0.5, 4)


def test_the_environment_is_typed_and_older_spellings_are_read(tmp_path: Path) -> None:
    """`RunInfo.environment` is the typed fingerprint (issue 14): the host's CPUs and name have one place
    each, an older document's `hostname` / top-level `logical_cpus` are read into them, and a key nobody
    reads is refused rather than kept silently."""
    from gpuledger.records.environment import EnvironmentRecordError, load_environment

    env = load_environment({"hostname": "gpu-box-a", "cpu_count": 8, "driver": "550.54"})
    assert env.machine == "gpu-box-a" and env.logical_cpus == 8 and env.driver == "550.54"
    assert env.to_dict() == {"machine": "gpu-box-a", "cpu": {"logical_cpus": 8}, "driver": "550.54"}
    with pytest.raises(EnvironmentRecordError, match="colour"):
        load_environment({"colour": "red"})
    with open_store(f"sqlite:///{tmp_path / 's.sqlite'}") as store:
        run_id = store.create_run(RunInfo(id="", environment={"arch": "x86_64", "cpu": {"logical_cpus": 2}}))
        got = store.get_run(run_id)
    assert got.environment.arch == "x86_64" and got.environment.logical_cpus == 2
