"""A replay ComfyUI server on 127.0.0.1 (aiohttp) that speaks ComfyUI's documented protocol (``server.py``,
``execution.py``): ``/system_stats``, ``/ws?clientId=`` (``status``, ``execution_start``,
``execution_cached``,
``executing``, ``progress``, ``executed``, ``execution_success`` / ``execution_error``), ``POST /prompt``
(with ComfyUI's validation error shape), ``/history/{prompt_id}``, ``/view``, ``/interrupt``, ``/queue``.

It executes no model: it walks the workflow's graph the way ComfyUI does (the nodes the output nodes need, in
dependency order, one prompt at a time, reusing the outputs of nodes whose inputs did not change since the
previous prompt), sleeps a little per node, sends a sampler's steps as ``progress``, and makes PNG files of
the workflow's size for the image outputs. Knobs: ``fail_class`` (an ``execution_error`` at the first node of
that class: mid-graph), ``drop_ws_after_progress`` (the server closes every websocket once, after that many
progress messages), ``node_s`` / ``step_s`` (seconds per node / per step), ``image`` (how an output file is
made from its width, height and index: ``png`` by default, a gradient of at most 128×128).
"""

from __future__ import annotations

import asyncio
import json
import struct
import time
import uuid
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

OUTPUT_NODES = {
    "SaveImage": "output",
    "PreviewImage": "temp",
    "VHS_VideoCombine": "gifs",
    "PreviewAudio": "audio",
    "SaveVideo": "output",
}
SAMPLERS = {"KSampler", "KSamplerAdvanced", "SamplerCustom", "SamplerCustomAdvanced"}


def png(width: int, height: int, seed: int) -> bytes:
    """A real RGB PNG (a gradient that depends on the seed)."""
    w, h = max(1, min(width, 128)), max(1, min(height, 128))
    rows = b"".join(
        b"\x00"
        + bytes(
            ((x * 255 // w + seed) % 256, (y * 255 // h) % 256, (seed * 37) % 256)[c]
            for x in range(w)
            for c in range(3)
        )
        for y in range(h)
    )

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data))
            + kind
            + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        )

    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


@dataclass
class Knobs:
    node_s: float = 0.002
    step_s: float = 0.003
    fail_class: str | None = None
    drop_ws_after_progress: int | None = None
    known_classes: set[str] | None = None
    image: Callable[[int, int, int], bytes] | None = None


@dataclass
class Replay:
    knobs: Knobs = field(default_factory=Knobs)
    sockets: dict[str, web.WebSocketResponse] = field(default_factory=dict)
    history: dict[str, dict[str, Any]] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)
    queue: asyncio.Queue[tuple[int, str, dict[str, Any], dict[str, Any], list[str]]] = field(
        default_factory=asyncio.Queue
    )
    number: int = 0
    previous: dict[str, str] = field(default_factory=dict)
    progress_sent: int = 0
    dropped: bool = False
    posted: list[dict[str, Any]] = field(default_factory=list)
    ws_connects: int = 0

    async def send(self, sid: str | None, kind: str, data: dict[str, Any]) -> None:
        ws = self.sockets.get(sid or "")
        if ws is not None and not ws.closed:
            try:
                await ws.send_json({"type": kind, "data": data})
            except (ConnectionError, RuntimeError):
                pass

    async def drop_all(self) -> None:
        self.dropped = True
        for ws in list(self.sockets.values()):
            await ws.close()
        self.sockets.clear()


def _ms() -> int:
    return int(time.time() * 1000)


def _links(node: dict[str, Any]) -> list[str]:
    return [str(v[0]) for v in (node.get("inputs") or {}).values() if isinstance(v, list) and len(v) == 2]


def _order(prompt: dict[str, Any], outputs: list[str]) -> list[str]:
    seen: list[str] = []

    def visit(n: str) -> None:
        if n in seen:
            return
        for up in _links(prompt[n]):
            visit(up)
        seen.append(n)

    for o in outputs:
        visit(o)
    return seen


def _signature(prompt: dict[str, Any], n: str, memo: dict[str, str]) -> str:
    if n not in memo:
        node = prompt[n]
        lits = {k: v for k, v in (node.get("inputs") or {}).items() if not isinstance(v, list)}
        ups = [_signature(prompt, u, memo) for u in _links(node)]
        memo[n] = json.dumps([node["class_type"], lits, ups], sort_keys=True, default=str)
    return memo[n]


