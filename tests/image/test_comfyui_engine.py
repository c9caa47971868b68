"""The ComfyUI engine against a replay server speaking ComfyUI's protocol (``comfy_replay``), fed with real
workflow templates from PyPI's comfyui-workflow-templates packages (tests/fixtures/captures/comfyui, see its
SOURCES.md): settings placed by node class, queue wait / execution / per-node times / steps / images per
request, an execution error mid-graph, a websocket the server drops, a UI-format file refused."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import pytest
from comfy_replay import Knobs, ReplayServer

from gpuledger.engines.image.base import ImageResult, request_for
from gpuledger.engines.image.comfyui import CACHED_NOTE, WS_DROPPED_NOTE, ComfyUIEngine
from gpuledger.engines.image.workflow import load_workflow, parse_override, patch
from gpuledger.errors import EngineError, UsageError
from gpuledger.kinds.image.spec import ImageSpec
from gpuledger.kinds.image.summary import summarize_images

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "captures" / "comfyui"
SDXL = CAPTURES / "api_image_sdxl_simple.json"
FLUX = CAPTURES / "api_flux_schnell.json"
LTX = CAPTURES / "api_video_ltx2_t2v_extra_prompt.json"


async def _run(
    path: Path, knobs: Knobs, n: int = 3, concurrency: int = 1, **spec: Any
) -> tuple[list[ImageResult], ComfyUIEngine, ReplayServer]:
    async with ReplayServer(knobs) as srv:
        s = ImageSpec(engine="comfyui", base_url=srv.url, workflow=str(path), **spec)
        engine = ComfyUIEngine(s, load_workflow(path), request_timeout_s=20.0)
        await engine.open(concurrency)
        sem = asyncio.Semaphore(concurrency)

        async def one(i: int) -> ImageResult:
            async with sem:
                return await engine.generate_image(
                    request_for(
                        i,
                        seed=7,
                        steps=s.steps,
                        height=s.height,
                        width=s.width,
                        batch_size=s.batch_size or 1,
                        guidance=None,
                        keep_thumbnail=i == 0,
                    )
                )

        try:
            results = await asyncio.gather(*(one(i) for i in range(n)))
        finally:
            await engine.close()
        return list(results), engine, srv


def test_sdxl_template_runs_with_the_settings_placed_by_node_class() -> None:
    results, engine, srv = asyncio.run(
        _run(SDXL, Knobs(), n=3, concurrency=2, steps=6, batch_size=2, height=256, width=320)
    )
    posted = srv.state.posted[0]["prompt"]
    assert posted["12"]["inputs"]["steps"] == 6 and posted["12"]["inputs"]["seed"] == 7
    assert posted["13"]["inputs"] == {"width": 320, "height": 256, "batch_size": 2}
    seeds = sorted(p["prompt"]["12"]["inputs"]["seed"] for p in srv.state.posted)
    assert seeds == [7, 9, 11]  # one seed per image: seed + index × batch
    assert {p["client_id"] for p in srv.state.posted} == {engine.client_id}
    for r in results:
        assert r.error is None, r.error
        assert r.images == 2 and (r.width, r.height) == (320, 256)
        assert r.steps == 6 and len(r.step_end) == 6
        assert r.queue_wait_s is not None and r.execution_s is not None and r.execution_s > 0
        assert r.denoise_s is not None and 0 < r.denoise_s <= r.execution_s
        assert r.nodes and any(n.class_type == "KSampler" and n.seconds for n in r.nodes)
    # ComfyUI runs one prompt at a time: with two in flight, one of them waited in its queue
    assert max(r.queue_wait_s or 0 for r in results) > min(r.execution_s or 1 for r in results) / 2
    # the checkpoint loader's output is reused by the later prompts (execution_cached)
    later = [n for r in results for n in (r.nodes or []) if n.class_type == "CheckpointLoaderSimple"]
    assert any(n.cached for n in later)
    thumb = results[0].thumbnails[0]
    assert base64.b64decode(thumb.png_base64)[:8] == b"\x89PNG\r\n\x1a\n"
    assert engine.applied and "12 KSampler.steps = 6" in engine.applied
    summary = summarize_images([r.to_record(results[0].t_send) for r in results], model="sdxl")
    assert summary.images_total == 6 and summary.steps_total == 36
    assert summary.stage_times.queue_wait_s.n == 3 and summary.thumbnails
    assert {c.class_type for c in summary.node_classes or []} >= {"KSampler", "VAEDecode", "SaveImage"}


def test_flux_template_sets_the_sd3_latent_node() -> None:
    results, _, srv = asyncio.run(_run(FLUX, Knobs(), n=2, steps=3, height=128, width=128))
    posted = srv.state.posted[0]["prompt"]
    assert posted["27"]["class_type"] == "EmptySD3LatentImage"
    assert posted["27"]["inputs"]["width"] == 128 and posted["31"]["inputs"]["steps"] == 3
    assert posted["27"]["inputs"]["batch_size"] == 1  # no --batch-size: the workflow's own
    assert all(r.error is None and r.images == 1 and r.steps == 3 for r in results)


def test_the_shipped_api_workflow_is_patched_and_its_video_output_is_not_counted_as_images() -> None:
    results, _, srv = asyncio.run(_run(LTX, Knobs(), n=1, steps=4, height=256, width=384))
    posted = srv.state.posted[0]["prompt"]
    assert posted["11"]["inputs"]["noise_seed"] == 7  # RandomNoise
    assert posted["9"]["inputs"]["steps"] == 4  # LTXVScheduler
    assert posted["43"]["inputs"]["width"] == 384 and posted["43"]["inputs"]["height"] == 256
    r = results[0]
    assert r.error is None and r.steps == 4
    assert r.images == 0 and any("produced no images" in n and "gifs" in n for n in r.notes)


def test_an_execution_error_mid_graph_is_the_request_error_with_the_nodes_that_ran() -> None:
    results, _, _ = asyncio.run(_run(SDXL, Knobs(fail_class="VAEDecode"), n=2, steps=3))
    for r in results:
        assert r.error is not None and r.error.startswith("execution error at node 14 (VAEDecode)")
        assert "torch.OutOfMemoryError" in r.error and r.error_node == "14 VAEDecode"
        assert r.images == 0
        ran = [n.class_type for n in r.nodes or [] if not n.cached]
        assert "KSampler" in ran and "SaveImage" not in ran
    summary = summarize_images([r.to_record(0.0) for r in results])
    assert summary.num_failed == 2 and summary.errors == {"execution error at node 14 (VAEDecode)": 2}


def test_a_dropped_websocket_is_followed_through_history_and_reconnected() -> None:
    results, engine, srv = asyncio.run(_run(SDXL, Knobs(drop_ws_after_progress=3, step_s=0.02), n=3, steps=5))
    assert srv.state.dropped and engine.reconnects >= 1 and srv.state.ws_connects >= 2
    assert all(r.error is None and r.images == 1 for r in results)
    first = results[0]
    assert WS_DROPPED_NOTE in first.notes
    assert first.execution_s is not None and first.queue_wait_s is not None and first.nodes is None
    # after the reconnect, prompts are followed over the websocket again
    assert results[-1].nodes and WS_DROPPED_NOTE not in results[-1].notes


def test_a_workflow_the_server_rejects_is_a_failed_request_with_comfyuis_message() -> None:
    known = {"CheckpointLoaderSimple", "CLIPTextEncode", "KSampler", "VAEDecode", "SaveImage"}
    results, _, _ = asyncio.run(_run(SDXL, Knobs(known_classes=known), n=1))
    err = results[0].error or ""
    assert err.startswith("prompt rejected (HTTP 400): Cannot execute because node EmptyLatentImage")


def test_a_cancelled_request_interrupts_the_prompt_on_the_server() -> None:
    async def go() -> list[str]:
        async with ReplayServer(Knobs(step_s=0.2)) as srv:
            s = ImageSpec(engine="comfyui", base_url=srv.url, workflow=str(SDXL), steps=50)
            engine = ComfyUIEngine(s, load_workflow(SDXL))
            await engine.open(1)
            calls: list[str] = []
            orig = engine._interrupt

            async def spy(pid: str) -> None:
                calls.append(pid)
                await orig(pid)

            engine._interrupt = spy  # type: ignore[method-assign]
            task = asyncio.create_task(
                engine.generate_image(
                    request_for(0, seed=1, steps=50, height=None, width=None, batch_size=1, guidance=None)
                )
            )
            await asyncio.sleep(0.5)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await engine.close()
            return calls

    assert len(asyncio.run(go())) == 1


def test_a_ui_format_workflow_is_refused_with_how_to_export_the_api_format() -> None:
    with pytest.raises(UsageError, match=r"UI format .*Export \(API\)"):
        load_workflow(CAPTURES / "ui_image_sdxl_simple.json")


def test_settings_the_workflow_has_no_place_for_are_said(tmp_path: Path) -> None:
    wf = load_workflow(LTX)
    out = patch(
        wf,
        seed=None,
        steps=None,
        batch_size=None,
        width=None,
        height=None,
        overrides=[parse_override("23.value=30")],
    )
    assert out.nodes["23"]["inputs"]["value"] == 30 and out.unplaced == []
    only_save = tmp_path / "w.json"
    only_save.write_text(json.dumps({"1": {"class_type": "SaveImage", "inputs": {"filename_prefix": "x"}}}))
    out = patch(load_workflow(only_save), seed=3, steps=5, batch_size=None, width=None, height=None)
    assert len(out.unplaced) == 2 and "no node that takes a literal seed" in out.unplaced[0]
    with pytest.raises(UsageError, match="no node '99'"):
        patch(
            wf,
            seed=None,
            steps=None,
            batch_size=None,
            width=None,
            height=None,
            overrides=[parse_override("99.steps=3")],
        )


def test_no_server_is_an_engine_error() -> None:
    async def go() -> None:
        s = ImageSpec(engine="comfyui", base_url="http://127.0.0.1:9", workflow=str(SDXL))
        await ComfyUIEngine(s, load_workflow(SDXL)).open(1)

    with pytest.raises(EngineError, match="cannot connect to ComfyUI"):
        asyncio.run(go())


def test_a_prompt_comfyui_serves_from_its_cache_is_said_to_have_done_no_denoising() -> None:
    async def go() -> list[ImageResult]:
        async with ReplayServer(Knobs()) as srv:
            s = ImageSpec(engine="comfyui", base_url=srv.url, workflow=str(SDXL), steps=3)
            engine = ComfyUIEngine(s, load_workflow(SDXL))
            await engine.open(1)
            same = [request_for(0, seed=9, steps=3, height=None, width=None, batch_size=1, guidance=None)] * 2
            out = [await engine.generate_image(r) for r in same]
            await engine.close()
            return out

    first, again = asyncio.run(go())
    assert CACHED_NOTE not in first.notes and first.steps == 3
    assert CACHED_NOTE in again.notes and again.steps is None
    assert CACHED_NOTE in summarize_images([again.to_record(0.0)]).fidelity_notes()


def test_warm_up_requests_never_share_a_measured_requests_seed() -> None:
    measured = {
        request_for(i, seed=0, steps=None, height=None, width=None, batch_size=2, guidance=None).seed
        for i in range(100)
    }
    warm = {
        request_for(-i, seed=0, steps=None, height=None, width=None, batch_size=2, guidance=None).seed
        for i in range(1, 5)
    }
    assert not measured & warm
