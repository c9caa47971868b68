"""``--engine comfyui``: the user's ComfyUI workflow (API format) queued on a ComfyUI server.

The protocol, as ComfyUI's ``server.py`` and ``execution.py`` speak it:

- ``GET /system_stats``: ``{"system": {"comfyui_version", "pytorch_version", ...}, "devices": [...]}``;
- ``GET /ws?clientId=ID``: a websocket; the server first sends ``status`` (with ``sid``), then, for the
  prompts queued with that ``client_id``: ``execution_start``, ``execution_cached`` (``nodes`` reused from
  its cache), ``executing`` (``node``: the node starting; ``null`` when the prompt is done), ``progress``
  (``value``/``max``: a sampler's steps), ``executed`` (``output``: a node's results, ``images`` for
  SaveImage/PreviewImage), ``execution_success`` or ``execution_error`` / ``execution_interrupted``. Every
  message of a prompt carries its ``prompt_id``; binary messages are previews and are skipped;
- ``POST /prompt`` ``{"prompt": WORKFLOW, "client_id": ID}`` -> ``{"prompt_id", "number", "node_errors"}``,
  or 400 ``{"error": {...}, "node_errors": {...}}`` when the workflow does not validate;
- ``GET /history/{prompt_id}``: ``{prompt_id: {"outputs", "status": {"status_str", "completed",
  "messages": [[type, {..., "timestamp": ms}], ...]}}}`` once it has run; ``GET /view?filename=&subfolder=
  &type=`` an output file; ``POST /interrupt`` ``{"prompt_id"}`` stops a running prompt.

Per request (one queued prompt): queue wait = ``execution_start`` received − prompt sent; execution =
``execution_success`` received − ``execution_start`` received; each node's time = from its ``executing`` to
the next boundary (the next node, or the end); steps = the ``progress`` messages (their arrival times are the
record's chunk times); denoising = the time of the nodes that reported progress; images = the entries of
``images`` in the outputs (type ``output``, else ``temp``). Concurrency = prompts in flight (ComfyUI runs one
at a time; the others wait in its queue, which the queue wait shows).

When the websocket drops, the engine reconnects with the same client id and, meanwhile, follows the prompts
in flight through ``/history``: their end is when history showed them done (an upper bound), their queue
wait and execution come from history's own timestamps, and their per-node times are missing (said in the
record's notes).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from typing import Any

import aiohttp

from gpuledger.boundedio import TooLarge, read_body
from gpuledger.engines.base import CANNOT_CONNECT, ServerInfo
from gpuledger.engines.image.base import ImageRequest, ImageResult
from gpuledger.engines.image.comfyui_messages import CACHED_NOTE as CACHED_NOTE
from gpuledger.engines.image.comfyui_messages import OUTPUT_CLASSES as OUTPUT_CLASSES
from gpuledger.engines.image.comfyui_messages import WS_DROPPED_NOTE as WS_DROPPED_NOTE
from gpuledger.engines.image.comfyui_messages import (
    Track,
    clip,
    fill_result,
    parse_message,
    read_history,
    rejection,
)
from gpuledger.engines.image.thumbs import thumbnail_of_bytes
from gpuledger.engines.image.workflow import Patched, Workflow, patch
from gpuledger.errors import EngineError
from gpuledger.kinds.image.spec import ImageSpec
from gpuledger.kinds.image.summary import NodeTime
from gpuledger.urls import redact_url

MAX_WS_MESSAGE = 16 * 1024**2
MAX_JSON_BYTES = 32 * 1024**2
MAX_VIEW_BYTES = 64 * 1024**2
HISTORY_POLL_S = 0.25
SAFETY_POLL_S = 5.0
RECONNECT_TRIES = 5
MAX_EARLY_PROMPTS = 64
MAX_EARLY_MESSAGES = 10_000
# Bytes of websocket text kept, over all prompts, for messages about prompts not registered yet: a server
# that sends messages about unknown prompts (or huge ones) costs at most this much memory.
MAX_EARLY_BYTES = 16 * 1024**2
MAX_SMALL_BYTES = 64 * 1024  # answers of /interrupt and /queue: read and dropped


class ComfyUIEngine:
    """See the module docstring."""

    name = "comfyui"

    def __init__(
        self,
        spec: ImageSpec,
        workflow: Workflow,
        *,
        request_timeout_s: float = 600.0,
        api_key: str | None = None,
    ) -> None:
        self.spec = spec
        self.workflow = workflow
        # node -> its class: read once (every websocket message of every prompt looks nodes up)
        self._classes: dict[str, str | None] = {k: workflow.class_of(k) for k in workflow.nodes}
        self.base_url = str(spec.base_url or "http://127.0.0.1:8188").rstrip("/")
        self.display_url = redact_url(self.base_url)
        self.model = spec.model or workflow.path
        self.request_timeout_s = request_timeout_s
        self.api_key = api_key
        self.client_id = uuid.uuid4().hex
        self.chunks_seen = 0
        self.reconnects = 0
        self.applied: list[str] = []
        self.unplaced: list[str] = []
        self._session: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._reader: asyncio.Task[None] | None = None
        self._tracks: dict[str, Track] = {}
        # Messages about prompts not registered yet: (when, the message's text), kept as text (its size is
        # what it costs) and parsed again when the prompt registers.
        self._early: dict[str, list[tuple[float, str]]] = {}
        self._early_sizes: dict[str, int] = {}  # characters of text kept per prompt
        self.early_bytes = 0  # their sum (at most MAX_EARLY_BYTES)
        self.early_dropped = 0  # early messages not kept (over the bounds)
        self._ws_up = asyncio.Event()
        self._closing = False
        self._system: dict[str, Any] = {}

    # -- lifecycle -------------------------------------------------------------------------------
    async def open(self, concurrency: int | None) -> ServerInfo:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else None
        self._session = aiohttp.ClientSession(headers=headers, timeout=aiohttp.ClientTimeout(total=None))
        try:
            stats = await self._get_json("/system_stats", timeout=10.0)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            await self.close()
            raise EngineError(
                f"{CANNOT_CONNECT} to ComfyUI at {self.display_url}: {clip(exc, 200)}",
                hint="start ComfyUI (python main.py --listen) or give --base-url",
            ) from exc
        if not isinstance(stats, dict) or not isinstance(stats.get("system"), dict):
            await self.close()
            raise EngineError(f"{self.display_url}/system_stats did not answer like ComfyUI (no 'system')")
        self._system = stats
        try:
            await self._connect_ws()
        except (aiohttp.ClientError, TimeoutError) as exc:
            await self.close()
            raise EngineError(
                f"{CANNOT_CONNECT} to ComfyUI's websocket at {self.display_url}/ws: {clip(exc, 200)}"
            ) from exc
        self._reader = asyncio.create_task(self._read_loop())
        system = stats["system"]
        raw_devices = stats.get("devices")
        devices: list[Any] = raw_devices if isinstance(raw_devices, list) else []
        return ServerInfo(
            kind="comfyui",
            version=clip(system.get("comfyui_version"), 64) if system.get("comfyui_version") else None,
            version_source="/system_stats system.comfyui_version",
            models=[self.model],
            details={
                "pytorch_version": clip(system.get("pytorch_version"), 64),
                "devices": [
                    {k: d.get(k) for k in ("name", "type", "vram_total", "torch_vram_total")}
                    for d in devices[:16]
                    if isinstance(d, dict)
                ],
            },
        )

    async def _connect_ws(self) -> None:
        assert self._session is not None
        url = self.base_url.replace("http", "ws", 1) + f"/ws?clientId={self.client_id}"
        self._ws = await self._session.ws_connect(
            url, max_msg_size=MAX_WS_MESSAGE, heartbeat=30.0, timeout=aiohttp.ClientWSTimeout(ws_close=5.0)
        )
        self._ws_up.set()

    async def after_run(self) -> dict[str, Any]:
        return {
            "comfyui": {
                "client_id": self.client_id,
                "websocket_reconnects": self.reconnects,
                "workflow": {
                    "path": self.workflow.path,
                    "sha256": self.workflow.sha256,
                    "nodes": len(self.workflow.nodes),
                },
                "settings_applied": self.applied[:50],
                "settings_not_placed": self.unplaced,
                **({"early_messages_dropped": (
                    f"{self.early_dropped} websocket messages about prompts this run had not queued (yet) "
                    f"were not kept: over {MAX_EARLY_PROMPTS} prompts, {MAX_EARLY_MESSAGES} messages of "
                    f"one or {MAX_EARLY_BYTES} bytes in all"
                )} if self.early_dropped else {}),
            }
        }

    async def close(self) -> None:
        self._closing = True
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        if self._ws is not None:
            await self._ws.close()
        if self._session is not None:
            await self._session.close()
        self._session = None

    # -- HTTP ------------------------------------------------------------------------------------
    async def _get_json(self, path: str, timeout: float = 30.0) -> Any:
        assert self._session is not None
        async with self._session.get(self.base_url + path, timeout=aiohttp.ClientTimeout(total=timeout)) as r:
            try:
                body = await read_body(r.content, MAX_JSON_BYTES, what=path)
            except TooLarge:
                raise ValueError(f"{path}: answer over {MAX_JSON_BYTES} bytes") from None
            if r.status != 200:
                raise ValueError(f"{path}: HTTP {r.status}")
            return json.loads(body)

    # -- the websocket ---------------------------------------------------------------------------
    async def _read_loop(self) -> None:
        while not self._closing:
            ws = self._ws
            if ws is not None:
                async for msg in ws:
                    if msg.type == aiohttp.WSMsgType.TEXT:
                        self._on_text(msg.data)
                    elif msg.type in (aiohttp.WSMsgType.ERROR, aiohttp.WSMsgType.CLOSE):
                        break
            if self._closing:
                return
            self._ws_up.clear()
            for track in self._tracks.values():
                if not track.done.is_set():
                    track.ws_lost = True
                    track.poke.set()
            await self._reconnect()

    async def _reconnect(self) -> None:
        for attempt in range(RECONNECT_TRIES):
            await asyncio.sleep(min(0.2 * 2**attempt, 5.0))
            try:
                await self._connect_ws()
            except (aiohttp.ClientError, TimeoutError):
                continue
            self.reconnects += 1
            return
        self._ws = None
        await asyncio.sleep(5.0)  # keep trying now and then; requests follow /history meanwhile

    def _on_text(self, text: str) -> None:
        parsed = parse_message(text)
        if parsed is None:
            return
        pid, kind, data = parsed
        now = time.perf_counter()
        track = self._tracks.get(pid)
        if track is None:
            self._keep_early(pid[:128], (now, text))
            return
        self._apply(track, kind, data, now)

    def _keep_early(self, pid: str, message: tuple[float, str]) -> None:
        """ComfyUI may start a prompt before its POST /prompt answer reaches us: keep its messages (with
        when they came) until the request registers it. Bounded: ``MAX_EARLY_MESSAGES`` per prompt,
        ``MAX_EARLY_PROMPTS`` prompts and ``MAX_EARLY_BYTES`` of text in all (the oldest prompts' messages
        are dropped first; a message larger than the whole budget is not kept)."""
        early = self._early.get(pid)
        size = len(message[1])
        if size > MAX_EARLY_BYTES or (early is not None and len(early) >= MAX_EARLY_MESSAGES):
            self.early_dropped += 1
            return
        if early is None:
            early = self._early[pid] = []
        early.append(message)
        self._early_sizes[pid] = self._early_sizes.get(pid, 0) + size
        self.early_bytes += size
        while len(self._early) > MAX_EARLY_PROMPTS or self.early_bytes > MAX_EARLY_BYTES:
            self._drop_early(next(iter(self._early)))

    def _drop_early(self, pid: str) -> list[tuple[float, str]]:
        messages = self._early.pop(pid, [])
        self.early_bytes -= self._early_sizes.pop(pid, 0)
        if pid in self._tracks:
            return messages
        self.early_dropped += len(messages)
        return messages

    def _apply(self, track: Track, kind: str, data: dict[str, Any], now: float) -> None:
        """One websocket message of ``track``'s prompt, received at ``now``."""
        if track.done.is_set():
            return
        classes = self._classes
        node = data.get("node")
        if kind == "execution_start":
            track.t_start = now
        elif kind == "execution_cached":
            for n in data.get("nodes") or []:
                if isinstance(n, str | int):
                    track.nodes.append(
                        NodeTime(node=str(n)[:64], class_type=classes.get(str(n)), cached=True)
                    )
        elif kind == "executing":
            track.close_node(now, classes)
            if node is None:
                track.t_end = track.t_end or now
            elif isinstance(node, str | int):
                track.current, track.current_since = str(node)[:64], now
        elif kind == "progress":
            if isinstance(data.get("value"), int):
                track.steps.append(now)
                self.chunks_seen += 1
                if isinstance(node, str | int):
                    track.progress_nodes.add(str(node))
                elif track.current is not None:
                    track.progress_nodes.add(track.current)
        elif kind == "executed":
            output = data.get("output")
            if isinstance(node, str | int) and isinstance(output, dict):
                track.outputs[str(node)[:64]] = output
        elif kind == "execution_success":
            track.close_node(now, classes)
            track.t_end = now
            track.finish()
        elif kind in ("execution_error", "execution_interrupted"):
            track.close_node(now, classes)
            track.t_end = now
            where = clip(data.get("node_id"), 64)
            what = clip(data.get("node_type"), 128)
            if kind == "execution_error":
                track.error = (
                    f"execution error at node {where} ({what}): "
                    f"{clip(data.get('exception_type'), 200)}: {clip(data.get('exception_message'))}"
                )
            else:
                track.error = f"interrupted at node {where} ({what})"
            track.error_node = f"{where} {what}"
            track.finish()

    # -- one request -----------------------------------------------------------------------------
    async def generate_image(self, req: ImageRequest) -> ImageResult:
        patched = patch(
            self.workflow,
            seed=req.seed,
            steps=req.steps,
            batch_size=req.batch_size if self.spec.batch_size else None,
            width=req.width,
            height=req.height,
            overrides=self.spec.node_overrides,
        )
        if not self.applied:
            self.applied, self.unplaced = patched.applied, patched.unplaced
        t_send = time.perf_counter()
        result = ImageResult(
            index=req.index,
            t_send=t_send,
            t_end=t_send,
            engine=self.name,
            stage=req.stage,
            width=patched.width,
            height=patched.height,
            steps=None,
        )
        try:
            pid = await self._queue(patched, result)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            result.t_end = time.perf_counter()
            result.error = f"{CANNOT_CONNECT} to {self.display_url}/prompt: {clip(exc, 200)}"
            return result
        if pid is None:
            result.t_end = time.perf_counter()
            return result
        track = Track(t_send=t_send)
        self._tracks[pid] = track
        for when, text in self._drop_early(pid):
            parsed = parse_message(text)
            if parsed is not None:
                self._apply(track, parsed[1], parsed[2], when)
        result.prompt_id = pid
        try:
            await self._follow(pid, track, result)
        except asyncio.CancelledError:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError, OSError):
                await self._interrupt(pid)
            raise
        finally:
            self._tracks.pop(pid, None)
        fill_result(result, track, patched)
        if req.keep_thumbnail and result.error is None:
            await self._thumbnail(result, track, req.index)
        return result

    async def _queue(self, patched: Patched, result: ImageResult) -> str | None:
        assert self._session is not None
        body = {"prompt": patched.nodes, "client_id": self.client_id}
        async with self._session.post(
            self.base_url + "/prompt", json=body, timeout=aiohttp.ClientTimeout(total=60.0)
        ) as r:
            try:
                raw = await read_body(r.content, MAX_JSON_BYTES, what="/prompt")
                doc = json.loads(raw) if raw else {}
            except (ValueError, TooLarge):
                doc = {}
            if r.status == 200 and isinstance(doc, dict) and isinstance(doc.get("prompt_id"), str):
                return str(doc["prompt_id"])[:128]
            result.error = rejection(r.status, doc)
            return None

    async def _follow(self, pid: str, track: Track, result: ImageResult) -> None:
        deadline = track.t_send + self.request_timeout_s
        while not track.done.is_set():
            left = deadline - time.perf_counter()
            if left <= 0:
                result.error = f"timeout: the prompt did not finish within {self.request_timeout_s:g} s"
                with contextlib.suppress(aiohttp.ClientError, TimeoutError, OSError):
                    await self._interrupt(pid)
                track.t_end = time.perf_counter()
                return
            wait = HISTORY_POLL_S if (track.ws_lost or not self._ws_up.is_set()) else SAFETY_POLL_S
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(track.poke.wait(), min(wait, left))
            track.poke.clear()
            if track.done.is_set():
                return
            with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError, OSError):
                if await self._from_history(pid, track):
                    return

    async def _from_history(self, pid: str, track: Track) -> bool:
        """Finish ``track`` from ``/history/{pid}`` when ComfyUI has it done; False when not yet."""
        doc = await self._get_json(f"/history/{pid}", timeout=10.0)
        return read_history(pid, doc, track)

    async def _interrupt(self, pid: str) -> None:
        assert self._session is not None
        for path, body in (("/interrupt", {"prompt_id": pid}), ("/queue", {"delete": [pid]})):
            async with self._session.post(
                self.base_url + path, json=body, timeout=aiohttp.ClientTimeout(total=5.0)
            ) as r:
                with contextlib.suppress(TooLarge):
                    await read_body(r.content, MAX_SMALL_BYTES, what=path)

    async def _thumbnail(self, result: ImageResult, track: Track, index: int) -> None:
        assert self._session is not None
        item = next(
            (
                i
                for out in track.outputs.values()
                for i in out.get("images") or []
                if isinstance(i, dict) and isinstance(i.get("filename"), str)
            ),
            None,
        )
        if item is None:
            return
        params = {
            "filename": item["filename"],
            "subfolder": str(item.get("subfolder") or ""),
            "type": str(item.get("type") or "output"),
        }
        try:
            async with self._session.get(
                self.base_url + "/view", params=params, timeout=aiohttp.ClientTimeout(total=30.0)
            ) as r:
                status = r.status
                blob = await read_body(r.content, MAX_VIEW_BYTES, what="/view")
        except TooLarge:
            result.notes.append(f"thumbnail not kept: /view answered more than {MAX_VIEW_BYTES} bytes")
            return
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            result.notes.append(f"thumbnail not kept: /view failed ({clip(exc, 100)})")
            return
        if status != 200:
            result.notes.append(f"thumbnail not kept: /view answered HTTP {status}")
            return
        result.output_bytes = len(blob)
        thumb, why = thumbnail_of_bytes(blob, index)
        if thumb is not None:
            result.thumbnails.append(thumb)
        elif why:
            result.notes.append(why)
