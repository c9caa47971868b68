"""Image runs through the one run lifecycle of bench/runner.py: a ComfyUI workflow on the replay server and
the tiny diffusers pipeline on this CPU are stored as image runs (requests, summary, spec), and an
interrupted run keeps the records of the images that finished."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest
from comfy_replay import Knobs, ReplayServer

from gpuledger.bench.runner import Hooks, run_bench, run_bench_async
from gpuledger.kinds.image.options import image_spec
from gpuledger.kinds.image.spec import ImageSpec
from gpuledger.kinds.image.summary import ImageSummary, timing_of
from gpuledger.records import RunInfo
from gpuledger.store import open_store

SDXL = (
    Path(__file__).resolve().parents[1] / "fixtures" / "captures" / "comfyui" / "api_image_sdxl_simple.json"
)


def _comfy(tmp_path: Path, knobs: Knobs, hooks: Hooks | None = None, **values: object) -> tuple[RunInfo, int]:
    async def go() -> tuple[RunInfo, int]:
        async with ReplayServer(knobs) as srv:
            spec = image_spec("comfyui", base_url=srv.url, workflow=SDXL, telemetry=False, **values)  # type: ignore[arg-type]
            with open_store(f"sqlite:///{tmp_path / 's.sqlite'}") as store:
                info = await run_bench_async(spec, store, hooks=hooks)
                return info, len(store.get_requests(info.id))

    return asyncio.run(go())


def test_a_comfyui_workflow_is_stored_as_an_image_run(tmp_path: Path) -> None:
    info, stored = _comfy(
        tmp_path, Knobs(), steps=3, height=128, width=128, num_images=4, concurrency=2, warmup=1, seed=5
    )
    assert info.status == "complete" and stored == 4
    s = info.summary
    assert isinstance(s, ImageSummary)
    assert s.images_total == 4 and s.steps_total == 12 and s.resolution == "128×128"
    assert s.stage_times.queue_wait_s.n == 4 and s.thumbnails and s.verdict is not None
    assert isinstance(info.config, ImageSpec) and info.config.workflow_sha256
    assert info.server["kind"] == "comfyui" and info.server["comfyui"]["settings_applied"]
    assert info.workload["task"] == "image" and info.workload["steps"] == 3


@pytest.mark.slow
def test_the_tiny_pipeline_runs_through_the_lifecycle(tmp_path: Path) -> None:
    spec = image_spec(
        "diffusers",
        model="dummy:tiny-sd",
        steps=2,
        height=64,
        width=64,
        num_images=3,
        batch_size=2,
        device="cpu",
        warmup=1,
        telemetry=False,
    )
    with open_store(f"sqlite:///{tmp_path / 's.sqlite'}") as store:
        info = run_bench(spec, store)
        records = store.get_requests(info.id)
    s = info.summary
    assert info.status == "complete" and isinstance(s, ImageSummary)
    assert [timing_of(r).images for r in records] == [2, 1]  # type: ignore[union-attr]  # 3 images, batch 2
    assert s.images_total == 3 and s.stage_times.text_encode_s.n == 2 and s.stage_times.decode_s.n == 2
    assert isinstance(info.config, ImageSpec)
    assert info.config.pipeline == "StableDiffusionPipeline" and info.config.device == "cpu"
    assert info.client.get("in_process_engine") is True


def test_an_interrupted_run_keeps_the_finished_images(tmp_path: Path) -> None:
    def on_progress(done: int, planned: int | None) -> None:
        if done == 2:
            os.kill(os.getpid(), signal.SIGINT)

    info, stored = _comfy(
        tmp_path, Knobs(step_s=0.05), hooks=Hooks(on_progress=on_progress), steps=4, num_images=6, warmup=0
    )
    assert info.status == "incomplete"
    s = info.summary
    assert isinstance(s, ImageSummary) and s.interrupted is not None
    assert s.interrupted.signal == "SIGINT" and s.interrupted.finished_requests == 2
    assert stored == 2 and s.images_total == 2
