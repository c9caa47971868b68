"""Engines and load strategies are registered, and the CLI and the runner read the registries: an engine
registered here is benched by ``gpuledger bench --engine NAME`` with no other code naming it."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
import typer.main

import gpuledger.bench.replay  # noqa: F401 - registers the trace replay's driver
from gpuledger.bench.drive import DRIVERS
from gpuledger.cli.app import app
from gpuledger.cli.main import main
from gpuledger.engines import (
    DEFAULT_BASE_URLS,
    ENDPOINTS,
    ENGINE_KINDS,
    EngineKind,
    EngineOptions,
    GenRequest,
    GenResult,
    ServerInfo,
    either,
    engine_names,
)
from gpuledger.errors import UsageError
from gpuledger.kinds.text.spec import ServerSpec
from gpuledger.records import BenchSpec
from gpuledger.records.spec import BatchStage, ConcurrencyStage, RateStage, TraceStage
from gpuledger.store import open_store
from gpuledger.workload.load import LOAD_KINDS, load_from_flags


class EchoEngine:
    """An engine that answers every request itself: one token per character of its prompt's first word,
    1 ms apart (what a registered engine must provide: the ``Engine`` protocol)."""

    name = "echo"

    def __init__(self, spec: BenchSpec, options: EngineOptions) -> None:
        assert isinstance(spec, ServerSpec)
        self.spec = spec
        self.chunks_seen = 0
        self.model = spec.model or "echo-model"
        self.display_url = spec.base_url
        self.closed = False

    @property
    def tokenizer(self) -> None:
        return None

    async def open(self, concurrency: int | None) -> ServerInfo:
        return ServerInfo(kind="echo", version="1", version_source="the test", models=[self.model])

    async def generate(self, req: GenRequest) -> GenResult:
        t_send = time.perf_counter()
        times = []
        for _ in range(req.max_tokens):
            await asyncio.sleep(0.001)
            times.append(time.perf_counter())
        self.chunks_seen += len(times)
        return GenResult(index=req.index, t_send=t_send, t_end=times[-1], chunk_times=times,
                         output_tokens=len(times), requested_output_tokens=req.max_tokens, stage=req.stage)

    async def after_run(self) -> dict[str, Any]:
        return {}

    async def close(self) -> None:
        self.closed = True


@pytest.fixture
def echo(monkeypatch: pytest.MonkeyPatch) -> EngineKind:
    kind = EngineKind("echo", "a test engine answering in-memory", ServerSpec, lambda: EchoEngine,
                      {"generate": "prompt", "chat": "chat"}, "http://echo.invalid:1")
    monkeypatch.setitem(ENGINE_KINDS, "echo", kind)
    return kind


def test_a_registered_engine_is_benched_through_the_command_line_with_nothing_else_naming_it(
    echo: EngineKind, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["bench", "--engine", "echo", "--no-telemetry", "--no-progress", "--json", "--output-len",
                 "3", "--num-requests", "6", "--concurrency", "2", "--warmup", "1"])
    out = capsys.readouterr()
    assert code == 0, out.err
    doc = json.loads(out.out)
    assert doc["engine"] == "echo" and doc["server"]["kind"] == "echo" and doc["model"] == "echo-model"
    assert doc["config"]["endpoint"] == "generate"  # the registered default endpoint
    assert doc["config"]["base_url"] == "http://echo.invalid:1"  # and default URL
    assert doc["summary"]["num_ok"] == 6 and doc["summary"]["output_tokens_total"] == 18
    store = open_store(None)
    try:
        run = store.get_run(doc["id"])
    finally:
        store.close()
    assert isinstance(run.config, ServerSpec) and run.config.engine == "echo"


def test_the_engine_choice_and_its_endpoints_are_checked_against_the_registry(
    echo: EngineKind, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["bench", "--engine", "grpc", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and f"--engine must be {either(engine_names())}, got 'grpc'" in err
    assert engine_names()[-1] == "echo" and "echo, got" in err
    code = main(["bench", "--engine", "echo", "--endpoint", "completions", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    assert "--endpoint completions is not an endpoint of --engine echo (choose generate or chat)" in err


def test_the_cli_and_the_library_read_endpoints_and_urls_from_the_registry() -> None:
    assert {n: tuple(k.endpoints) for n, k in ENGINE_KINDS.items() if k.endpoints} == ENDPOINTS
    assert {n: k.default_base_url for n, k in ENGINE_KINDS.items() if k.default_base_url} == DEFAULT_BASE_URLS
    bench = typer.main.get_command(app).commands["bench"]  # type: ignore[attr-defined]
    helps = {p.name: p.help or "" for p in bench.params}
    for name, kind in ENGINE_KINDS.items():
        assert name in helps["engine"] and kind.about in helps["engine"]
        if kind.default_base_url:
            assert f"{kind.default_base_url} for {name}" in helps["base_url"]
        for endpoint in kind.endpoints:
            assert endpoint in helps["endpoint"]


def test_every_stage_a_spec_can_make_has_a_registered_driver() -> None:
    releases = (ConcurrencyStage, RateStage, BatchStage, TraceStage)
    assert set(DRIVERS) == {stage.RELEASE for stage in releases}


def test_the_load_flags_choose_a_registered_pattern() -> None:
    assert list(LOAD_KINDS) == ["trace", "sweep", "rate", "concurrency"]  # tried in this order
    assert load_from_flags(trace=True, concurrency=4).kind == "trace"
    assert load_from_flags(sweep=(1, 2)).kind == "sweep"
    assert load_from_flags(rate=2.0, concurrency=4).kind == "rate"
    assert load_from_flags(concurrency=4).kind == "concurrency"
    with pytest.raises(UsageError, match="--sweep runs its own concurrencies"):
        load_from_flags(concurrency=4, sweep=(1, 2))


def test_the_kinds_descriptors_name_the_registered_engines_as_the_registry_knows_them() -> None:
    """`bench --help` and `--engine`'s choices are written from the kinds' descriptors (records.kinds, no
    engine imported); the registry makes an engine of each: the same names in the same order, each with the
    descriptor's about, endpoints, default URL and spec kind."""
    from gpuledger.engines.registry import FACTORIES
    from gpuledger.records.kinds import engine_names_of_kinds

    named = engine_names_of_kinds()
    assert [e.name for e in named] == list(ENGINE_KINDS) == list(FACTORIES)
    for entry in named:
        kind = ENGINE_KINDS[entry.name]
        assert (kind.about, kind.endpoints, kind.default_base_url, kind.spec.KIND) == (
            entry.about, dict(entry.endpoints), entry.default_base_url, entry.spec_kind)


def test_the_task_table_is_the_kinds_and_the_engines_of_their_spec_kinds(echo: EngineKind) -> None:
    from gpuledger.bench.tasks import choices, engine_for_task, engines_of, task_named, task_of_engine

    assert [engines_of(task_named(t)) for t in ("text", "image", "train")] == [
        ("openai", "ollama", "torch", "echo"), ("diffusers", "comfyui", "openai-images"), ("torch-train",)]
    assert engine_for_task("image", "openai", False) == "diffusers"  # the kind's default engine
    assert engine_for_task("train", "torch", True) == "torch-train"  # the kind's alias
    assert choices(task_named("train")) == "torch" and task_of_engine("echo").name == "text"
    with pytest.raises(UsageError, match="--task image runs diffusers, comfyui or openai-images, not --eng"):
        engine_for_task("image", "openai", True)
    with pytest.raises(UsageError, match="--task must be text, image or train, got 'video'"):
        task_named("video")
