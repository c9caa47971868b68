"""A task's bench options are one typed model (each kind's ``options`` facet), made once from the command
line: another task's option is refused with one line, every number has a bound, and the model makes the spec
the command line has always made (the golden store's runs were made by the flags before the model existed)."""

from __future__ import annotations

import json
import shutil
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main
from pydantic import BaseModel, ValidationError

from gpuledger.bench.options import TaskOptions, options_model, options_of
from gpuledger.bench.tasks import engine_for_task
from gpuledger.cli.app import app
from gpuledger.cli.bench_cmd import command_line
from gpuledger.cli.main import main
from gpuledger.engines import engine_kind
from gpuledger.errors import UsageError
from gpuledger.kinds.image.options import ImageOptions
from gpuledger.kinds.text.options import TextOptions
from gpuledger.kinds.train.options import TrainOptions
from gpuledger.records import kinds
from gpuledger.records.spec import checked
from gpuledger.store import Store, open_store

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
MODELS: dict[str, tuple[type[TaskOptions], str]] = {
    "text": (TextOptions, "openai"),
    "torch": (TextOptions, "torch"),
    "image": (ImageOptions, "diffusers"),
    "train": (TrainOptions, "torch-train"),
}


def parsed(*args: str) -> TaskOptions:
    """The options model `gpuledger bench ARGS` makes (the command's own parse, nothing run)."""
    bench = typer.main.get_command(app).commands["bench"]  # type: ignore[attr-defined]
    ctx = bench.make_context("bench", list(args))
    values, given = command_line(ctx)
    engine = engine_for_task(values["task"], values["engine"], "engine" in given)
    return options_of(engine_kind(engine), values, given)


