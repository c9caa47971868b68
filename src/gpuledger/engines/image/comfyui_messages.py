"""What ComfyUI says about one queued prompt, read for ``--engine comfyui`` (``comfyui.py``, the engine,
holds the HTTP and websocket client): the prompt's track (what its websocket messages said so far), a
websocket text message parsed, a refused ``POST /prompt`` in one line, a prompt finished from
``/history/{prompt_id}``, and the request's result filled from its track (times, steps, nodes, images,
notes). The protocol and how each time is measured: ``comfyui.py``'s docstring."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

from gpuledger.engines.image.base import ImageResult
from gpuledger.engines.image.workflow import OUTPUT_IMAGE_KEYS, Patched
from gpuledger.kinds.image.summary import NodeTime

OUTPUT_CLASSES = ("SaveImage", "PreviewImage")
CACHED_NOTE = (
    "ComfyUI served this prompt from its cache (every node but the outputs was cached: the same inputs ran "
    "before): it did no denoising — give another --seed"
)
WS_DROPPED_NOTE = (
    "the websocket dropped while this prompt ran: its end is when /history showed it done (an upper bound), "
    "its queue wait and execution are ComfyUI's own timestamps, its per-node times are missing"
)


@dataclass(slots=True)
class Track:
    """What the websocket said about one prompt so far (perf_counter times)."""

    t_send: float
    t_start: float | None = None
    t_end: float | None = None
    current: str | None = None
    current_since: float | None = None
    nodes: list[NodeTime] = field(default_factory=list)
    progress_nodes: set[str] = field(default_factory=set)
    steps: list[float] = field(default_factory=list)
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    error: str | None = None
    error_node: str | None = None
    ws_lost: bool = False
    # (created, execution_start, end) from /history, server clock, seconds
    history: tuple[float | None, float | None, float | None] | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    poke: asyncio.Event = field(default_factory=asyncio.Event)  # done, or the websocket dropped

    def finish(self) -> None:
        self.done.set()
        self.poke.set()

    def close_node(self, now: float, classes: dict[str, str | None]) -> None:
        if self.current is not None and self.current_since is not None:
            self.nodes.append(
                NodeTime(
                    node=self.current,
                    class_type=classes.get(self.current),
                    seconds=max(now - self.current_since, 0.0),
                )
            )
        self.current, self.current_since = None, None


def clip(value: Any, limit: int = 500) -> str:
    return str(value)[:limit]


def read_history(pid: str, doc: Any, track: Track) -> bool:
    """Finish ``track`` from ``doc``, ``/history/{pid}``'s answer, when ComfyUI has it done; False when not
    yet."""
    entry = doc.get(pid) if isinstance(doc, dict) else None
    status = entry.get("status") if isinstance(entry, dict) else None
    if (
        not isinstance(status, dict)
        or not status.get("completed")
        and status.get("status_str") != "error"
    ):
        return False
    now = time.perf_counter()
    track.ws_lost = track.ws_lost or not track.done.is_set()
    stamps: dict[str, float] = {}
    for item in status.get("messages") or []:
        if isinstance(item, list) and len(item) == 2 and isinstance(item[1], dict):
            ts = item[1].get("timestamp")
            if isinstance(ts, int | float) and not isinstance(ts, bool):
                stamps[str(item[0])] = float(ts) / 1000.0
            if item[0] == "execution_error" and track.error is None:
                data = item[1]
                track.error = (
                    f"execution error at node {clip(data.get('node_id'), 64)} "
                    f"({clip(data.get('node_type'), 128)}): {clip(data.get('exception_type'), 200)}"
                    f": {clip(data.get('exception_message'))}"
                )
                track.error_node = f"{clip(data.get('node_id'), 64)} {clip(data.get('node_type'), 128)}"
    if status.get("status_str") == "error" and track.error is None:
        track.error = "execution error (ComfyUI's history has no details)"
    prompt = entry.get("prompt") if isinstance(entry, dict) else None
    created = None
    if isinstance(prompt, list) and len(prompt) > 3 and isinstance(prompt[3], dict):
        ct = prompt[3].get("create_time")
        created = float(ct) / 1000.0 if isinstance(ct, int | float) and not isinstance(ct, bool) else None
    start, end = (
        stamps.get("execution_start"),
        stamps.get("execution_success") or stamps.get("execution_error"),
    )
    track.history = (created, start, end)
    outputs = entry.get("outputs") if isinstance(entry, dict) else None
    if isinstance(outputs, dict):
        for node, out in outputs.items():
            if isinstance(out, dict):
                track.outputs.setdefault(str(node)[:64], out)
    track.t_end = track.t_end or now
    track.finish()
    return True


def fill_result(result: ImageResult, track: Track, patched: Patched) -> None:
    """``result`` from what ``track`` holds: times, steps, nodes, images and notes."""
    result.t_end = track.t_end or time.perf_counter()
    result.error = result.error or track.error
    result.error_node = track.error_node
    if track.ws_lost and track.history is not None:
        created, start, end = track.history
        result.notes.append(WS_DROPPED_NOTE)
        if created is not None and start is not None:
            result.queue_wait_s = max(start - created, 0.0)
        if start is not None and end is not None:
            result.execution_s = max(end - start, 0.0)
    else:
        if track.t_start is not None:
            result.queue_wait_s = track.t_start - track.t_send
            result.execution_s = max(result.t_end - track.t_start, 0.0)
        result.nodes = track.nodes or None
    result.step_end = list(track.steps)
    result.steps = len(track.steps) if track.steps else None
    timed = [n.seconds for n in track.nodes if n.node in track.progress_nodes and n.seconds is not None]
    result.denoise_s = sum(timed) if timed else None
    files: list[str] = []
    saved = temp = 0
    for out in track.outputs.values():
        for key in OUTPUT_IMAGE_KEYS:
            for item in out.get(key) or []:
                if isinstance(item, dict) and isinstance(item.get("filename"), str):
                    files.append(item["filename"][:200])
                    if item.get("type") == "output":
                        saved += 1
                    else:
                        temp += 1
    result.images = saved or temp
    result.outputs = files[:100] or None
    others = sorted({k for out in track.outputs.values() for k in out if k not in OUTPUT_IMAGE_KEYS})
    if result.error is None and not result.images:
        result.notes.append(
            "the workflow produced no images"
            + (f" (its outputs: {', '.join(o[:40] for o in others[:5])})" if others else "")
        )
    ran = [n for n in track.nodes if not n.cached]
    if (
        result.error is None
        and track.nodes
        and not track.steps
        and all(n.class_type in OUTPUT_CLASSES or n.cached for n in track.nodes)
        and len(ran) < len(track.nodes)
    ):
        result.notes.append(CACHED_NOTE)
    result.notes.extend(patched.unplaced)


def parse_message(text: str) -> tuple[str, str, dict[str, Any]] | None:
    """A websocket text message as (prompt id, type, data); None when it is not one about a prompt."""
    try:
        msg = json.loads(text)
    except ValueError:
        return None
    if not isinstance(msg, dict) or not isinstance(msg.get("data"), dict):
        return None
    kind, data = msg.get("type"), msg["data"]
    pid = data.get("prompt_id")
    if not isinstance(pid, str) or not isinstance(kind, str):
        return None
    return pid, kind, data


def rejection(status: int, doc: Any) -> str:
    """A refused ``POST /prompt`` in one line: ComfyUI's error and the first node error."""
    if not isinstance(doc, dict):
        return f"prompt rejected: HTTP {status}"
    err = doc.get("error")
    text = f"prompt rejected (HTTP {status})"
    if isinstance(err, dict):
        text += f": {clip(err.get('message'), 200)}"
        if err.get("details"):
            text += f": {clip(err.get('details'), 300)}"
    elif isinstance(err, str):
        text += f": {clip(err, 300)}"
    nodes = doc.get("node_errors")
    if isinstance(nodes, dict):
        for node_id, info in list(nodes.items())[:1]:
            errs = info.get("errors") if isinstance(info, dict) else None
            if isinstance(errs, list) and errs and isinstance(errs[0], dict):
                text += (
                    f"; node {clip(node_id, 64)} ({clip(info.get('class_type'), 128)}): "
                    f"{clip(errs[0].get('message'), 200)}: {clip(errs[0].get('details'), 200)}"
                )
    return text
