"""The OpenAI-compatible image engine against a loopback server answering ``POST /v1/images/generations``
the way OpenAI's API reference and vLLM-Omni's image generation API document it."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

from aiohttp import web
from comfy_replay import png

from gpuledger.engines.image.base import ImageResult, request_for
from gpuledger.engines.image.openai_images import OpenAIImagesEngine
from gpuledger.kinds.image.spec import ImageSpec
from gpuledger.kinds.image.summary import summarize_images


async def _serve(
    handler: Any, spec: dict[str, Any], n: int, batch: int = 1, size: tuple[int, int] = (64, 48)
) -> tuple[list[ImageResult], list[dict[str, Any]]]:
    seen: list[dict[str, Any]] = []

    async def generations(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(body)
        reply: web.Response = await handler(body)
        return reply

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "Qwen/Qwen-Image", "object": "model"}]})

    app = web.Application()
    app.router.add_post("/v1/images/generations", generations)
    app.router.add_get("/v1/models", models)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        engine = OpenAIImagesEngine(
            ImageSpec(engine="openai-images", base_url=f"http://127.0.0.1:{port}/v1", **spec)
        )
        await engine.open(2)
        results = [
            await engine.generate_image(
                request_for(
                    i,
                    seed=5,
                    steps=None,
                    height=size[1],
                    width=size[0],
                    batch_size=batch,
                    guidance=None,
                    keep_thumbnail=i == 0,
                )
            )
            for i in range(n)
        ]
        await engine.close()
    finally:
        await runner.cleanup()
    return results, seen


def _ok(w: int, h: int) -> Any:
    async def handler(body: dict[str, Any]) -> web.Response:
        await asyncio.sleep(0.01)
        data = [
            {"b64_json": base64.b64encode(png(w, h, i)).decode(), "revised_prompt": body["prompt"]}
            for i in range(body["n"])
        ]
        return web.json_response({"created": 1713833628, "data": data})

    return handler


def test_images_latency_and_size_per_request() -> None:
    results, seen = asyncio.run(_serve(_ok(64, 48), {"steps": 8, "seed": 5, "guidance": 4.0}, n=3, batch=2))
    assert seen[0] == {
        "prompt": seen[0]["prompt"],
        "n": 2,
        "response_format": "b64_json",
        "model": "Qwen/Qwen-Image",
        "size": "64x48",
        "num_inference_steps": 8,
        "seed": 5,
        "guidance_scale": 4.0,
    }
    assert [b["seed"] for b in seen] == [5, 7, 9]
    for r in results:
        assert r.error is None and r.images == 2 and (r.width, r.height) == (64, 48)
        assert r.t_end - r.t_send >= 0.01 and r.output_bytes and r.notes == []
    assert results[0].thumbnails and results[0].thumbnails[0].source_width == 64
    s = summarize_images([r.to_record(results[0].t_send) for r in results])
    assert s.images_total == 6 and s.seconds_per_image.n == 3 and s.steps_total == 0
    assert s.resolution == "64×48" and "denoise_step" not in s.work()


def test_without_steps_seed_or_guidance_only_openais_fields_are_sent() -> None:
    _, seen = asyncio.run(_serve(_ok(64, 48), {}, n=1))
    assert set(seen[0]) == {"prompt", "n", "response_format", "model", "size"}


def test_a_server_that_returns_another_size_or_fewer_images_is_noted() -> None:
    async def handler(body: dict[str, Any]) -> web.Response:
        return web.json_response(
            {"created": 1, "data": [{"b64_json": base64.b64encode(png(32, 32, 0)).decode()}]}
        )

    results, _ = asyncio.run(_serve(handler, {}, n=1, batch=2))
    notes = results[0].notes
    assert "asked for 64×48, the server returned 32×32" in notes
    assert "asked for 2 image(s) per request, got 1" in notes


def test_an_api_error_is_the_request_error() -> None:
    async def handler(body: dict[str, Any]) -> web.Response:
        return web.json_response(
            {
                "error": {
                    "message": "Unknown parameter: 'seed'.",
                    "type": "invalid_request_error",
                    "param": "seed",
                    "code": "unknown_parameter",
                }
            },
            status=400,
        )

    results, _ = asyncio.run(_serve(handler, {"seed": 1}, n=1))
    assert results[0].error == "HTTP 400: Unknown parameter: 'seed'."
    assert results[0].images == 0


def test_hostile_answers_fail_the_request_not_the_run() -> None:
    async def handler(body: dict[str, Any]) -> web.Response:
        if body["prompt"].startswith("a photograph"):
            return web.Response(text="<html>gateway</html>", status=502)
        return web.json_response({"created": 1, "data": [{"b64_json": "!!! not base64"}, 7, None]})

    results, _ = asyncio.run(_serve(handler, {}, n=2))
    assert results[0].error == "HTTP 502: the answer is not JSON"
    assert results[1].error is None and results[1].images == 0
    assert any("not base64" in n for n in results[1].notes)
    json.dumps([r.timing().model_dump(mode="json") for r in results])  # storable