def bench(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["bench", "--no-telemetry", "--no-progress", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_every_kind_with_options_names_its_model() -> None:
    assert {k.name: options_model(k) for k in kinds() if k.has("options")} == {
        "text": TextOptions, "image": ImageOptions, "train": TrainOptions,
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--seq-len", "64"], "--seq-len: for --task train (torch), not --engine openai"),
        (["--engine", "torch", "--model", "dummy:x", "--compile"],
         "--compile: for --task train (torch), not --engine torch"),
        (["--task", "image", "--turns", "all"],
         "--turns: for --task text (openai, ollama or torch), not --engine diffusers"),
        (["--task", "image", "--num-images", "2", "--grad-accum", "2"],
         "--grad-accum: for --task train (torch), not --engine diffusers"),
        (["--task", "image", "--range-ratio", "0.5"],
         "--range-ratio is for text generation, not --task image"),
        (["--task", "image", "--server-metrics"], "--server-metrics is for text generation servers"),
        (["--task", "train", "--model", "dummy:smollm2-135m", "--api-key-env", "KEY"],
         "--api-key-env is not for --task train: training runs in-process"),
        (["--task", "train", "--model", "dummy:smollm2-135m", "--no-server-metrics"],
         "--server-metrics is for text generation servers, not --task train"),
        (["--task", "image", "--set", "3.cfg=2"], "--workflow and --set are for --engine comfyui"),
        (["--task", "image", "--steps", "0"], "--steps must be between 1 and 10,000, got 0"),
        (["--task", "image", "--batch-size", "0"], "--batch-size must be between 1 and 1,024, got 0"),
    ],
)
def test_an_option_the_task_does_not_take_is_refused_with_one_line(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code, out, err = bench(capsys, *args)
    assert code == 2 and out == ""
    assert message in err, err
    assert err.count("\n") == 1 and err.startswith("error: ")
    with open_store(None) as store:
        assert store.list_runs() == []


def test_a_model_refuses_a_name_it_does_not_know_and_cannot_be_changed() -> None:
    with pytest.raises(UsageError, match="--colour is not an option of --task text"):
        checked(TextOptions, {"engine": "openai", "colour": "red"})
    options = parsed("--concurrency", "4")
    assert isinstance(options, TextOptions) and options.concurrency == 4
    with pytest.raises(ValidationError):
        options.concurrency = 5  # type: ignore[misc]


def test_the_textual_options_are_parsed_into_the_model() -> None:
    options = parsed("--sweep", "1,4,16", "--slo", "ttft_ms=500,tpot_ms=50", "--turns", "all",
                     "--dataset", "sharegpt", "--dataset-path", "x.json")
    assert isinstance(options, TextOptions)
    assert options.sweep == (1, 4, 16) and options.slo == {"ttft_ms": 500.0, "tpot_ms": 50.0}
    assert options.turns == "all"
    image = parsed("--task", "image", "--engine", "comfyui", "--set", '6.text="a cat"', "--set", "3.cfg=6.5")
    assert isinstance(image, ImageOptions)
    assert [(o.node, o.input, o.value) for o in image.set] == [("6", "text", "a cat"), ("3", "cfg", 6.5)]
    train = parsed("--task", "train", "--dtype", "bfloat16", "--optimizer", " SGD ")
    assert isinstance(train, TrainOptions) and (train.dtype, train.optimizer) == ("bf16", "sgd")


def _numbers(model: type[BaseModel]) -> Iterator[tuple[str, Callable[[Any], Any]]]:
    """(field, how a number is given to it) for every field of ``model`` that holds numbers: a number, a
    tuple of numbers (``--sweep``), a mapping to numbers (``--slo``)."""
    for name, field in model.model_fields.items():
        ann = field.annotation
        args = typing.get_args(ann) or (ann,)
        numeric = bool not in args and any(a in (int, float) for a in args)
        if typing.get_origin(ann) is tuple:
            if numeric:
                yield name, lambda v: (v,)
        elif typing.get_origin(ann) is dict:
            if numeric:
                yield name, lambda v: {"ttft_ms": v}
        elif numeric:
            yield name, lambda v: v


def _problem(model: type[TaskOptions], engine: str, name: str, value: Any) -> str:
    with pytest.raises(UsageError) as caught:
        checked(model, {"engine": engine, name: value})
    return caught.value.message


@pytest.mark.parametrize("case", list(MODELS))
def test_every_number_of_every_task_has_a_bound_named_by_its_option(case: str) -> None:
    model, engine = MODELS[case]
    numbers = list(_numbers(model))
    assert len(numbers) >= 8, numbers
    if case == "torch":  # the server-only numbers are refused for the in-process engine before their bound
        torch = ("concurrency", "input_len", "output_len", "num_requests", "warmup", "seed", "slo",
                 "telemetry_interval")
        numbers = [(n, g) for n, g in numbers if n in torch]
    for name, given in numbers:
        flag = "--" + name.replace("_", "-")
        ann = model.model_fields[name].annotation
        integer = int in (typing.get_args(ann) or (ann,)) and typing.get_origin(ann) is not dict
        for huge in (10**20, -(10**20)):
            value: Any = huge if integer else float(huge)
            problem = _problem(model, engine, name, given(value))
            assert flag in problem and "Input should" not in problem, (name, value, problem)


def test_the_in_process_engine_has_its_own_batch_bound() -> None:
    assert "--concurrency must be at most 4096" in _problem(TextOptions, "torch", "concurrency", 5000)
    server = parsed("--concurrency", "5000")  # a server takes 10,000 in flight
    assert isinstance(server, TextOptions) and server.concurrency == 5000


# The golden runs and the command lines that made them (tests/golden/make_golden.py); the server's URL
# differs.
GOLDEN_RUNS: dict[str, list[str]] = {
    "srv_c4": ["--label", "srv-c4", "--input-len", "32", "--output-len", "16", "--concurrency", "4",
               "--num-requests", "24", "--slo", "ttft_ms=200,tpot_ms=20"],
    "srv_sweep": ["--label", "srv-sweep", "--input-len", "32", "--output-len", "16", "--sweep", "1,2,4",
                  "--num-requests", "12", "--slo", "ttft_ms=60"],
    "srv_chat": ["--label", "srv-chat", "--endpoint", "chat", "--dataset", "builtin", "--output-len", "8",
                 "--concurrency", "2", "--num-requests", "10"],
    "srv_faults": ["--label", "srv-faults", "--input-len", "16", "--output-len", "8", "--concurrency", "2",
                   "--num-requests", "12", "--warmup", "0"],
    "torch": ["--label", "torch-smollm2", "--engine", "torch", "--model", "dummy:smollm2-135m", "--input-len",
              "16", "--output-len", "8", "--concurrency", "2", "--num-requests", "4"],
}
# What the in-process engine resolved when it ran (stored with the run, not asked for), and what the torch
# spec of that day did not store.
RESOLVED = {"device", "dtype", "model", "label", "input_tokens", "output_tokens", "seed", "slo"}


@pytest.fixture(scope="module")
def golden(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    d = tmp_path_factory.mktemp("golden-options")
    shutil.copy(GOLDEN / "store-v1.sqlite", d / "store.sqlite")
    store = open_store(f"sqlite:///{d / 'store.sqlite'}")
    try:
        yield store
    finally:
        store.close()


@pytest.mark.parametrize("name", list(GOLDEN_RUNS))
def test_the_options_make_the_spec_the_flags_made_before_them(name: str, golden: Store) -> None:
    ids: dict[str, str] = json.loads((GOLDEN / "ids.json").read_text())
    stored = golden.get_run(ids[name]).config
    url = getattr(stored, "base_url", None)
    args = GOLDEN_RUNS[name] + (["--base-url", str(url)] if url else [])
    made = parsed(*args).spec()
    assert type(made) is type(stored)
    new, old = made.settings(), stored.settings()
    asked = {k: v for k, v in new.items() if v is not None and not (name == "torch" and k in RESOLVED)}
    if "dataset" in asked:  # the workload fields added since (sessions, prefixes) are not asked for here
        asked["dataset"] = {k: v for k, v in asked["dataset"].items() if v is not None}
        old["dataset"] = {k: v for k, v in old["dataset"].items() if v is not None}
    assert {k: old.get(k) for k in asked} == asked
    if name == "torch":
        assert old["model"]["spec"] == new["model"]["spec"] == "dummy:smollm2-135m"
