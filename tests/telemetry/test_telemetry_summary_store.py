"""A run's telemetry summary is one typed ``DeviceWindow`` per device, stored as its producer made it.

The sampler's windows, the run writer's per-stage figures of a sweep and ``telemetry import``'s devices of
a node's log go through the store and through an export unchanged, field for field (the fields each
producer set, and no others); every run of the golden store, written before the model, reads and dumps as
it was stored; a stored document the model cannot read makes its run unreadable with the reason (wrong
types, huge or negative figures, keys nobody writes), never a crash; an export holding one is refused
before anything is written.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from stream_server import Scenario, StreamServer
from telemetry_fakes import ManualClock
from test_telemetry_import import START, WINDOW_S, nvidia_smi_log, sine

from gpuledger.cli.main import main
from gpuledger.errors import InvalidInputError, StoreError
from gpuledger.records import DeviceWindow, RunInfo, StageWindow, dump_window
from gpuledger.store import Store, open_store
from gpuledger.telemetry.cpu import PsutilSource
from gpuledger.telemetry.nvml import NvmlSource
from gpuledger.telemetry.sampler import BackgroundSampler

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "store-v1.sqlite"
# What a window of today's sampler sets: every field but a sweep's stages (the run writer's).
SAMPLER_FIELDS = set(DeviceWindow.model_fields) - {"stages"}


@pytest.fixture
def store() -> Iterator[Store]:
    s = open_store(None)
    yield s
    s.close()


def _stored(store: Store, windows: list[DeviceWindow]) -> str:
    run_id = store.create_run(RunInfo(id="", engine="openai", model="served-model"))
    store.update_run(run_id, started_at=START, duration_s=WINDOW_S, status="complete",
                     telemetry_summary=windows)
    return run_id


def _dumps(windows: list[DeviceWindow]) -> list[dict[str, Any]]:
    return [dump_window(w) for w in windows]


def _through_an_export(store: Store, run_id: str, tmp_path: Path) -> list[DeviceWindow]:
    """The run exported as JSON text and imported into another store: its telemetry summary there."""
    doc = json.loads(json.dumps(store.export_run(run_id)))
    assert doc["run"]["telemetry_summary"] == _dumps(store.get_run(run_id).telemetry_summary)
    with open_store(f"sqlite:///{tmp_path / 'other.sqlite'}") as other:
        return other.get_run(other.import_run(doc)).telemetry_summary


def _sampled(use_nvml: Callable[[str], object], clock: ManualClock) -> list[DeviceWindow]:
    """Two seconds of a two-GPU machine (fake NVML at its import boundary) and this machine's CPU (psutil),
    the run assigned GPU 1."""
    use_nvml("healthy multi-GPU")
    sampler = BackgroundSampler([NvmlSource(), PsutilSource(Path("/"))], interval_s=0.1, t0=0.0,
                                env={"CUDA_VISIBLE_DEVICES": "1"})
    for i in range(21):
        clock.t = i * 0.1
        sampler.poll(clock.t)
    return sampler.summaries(window_end=clock.t)


# ------------------------------------------------------------------ every producer, through the store


def test_the_samplers_windows_read_back_and_export_as_they_were_made(
        use_nvml: Callable[[str], object], clock: ManualClock, store: Store, tmp_path: Path) -> None:
    windows = _sampled(use_nvml, clock)
    assert [w.device for w in windows] == ["nvidia:0", "nvidia:1", "cpu"]
    assert all(set(dump_window(w)) == SAMPLER_FIELDS for w in windows)  # None where not measured, not absent
    run_id = _stored(store, windows)

    got = store.get_run(run_id).telemetry_summary
    assert got == windows and _dumps(got) == _dumps(windows)
    gpu0, gpu1, cpu = got
    assert (gpu0.assigned, gpu1.assigned, cpu.assigned) == (False, True, None)
    assert gpu1.energy_method == "counter" and gpu1.valid is True and gpu1.reasons == []
    assert cpu.vendor == "cpu" and cpu.mean_power_w is None and "power_w" in cpu.unavailable
    assert _dumps(_through_an_export(store, run_id, tmp_path)) == _dumps(windows)


def test_a_sweeps_windows_hold_each_stages_figures_through_the_store_and_an_export(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    server = StreamServer(Scenario(identity="vllm", itl_s=0.01)).start()
    try:
        code = main(["bench", "--no-progress", "--json", "--telemetry", "--base-url", server.url,
                     "--sweep", "1,2", "--duration", "1", "--output-len", "4", "--warmup", "0"])
    finally:
        server.stop()
    out = capsys.readouterr()
    assert code == 0, out.err
    doc = json.loads(out.out)
    with open_store(None) as store:
        run = store.get_run(doc["id"])
        (cpu,) = [w for w in run.telemetry_summary if w.device == "cpu"]
        assert set(cpu.stages or {}) == {"c=1", "c=2"}
        assert all(set(dump_window(w)) >= SAMPLER_FIELDS for w in run.telemetry_summary)
        for stage in (cpu.stages or {}).values():
            assert isinstance(stage, StageWindow)
            assert set(stage.model_dump()) == set(StageWindow.model_fields)  # the writer sets each
            assert stage.window_s is not None and 0 < stage.window_s < (cpu.window_s or 0)
        assert doc["telemetry_summary"] == _dumps(run.telemetry_summary)  # bench --json: as stored
        assert _dumps(_through_an_export(store, run.id, tmp_path)) == _dumps(run.telemetry_summary)


def test_an_imported_logs_devices_are_stored_as_imported_and_the_bench_machines_gpus_marked(
        use_nvml: Callable[[str], object], clock: ManualClock, store: Store, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    sampled = _sampled(use_nvml, clock)
    run_id = _stored(store, sampled)
    log = nvidia_smi_log(tmp_path / "node1.csv", {0: sine, 1: sine})
    code = main(["telemetry", "import", run_id, str(log), "--gpus", "1", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    imported = json.loads(out.out)["devices"]

    got = store.get_run(run_id).telemetry_summary
    assert _dumps(got[3:]) == imported  # the log's devices, as telemetry import printed them
    assert [(w.device, w.assigned) for w in got[3:]] == [("nvidia:0@node1", True), ("nvidia:1@node1", False)]
    assert got[4].assigned_by == "not among the run's --gpus 1"
    for before, after in zip(sampled[:2], got[:2], strict=True):  # the bench machine's GPUs: not the run's
        assert after.assigned is False and "telemetry import node1.csv" in (after.assigned_by or "")
        assert after.with_assignment(before.assigned, before.assigned_by) == before  # nothing else changed
    assert got[2] == sampled[2]  # the CPU is not a GPU of the server: as it was
    assert _dumps(_through_an_export(store, run_id, tmp_path)) == _dumps(got)


# ------------------------------------------------------------------ runs stored before the model


def test_every_golden_run_reads_and_dumps_its_telemetry_summary_as_it_was_stored(tmp_path: Path) -> None:
    raw = sqlite3.connect(GOLDEN)
    try:
        stored = {rid: json.loads(doc) for rid, doc in raw.execute("SELECT id, telemetry_summary FROM runs")}
    finally:
        raw.close()
    shutil.copy(GOLDEN, tmp_path / "golden.sqlite")
    with open_store(f"sqlite:///{tmp_path / 'golden.sqlite'}") as store:
        runs = store.list_runs()
    assert not runs.unreadable and {r.id for r in runs} == set(stored)
    for run in runs:
        # as text, so an int stays an int (a memory total) and no key is added: not even an empty `reasons`
        assert json.dumps(_dumps(run.telemetry_summary), sort_keys=True) == json.dumps(stored[run.id],
                                                                                     sort_keys=True)
    windows = [w for r in runs for w in r.telemetry_summary]
    assert {w.vendor for w in windows} == {"nvidia", "amd", "cpu"}
    assert all(w.reasons == [] and w.assigned is None for w in windows)  # before the codes and the record


def test_a_document_made_by_hand_in_the_older_spellings_is_upgraded_on_import(
        store: Store, tmp_path: Path) -> None:
    doc = {"format": "gpuledger-run", "version": 1, "run": {
        "id": "handmade", "status": "complete", "telemetry_summary": [
            {"key": "nvidia:0", "name": "NVIDIA H100 80GB HBM3", "mean_power_w": 300,
             "sources": {"power_w": "nvml", "energy_j": "nvml"}},
            {"device": "cpu", "mean_util_ratio": 0.5},
        ]}}
    got = store.get_run(store.import_run(doc)).telemetry_summary
    assert _dumps(got) == [
        {"device": "nvidia:0", "vendor": "nvidia", "name": "NVIDIA H100 80GB HBM3", "mean_power_w": 300,
         "sources": ["nvml"]},
        {"device": "cpu", "vendor": "cpu", "mean_util_ratio": 0.5},
    ]


# ------------------------------------------------------------------ documents that cannot be read


HOSTILE: list[tuple[str, Any, str]] = [
    ("a count as text", {"samples": "many"}, "telemetry_summary[0].samples: Input should be a valid integer"),
    ("a bool for a figure", {"energy_j": True}, "telemetry_summary[0].energy_j: is bool, not a number"),
    ("a huge figure", {"energy_j": 1e300}, "telemetry_summary[0].energy_j: is larger than 1e+18"),
    ("a huge integer", {"peak_memory_bytes": 10**30},
     "telemetry_summary[0].peak_memory_bytes: is larger than"),
    ("a negative figure", {"mean_power_w": -5.0}, "telemetry_summary[0].mean_power_w: is negative"),
    ("a key nobody writes", {"bogus": 1}, "telemetry_summary[0].bogus: Extra inputs are not permitted"),
    ("a vendor the telemetry does not read", {"vendor": "intel"},
     "telemetry_summary[0].vendor: Input should be 'nvidia', 'amd' or 'cpu'"),
    ("a stage with a string for power", {"stages": {"c=1": {"mean_power_w": "300 W"}}},
     "telemetry_summary[0].stages.c=1.mean_power_w: is str, not a number"),
    ("an index past 32 bits", {"index": 2**40}, "telemetry_summary[0].index: Input should be less than"),
    ("a number for the device", {"device": 5}, "telemetry_summary[0].device: Input should be a valid string"),
]


def _window_doc(**change: Any) -> dict[str, Any]:
    return {"device": "nvidia:0", "vendor": "nvidia", "name": "NVIDIA H200", "energy_j": 10.0, **change}


def _write_raw(store: Store, run_id: str, text: str) -> None:
    engine = sa.create_engine(store._url.render_as_string(hide_password=False))
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE runs SET telemetry_summary = :t WHERE id = :id"),
                     {"t": text, "id": run_id})
    engine.dispose()


@pytest.mark.parametrize(("what", "change", "reason"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_a_stored_document_the_model_cannot_read_makes_its_run_unreadable_with_the_reason(
        what: str, change: dict[str, Any], reason: str, store: Store,
        capsys: pytest.CaptureFixture[str]) -> None:
    good = _stored(store, [DeviceWindow(device="cpu", vendor="cpu", name="CPU")])
    bad = _stored(store, [])
    _write_raw(store, bad, json.dumps([_window_doc(**change)]))

    found = store.list_runs()
    assert [r.id for r in found] == [good]  # the others still list
    assert [u.id for u in found.unreadable] == [bad] and reason in found.unreadable[0].reason, what
    with pytest.raises(StoreError, match="unreadable") as raised:
        store.get_run(bad)
    assert reason in raised.value.message
    for argv in (("show", bad), ("show", bad, "--json"), ("export", bad)):
        code = main(list(argv))
        out, err = capsys.readouterr()
        assert (code, out) == (5, ""), (argv, err)
        first = err.splitlines()[0]  # one line, then the hint
        assert first.startswith(f"error: run {bad!r} in ") and reason in first and "Traceback" not in err


COLUMNS = {"an object": '{"device": "cpu"}', "a number for a window": "[42]",
           "NaN": '[{"device": "cpu", "energy_j": NaN}]',
           "past a double": '[{"device": "cpu", "energy_j": 1e400}]'}


@pytest.mark.parametrize("text", list(COLUMNS.values()), ids=list(COLUMNS))
def test_a_column_that_is_not_a_list_of_windows_is_unreadable_not_a_crash(text: str, store: Store) -> None:
    run_id = _stored(store, [])
    _write_raw(store, run_id, text)
    (unreadable,) = store.list_runs().unreadable
    assert unreadable.id == run_id and "telemetry_summary" in unreadable.reason


@pytest.mark.parametrize(("what", "change", "reason"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_an_export_holding_such_a_document_is_refused_before_anything_is_written(
        what: str, change: dict[str, Any], reason: str, store: Store) -> None:
    doc = {"format": "gpuledger-run", "version": 1,
           "run": {"id": "hostile1", "status": "complete", "telemetry_summary": [_window_doc(**change)]}}
    with pytest.raises(InvalidInputError) as raised:
        store.import_run(doc)
    message = raised.value.message
    assert message.startswith("malformed gpuledger run export: run.") and reason in message
    assert store.list_runs() == []


def test_a_run_written_with_a_window_the_model_refuses_is_not_written(store: Store) -> None:
    run_id = store.create_run(RunInfo(id="", engine="openai"))
    with pytest.raises(InvalidInputError, match=r"telemetry_summary\[0\]\.energy_j: is negative"):
        store.update_run(run_id, telemetry_summary=[_window_doc(energy_j=-1.0)])
    assert store.get_run(run_id).telemetry_summary == []
