"""The typed run spec (``RunInfo.config``): what the command line builds is what the store keeps and gives
back, what an export carries, and what ``bench --like`` repeats; runs stored before it was typed load as
they were stored."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import typer.main

from gpuledger.bench.flags import FLAG_FIELDS, flags_document
from gpuledger.bench.like import repeat
from gpuledger.cli.app import app
from gpuledger.engines import engine_kind
from gpuledger.errors import InvalidInputError, UsageError
from gpuledger.kinds.text.options import server_spec, torch_spec
from gpuledger.kinds.text.spec import ServerSpec, TorchSpec
from gpuledger.records import BenchSpec, RunInfo, SpecError, dump_spec, load_spec
from gpuledger.records.spec import checked
from gpuledger.store import Store, open_store

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "store-v1.sqlite"
GOLDEN_TORCH_RUN = "3jg7pezq"


def command_line_defaults() -> dict[str, Any]:
    """``gpuledger bench``'s parameter values when no flag is given."""
    bench = typer.main.get_command(app).commands["bench"]  # type: ignore[attr-defined]
    return {p.name: p.default for p in bench.params}


def stored(store: Store, spec: BenchSpec) -> RunInfo:
    run_id = store.create_run(RunInfo(id="", engine=spec.engine or "", config=spec))
    return store.get_run(run_id)


def workload_paths(spec: BenchSpec) -> dict[str, Any]:
    """The spec's value at every field a workload flag sets (what ``--like`` repeats)."""
    doc = spec.model_dump(mode="json", by_alias=True)
    out = {}
    for paths in FLAG_FIELDS[type(spec)].values():
        for path in paths:
            value: Any = doc
            for part in path.split("."):
                value = value.get(part) if isinstance(value, dict) else None
            out[path] = value
    return out


@pytest.fixture
def store(tmp_path: Path) -> Any:
    st = open_store(f"sqlite:///{tmp_path / 'spec.sqlite'}")
    yield st
    st.close()


SERVER = server_spec(
    "openai", base_url="http://10.1.2.3:8000", endpoint="chat", dataset="random", input_len=24, output_len=9,
    range_ratio=0.25, sweep=(1, 2, 8), num_requests=16, warmup=2, seed=7, slo={"ttft_ms": 500.0},
    label="machine A", request_timeout_s=30.0,
)
TORCH = torch_spec("dummy:smollm2-135m", batch_size=4, input_tokens=32, output_tokens=16, num_requests=6,
                   seed=5, slo={"tpot_ms": 40.0}, label="cpu box")


@pytest.mark.parametrize("spec", [SERVER, TORCH], ids=["server", "torch"])
def test_a_spec_reads_back_from_the_store_and_an_export_as_it_was_written(
    store: Store, tmp_path: Path, spec: BenchSpec
) -> None:
    run = stored(store, spec)
    assert type(run.config) is type(spec) and run.config == spec
    assert dump_spec(run.config) == dump_spec(spec)
    assert "$schema" not in dump_spec(run.config) and dump_spec(spec, stored=True)["$schema"] == 2
    other = open_store(f"sqlite:///{tmp_path / 'other.sqlite'}")
    try:
        again = other.get_run(other.import_run(store.export_run(run.id)))
    finally:
        other.close()
    assert again.config == spec


def test_a_server_run_repeated_with_like_and_no_flags_is_the_same_workload(store: Store) -> None:
    run = stored(store, SERVER)
    kind = engine_kind("openai")
    spec = repeat(run, flags_document(kind, command_line_defaults()), kind, set())
    assert isinstance(spec, ServerSpec)
    assert workload_paths(spec) == workload_paths(SERVER)
    assert spec.stages() == SERVER.stages() and spec.requests_per_stage() == 16
    assert spec.warmup_requests() == 2 and spec.slo_limits() == {"ttft_ms": 500.0}
    assert spec.like is not None and (spec.like.run_id, spec.like.overridden) == (run.id, [])
    # the server and the label are what differs between the two runs: not copied
    assert spec.label == "" and spec.base_url == "http://127.0.0.1:8000"


