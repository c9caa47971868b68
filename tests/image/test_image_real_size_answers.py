"""Image servers' answers at the size real images have (tests/support/images.py: a PNG of random pixels,
3 MiB at 1024×1024): the openai-images and ComfyUI engines read each answer to its end (``content.read(n)``
returns what one buffer holds, ~128 KiB), under their byte caps; every image of every answer is checked as
an image (not only the first requests', which keep a thumbnail); and the messages a ComfyUI websocket sends
about prompts the run did not queue are bounded in bytes, not only in count."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import tracemalloc
from typing import Any

import pytest
from aiohttp import web
from comfy_replay import Knobs
from test_comfyui_engine import SDXL, _run
from test_openai_images_engine import _serve

from gpuledger.engines.image import openai_images
from gpuledger.engines.image.comfyui import MAX_EARLY_BYTES, ComfyUIEngine
from gpuledger.engines.image.thumbs import image_size
from gpuledger.engines.image.workflow import load_workflow
from gpuledger.kinds.image.spec import ImageSpec
from support.images import noisy_png

BIG = noisy_png(1024, 1024, 1)


def _answer(*blobs: bytes) -> Any:
    async def handler(body: dict[str, Any]) -> web.Response:
        data = [{"b64_json": base64.b64encode(b).decode()} for b in blobs]
        return web.json_response({"created": 1, "data": data})

    return handler


def test_a_real_size_png_answer_is_read_whole_and_measured() -> None:
    assert len(BIG) > 3 * 1024**2  # two of them in base64: an 8.4 MB answer, 60 buffers of aiohttp's
    second = noisy_png(1024, 1024, 2)
    results, _ = asyncio.run(_serve(_answer(BIG, second), {}, n=2, batch=2, size=(1024, 1024)))
    for r in results:
        assert r.error is None, r.error
        assert r.images == 2 and (r.width, r.height) == (1024, 1024)
        assert r.output_bytes == len(BIG) + len(second) and r.notes == []
    thumb = results[0].thumbnails[0]
    assert (thumb.source_width, thumb.source_height) == (1024, 1024)


def test_an_answer_over_the_cap_fails_its_request_having_read_no_more_than_the_cap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(openai_images, "MAX_RESPONSE_BYTES", 1024**2)
    results, _ = asyncio.run(_serve(_answer(BIG), {}, n=1, size=(1024, 1024)))
    assert results[0].error == "the answer is over 1048576 bytes" and results[0].images == 0


def test_junk_payloads_are_not_counted_as_images_in_any_answer() -> None:
    good = noisy_png(64, 48, 3)
    junk = [
        os.urandom(4096),  # base64 of random bytes
        good[: len(good) // 2],  # a PNG cut in the middle
        good[:-5] + b"XXXXX",  # a PNG whose last chunk's CRC is wrong
        b"\x89PNG\r\n\x1a\n" + b"\x00" * 64,  # a signature and nothing of a PNG after it
        b"\xff\xd8\xff" + os.urandom(512),  # a JPEG's first bytes and junk
        b"GIF89a" + os.urandom(64),  # a GIF header without its trailer
    ]
    # Six requests: the thumbnails are kept for the first four only, the check applies to every one.
    results, _ = asyncio.run(_serve(_answer(good, *junk), {}, n=6, batch=7))
    for r in results:
        assert r.error is None
        assert r.images == 1 and r.output_bytes == len(good)
        assert "6 b64_json entries is not a whole PNG, JPEG, WebP or GIF image: not counted" in r.notes[0]


def test_the_image_check_reads_what_encoders_write() -> None:
    pil = pytest.importorskip("PIL.Image")
    import io

    for fmt in ("PNG", "JPEG", "WEBP", "GIF"):
        buf = io.BytesIO()
        pil.new("RGB", (70, 30), (200, 10, 10)).save(buf, format=fmt)
        assert image_size(buf.getvalue()) == (70, 30), fmt


def test_comfyui_keeps_the_thumbnail_of_a_real_size_image() -> None:
    files: dict[str, bytes] = {}

    def image(w: int, h: int, i: int) -> bytes:
        files[f"{w}x{h}-{i}"] = blob = noisy_png(w, h, i)
        return blob

    results, _, _ = asyncio.run(_run(SDXL, Knobs(image=image), n=1, steps=2, height=1024, width=1024))
    r = results[0]
    assert r.error is None and r.images == 1
    assert r.output_bytes == len(files["1024x1024-0"]) > 3 * 1024**2
    thumb = r.thumbnails[0]
    assert (thumb.source_width, thumb.source_height) == (1024, 1024)


async def _hostile_ws(messages: list[str]) -> tuple[int, int, ComfyUIEngine]:
    """A server that answers /system_stats like ComfyUI and then sends ``messages`` on the websocket and a
    last one about prompt "marker"; returns the bytes Python holds more than before the engine opened, at
    the peak and once the marker arrived, and the engine."""
    async def stats(_: web.Request) -> web.Response:
        return web.json_response({"system": {"comfyui_version": "0.3.66"}, "devices": []})

    async def ws(request: web.Request) -> web.WebSocketResponse:
        sock = web.WebSocketResponse()
        await sock.prepare(request)
        for text in messages:
            await sock.send_str(text)
        await sock.send_str(json.dumps({"type": "progress", "data": {"prompt_id": "marker", "value": 1}}))
        async for _ in sock:
            pass
        return sock

    app = web.Application()
    app.router.add_get("/system_stats", stats)
    app.router.add_get("/ws", ws)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    url = f"http://127.0.0.1:{port}"
    engine = ComfyUIEngine(ImageSpec(engine="comfyui", base_url=url, workflow=str(SDXL)), load_workflow(SDXL))
    try:
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        await engine.open(1)
        for _ in range(2000):
            if "marker" in engine._early:
                break
            await asyncio.sleep(0.01)
        assert "marker" in engine._early, "the websocket's messages did not arrive"
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
        await engine.close()
        await runner.cleanup()
    return kept, len(messages), engine


def test_comfyui_keeps_messages_about_unknown_prompts_within_a_byte_bound() -> None:
    blob = "x" * (1024**2)
    messages = [json.dumps({"type": "executed", "data": {"prompt_id": f"p-{i % 3}", "node": "9",
                                                          "output": {"text": [blob]}}}) for i in range(48)]
    kept, sent, engine = asyncio.run(_hostile_ws(messages))
    assert sent * len(blob) >= 3 * MAX_EARLY_BYTES  # 48 MiB sent about prompts the run never queued
    assert kept < MAX_EARLY_BYTES + 8 * 1024**2, kept  # what stays in memory: the bound and some slack
    assert engine.early_bytes <= MAX_EARLY_BYTES and engine.early_dropped >= 32
    assert "early_messages_dropped" in asyncio.run(engine.after_run())["comfyui"]


def test_the_early_messages_of_the_runs_own_prompts_are_all_taken_by_their_requests() -> None:
    results, engine, _ = asyncio.run(_run(SDXL, Knobs(), n=2, steps=3, height=128, width=128))
    assert all(r.error is None and r.steps == 3 for r in results)
    assert engine.early_bytes == 0 and engine.early_dropped == 0