def _upstream_latent(prompt: dict[str, Any], n: str) -> dict[str, Any]:
    stack, seen = [n], set()
    while stack:
        cur = stack.pop()
        if cur in seen:
            continue
        seen.add(cur)
        node = prompt[cur]
        cls = str(node["class_type"])
        if "Empty" in cls and "Latent" in cls and "Audio" not in cls:
            return dict(node.get("inputs") or {})
        stack.extend(_links(node))
    return {}


def _steps(prompt: dict[str, Any], n: str) -> int:
    inputs = prompt[n].get("inputs") or {}
    if isinstance(inputs.get("steps"), int):
        return int(inputs["steps"])
    for key in ("sigmas",):
        link = inputs.get(key)
        if isinstance(link, list):
            up = prompt[str(link[0])].get("inputs") or {}
            if isinstance(up.get("steps"), int):
                return int(up["steps"])
    return 1


async def _execute(
    app: Replay,
    number: int,
    pid: str,
    prompt: dict[str, Any],
    extra: dict[str, Any],
    outputs_to_run: list[str],
) -> None:
    sid = extra.get("client_id")
    messages: list[list[Any]] = []

    async def say(kind: str, data: dict[str, Any], keep: bool = False) -> None:
        if keep:
            messages.append([kind, data])
        await app.send(sid, kind, data)

    await say("execution_start", {"prompt_id": pid, "timestamp": _ms()}, keep=True)
    memo: dict[str, str] = {}
    order = _order(prompt, outputs_to_run)
    sigs = {n: _signature(prompt, n, memo) for n in order}
    cached = [
        n for n in order if app.previous.get(n) == sigs[n] and prompt[n]["class_type"] not in OUTPUT_NODES
    ]
    await say("execution_cached", {"nodes": cached, "prompt_id": pid, "timestamp": _ms()}, keep=True)
    outputs: dict[str, Any] = {}
    status = "success"
    for n in order:
        if n in cached:
            continue
        cls = str(prompt[n]["class_type"])
        await say("executing", {"node": n, "display_node": n, "prompt_id": pid})
        if app.knobs.fail_class == cls:
            err = {
                "prompt_id": pid,
                "node_id": n,
                "node_type": cls,
                "executed": [x for x in order if x in outputs],
                "exception_message": "Allocation on device would exceed allowed memory. (out of memory)",
                "exception_type": "torch.OutOfMemoryError",
                "traceback": ['  File "execution.py"'],
                "current_inputs": {},
                "current_outputs": {},
                "timestamp": _ms(),
            }
            await say("execution_error", err, keep=True)
            status = "error"
            break
        await asyncio.sleep(app.knobs.node_s)
        if cls in SAMPLERS:
            total = _steps(prompt, n)
            for i in range(1, total + 1):
                await asyncio.sleep(app.knobs.step_s)
                await say("progress", {"value": i, "max": total, "prompt_id": pid, "node": n})
                app.progress_sent += 1
                drop = app.knobs.drop_ws_after_progress
                if drop is not None and not app.dropped and app.progress_sent >= drop:
                    await app.drop_all()
        if cls in OUTPUT_NODES:
            latent = _upstream_latent(prompt, n)
            batch = int(latent.get("batch_size", 1))
            w, h = int(latent.get("width", 512)), int(latent.get("height", 512))
            kind = OUTPUT_NODES[cls]
            if kind in ("output", "temp"):
                items = []
                for i in range(batch):
                    name = f"ComfyUI_{pid[:8]}_{i:05d}_.png"
                    app.files[name] = (app.knobs.image or png)(w, h, i)
                    items.append({"filename": name, "subfolder": "", "type": kind})
                out: dict[str, Any] = {"images": items}
            elif kind == "gifs":
                out = {
                    "gifs": [
                        {
                            "filename": f"AnimateDiff_{pid[:8]}.mp4",
                            "subfolder": "",
                            "type": "output",
                            "format": "video/h264-mp4",
                        }
                    ]
                }
            else:
                out = {"audio": [{"filename": f"audio_{pid[:8]}.flac", "subfolder": "", "type": "temp"}]}
            outputs[n] = out
            await say("executed", {"node": n, "display_node": n, "output": out, "prompt_id": pid})
        else:
            outputs[n] = {}
        app.previous[n] = sigs[n]
    if status == "success":
        await say("execution_success", {"prompt_id": pid, "timestamp": _ms()}, keep=True)
    await say("executing", {"node": None, "prompt_id": pid})
    app.history[pid] = {
        "prompt": [number, pid, prompt, extra, outputs_to_run],
        "outputs": {k: v for k, v in outputs.items() if v},
        "status": {"status_str": status, "completed": status == "success", "messages": messages},
        "meta": {
            k: {"node_id": k, "display_node": k, "parent_node": None, "real_node_id": k} for k in outputs
        },
    }