def test_flags_given_with_like_replace_their_fields_and_are_listed(store: Store) -> None:
    run = stored(store, SERVER)
    kind = engine_kind("openai")
    values = {**command_line_defaults(), "concurrency": 3, "output_len": 4, "seed": 7}
    spec = repeat(run, flags_document(kind, values), kind, {"concurrency", "output_len", "seed"})
    assert isinstance(spec, ServerSpec) and spec.dataset is not None
    assert spec.fixed_concurrency() == 3 and spec.dataset.output_len == 4 and spec.dataset.input_len == 24
    assert spec.like is not None and spec.like.overridden == ["concurrency", "output_len"]  # seed: the same


def test_a_torch_run_repeated_with_like_keeps_its_model_batch_lengths_and_slos(store: Store) -> None:
    run = stored(store, TORCH)
    kind = engine_kind("torch")
    values = {**command_line_defaults(), "engine": "torch", "device": "cpu"}
    spec = repeat(run, flags_document(kind, values), kind, {"device"})
    assert isinstance(spec, TorchSpec)
    assert workload_paths(spec) == workload_paths(TORCH)
    assert spec.model_spec == "dummy:smollm2-135m" and spec.device == "cpu"  # the device is this machine's
    assert spec.slo_limits() == {"tpot_ms": 40.0} and spec.requests_per_stage() == 8  # whole batches


def test_a_torch_run_stored_before_the_spec_was_typed_loads_unchanged_and_repeats(tmp_path: Path) -> None:
    shutil.copy(GOLDEN, tmp_path / "old.sqlite")
    old = open_store(f"sqlite:///{tmp_path / 'old.sqlite'}")
    try:
        run = old.get_run(GOLDEN_TORCH_RUN)
        raw = old.export_run(GOLDEN_TORCH_RUN)["run"]["config"]
    finally:
        old.close()
    spec = run.config
    assert isinstance(spec, TorchSpec) and dump_spec(spec) == raw  # the stored form is untouched
    assert "input_tokens" not in raw and spec.token_lengths() == (16, 8)  # read from the run's workload
    kind = engine_kind("torch")
    again = repeat(run, flags_document(kind, {**command_line_defaults(), "engine": "torch"}), kind, set())
    assert isinstance(again, TorchSpec)
    assert (again.model_spec, again.batch_size, again.token_lengths(), again.requests_planned) == (
        "dummy:smollm2-135m", 2, (16, 8), 4
    )


def test_a_kind_the_engine_name_does_not_say_is_written_and_read_back() -> None:
    spec = torch_spec("dummy:smollm2-135m").model_copy(update={"engine": "my-torch"})
    doc = dump_spec(spec)
    assert doc["kind"] == "torch"
    assert type(load_spec(doc, "my-torch")) is TorchSpec
    assert "kind" not in dump_spec(TORCH) and "kind" not in dump_spec(SERVER)


def test_a_stored_spec_that_cannot_be_read_says_what_is_wrong() -> None:
    with pytest.raises(SpecError, match="config schema 3 is not one this gpuledger reads"):
        load_spec({"$schema": 3, "engine": "openai"})
    with pytest.raises(SpecError, match="concurrency: Extra inputs are not permitted"):
        load_spec({"engine": "openai", "concurrency": 4})
    with pytest.raises(SpecError, match="'images' is not one this gpuledger reads"):
        load_spec({"kind": "images", "engine": "x"})


def test_a_run_that_does_not_record_its_load_cannot_be_repeated() -> None:
    run = RunInfo(id="abc", engine="openai", config={"engine": "openai", "dataset": {"name": "builtin"}})
    kind = engine_kind("openai")
    with pytest.raises(InvalidInputError, match="does not record its config.load"):
        repeat(run, flags_document(kind, command_line_defaults()), kind, set())


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"engine": "openai", "duration_s": float("inf")}, "--duration must be a positive number of seconds"),
        ({"engine": "openai", "num_requests_per_stage": 4, "duration_s": 2.0}, "give --num-requests or"),
        ({"engine": "openai", "warmup": -1}, "--warmup must be 0 or more, got -1"),
        ({"engine": "openai", "slo": {"latency_ms": 4.0}}, "--slo: 'latency_ms' is not one of"),
        ({"engine": "torch", "batch_size": 0}, "--batch/--concurrency must be at least 1 (got 0)"),
    ],
)
def test_validation_is_the_command_lines_one_line(fields: dict[str, Any], message: str) -> None:
    cls = TorchSpec if fields["engine"] == "torch" else ServerSpec
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")) as err:
        checked(cls, fields)
    assert "\n" not in err.value.message