def make_app(state: Replay) -> web.Application:
    app = web.Application()

    async def worker(_: web.Application) -> Any:
        async def loop() -> None:
            while True:
                number, pid, prompt, extra, outs = await state.queue.get()
                await _execute(state, number, pid, prompt, extra, outs)

        task = asyncio.create_task(loop())
        yield
        task.cancel()

    app.cleanup_ctx.append(worker)

    async def system_stats(_: web.Request) -> web.Response:
        return web.json_response(
            {
                "system": {
                    "os": "posix",
                    "ram_total": 2**36,
                    "ram_free": 2**35,
                    "comfyui_version": "0.3.66",
                    "python_version": "3.12.3",
                    "pytorch_version": "2.8.0+cu128",
                    "embedded_python": False,
                    "argv": ["main.py"],
                },
                "devices": [
                    {
                        "name": "cuda:0 NVIDIA H200 : cudaMallocAsync",
                        "type": "cuda",
                        "index": 0,
                        "vram_total": 150_000_000_000,
                        "vram_free": 149_000_000_000,
                        "torch_vram_total": 0,
                        "torch_vram_free": 0,
                    }
                ],
            }
        )

    async def ws_handler(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        sid = request.rel_url.query.get("clientId") or uuid.uuid4().hex
        state.sockets[sid] = ws
        state.ws_connects += 1
        await ws.send_json(
            {
                "type": "status",
                "data": {"status": {"exec_info": {"queue_remaining": state.queue.qsize()}}, "sid": sid},
            }
        )
        async for msg in ws:
            if msg.type == WSMsgType.ERROR:
                break
        if state.sockets.get(sid) is ws:
            state.sockets.pop(sid, None)
        return ws

    async def post_prompt(request: web.Request) -> web.Response:
        body = await request.json()
        state.posted.append(body)
        prompt = body.get("prompt")
        if not isinstance(prompt, dict):
            err = {
                "type": "no_prompt",
                "message": "No prompt provided",
                "details": "No prompt provided",
                "extra_info": {},
            }
            return web.json_response({"error": err, "node_errors": {}}, status=400)
        for n, node in prompt.items():
            cls = node.get("class_type")
            known = state.knobs.known_classes
            if known is not None and cls not in known:
                err = {
                    "type": "invalid_prompt",
                    "message": f"Cannot execute because node {cls} does not exist.",
                    "details": f"Node ID '#{n}'",
                    "extra_info": {},
                }
                return web.json_response({"error": err, "node_errors": {}}, status=400)
        outs = [n for n, node in prompt.items() if node.get("class_type") in OUTPUT_NODES]
        if not outs:
            err = {
                "type": "prompt_no_outputs",
                "message": "Prompt has no outputs",
                "details": "",
                "extra_info": {},
            }
            return web.json_response({"error": err, "node_errors": {}}, status=400)
        pid = str(uuid.uuid4())
        number = state.number
        state.number += 1
        extra = {"client_id": body.get("client_id"), "create_time": _ms()}
        await state.queue.put((number, pid, prompt, extra, outs))
        return web.json_response({"prompt_id": pid, "number": number, "node_errors": {}})

    async def get_history(request: web.Request) -> web.Response:
        pid = request.match_info["pid"]
        return web.json_response({pid: state.history[pid]} if pid in state.history else {})

    async def view(request: web.Request) -> web.Response:
        name = request.rel_url.query.get("filename", "")
        if name not in state.files:
            return web.Response(status=404)
        return web.Response(body=state.files[name], content_type="image/png")

    async def ok(_: web.Request) -> web.Response:
        return web.Response(status=200)

    app.router.add_get("/system_stats", system_stats)
    app.router.add_get("/ws", ws_handler)
    app.router.add_post("/prompt", post_prompt)
    app.router.add_get("/history/{pid}", get_history)
    app.router.add_get("/view", view)
    app.router.add_post("/interrupt", ok)
    app.router.add_post("/queue", ok)
    return app


class ReplayServer:
    """``async with ReplayServer(Knobs(...)) as srv:`` -> ``srv.url``, ``srv.state``."""

    def __init__(self, knobs: Knobs | None = None) -> None:
        self.state = Replay(knobs or Knobs())
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def __aenter__(self) -> ReplayServer:
        self._runner = web.AppRunner(make_app(self.state))
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        for ws in list(self.state.sockets.values()):
            await ws.close()
        if self._runner is not None:
            await self._runner.cleanup()
