"""A ComfyUI workflow in API format (``{node id: {"class_type", "inputs", "_meta"}}``, what ComfyUI's
"Export (API)" writes and ``POST /prompt`` takes): reading it as hostile input, and setting seed, steps,
batch size and image size where the workflow has them.

Where each setting goes (by node class; a node whose input is a link, not a literal, is left alone):

- seed: ``seed`` of ``KSampler``-like nodes, ``noise_seed`` of ``KSamplerAdvanced``, ``RandomNoise``,
  ``SamplerCustom``; each request gets its own seed;
- steps: ``steps`` of nodes whose class names a sampler or a scheduler (``KSampler``, ``KSamplerAdvanced``,
  ``BasicScheduler``, ``LTXVScheduler``, ...);
- batch size, width, height: ``batch_size`` / ``width`` / ``height`` of empty-latent nodes (class name
  with ``Empty`` and ``Latent``: ``EmptyLatentImage``, ``EmptySD3LatentImage``, ``EmptyLTXVLatentVideo``);
- ``--set NODE.INPUT=VALUE``: any input of the node with that id (after the rules above).

A setting the workflow has no place for is said once (``Patched.unplaced``), never silently dropped.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuledger.boundeddoc import load_json
from gpuledger.boundedio import read_file
from gpuledger.errors import InvalidInputError, UsageError
from gpuledger.kinds.image.spec import NodeOverride

MAX_WORKFLOW_BYTES = 16 * 1024**2
MAX_NODES = 10_000
_SAMPLER = re.compile(r"(Sampler|Scheduler)", re.IGNORECASE)
_SEED_KEYS = ("seed", "noise_seed")
OUTPUT_IMAGE_KEYS = ("images",)


@dataclass(slots=True)
class Workflow:
    """A checked API-format workflow, the file it came from and its sha256."""

    nodes: dict[str, dict[str, Any]]
    path: str
    sha256: str

    def class_of(self, node: str) -> str | None:
        entry = self.nodes.get(node)
        value = entry.get("class_type") if entry else None
        return value if isinstance(value, str) else None


@dataclass(slots=True)
class Patched:
    """The workflow of one request and what was set where (``"12 KSampler.steps = 20"``)."""

    nodes: dict[str, dict[str, Any]]
    applied: list[str] = field(default_factory=list)
    unplaced: list[str] = field(default_factory=list)
    batch_size: int | None = None
    width: int | None = None
    height: int | None = None
    steps: int | None = None


def load_workflow(path: Path) -> Workflow:
    """Read ``path`` as an API-format workflow. A UI-format file (``nodes``/``links``) is refused with how
    to export the API format; anything else that is not ``{id: {"class_type": str, "inputs": {...}}}`` is
    ``InvalidInputError`` (exit 4) naming the first problem."""
    try:
        raw = read_file(path, MAX_WORKFLOW_BYTES, what=f"--workflow {path}", text=True)  # /dev/zero too
    except OSError as exc:
        raise UsageError(f"--workflow {path}: cannot be read ({exc.strerror or exc})") from exc
    try:
        data = load_json(raw.decode("utf-8"), f"--workflow {path}")  # nesting bounded (boundeddoc)
    except UnicodeDecodeError as exc:
        raise InvalidInputError(f"--workflow {path}: not JSON ({exc})") from exc
    return Workflow(check_workflow(data, str(path)), str(path), hashlib.sha256(raw).hexdigest())


def check_workflow(data: Any, where: str) -> dict[str, dict[str, Any]]:
    if isinstance(data, dict) and "nodes" in data and "links" in data:
        raise UsageError(
            f"--workflow {where} is in ComfyUI's UI format (nodes and links), not the API format that "
            "POST /prompt takes: in ComfyUI choose Workflow → Export (API) and give that file"
        )
    if isinstance(data, dict) and isinstance(data.get("prompt"), dict) and "class_type" not in data:
        data = data["prompt"]  # a saved /prompt request body
    if not isinstance(data, dict) or not data:
        raise InvalidInputError(f"--workflow {where}: not a non-empty JSON object of nodes")
    if len(data) > MAX_NODES:
        raise InvalidInputError(f"--workflow {where}: {len(data)} nodes, over the {MAX_NODES} allowed")
    for node_id, node in data.items():
        if not isinstance(node, dict):
            raise InvalidInputError(f"--workflow {where}: node {node_id!r} is not an object")
        cls = node.get("class_type")
        if not isinstance(cls, str) or not cls:
            raise InvalidInputError(f"--workflow {where}: node {node_id!r} has no class_type")
        inputs = node.get("inputs", {})
        if not isinstance(inputs, dict):
            raise InvalidInputError(f"--workflow {where}: node {node_id!r} ({cls}): inputs is not an object")
        for name, value in inputs.items():
            if isinstance(value, list) and not _is_link(value):
                raise InvalidInputError(
                    f"--workflow {where}: node {node_id!r} ({cls}) input {name!r}: a list that is not a link "
                    "[node id, output index]"
                )
            if _is_link(value) and str(value[0]) not in data:
                raise InvalidInputError(
                    f"--workflow {where}: node {node_id!r} ({cls}) input {name!r} links to node "
                    f"{value[0]!r}, which the workflow does not have"
                )
    return {str(k): v for k, v in data.items()}


def _is_link(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) == 2
        and isinstance(value[0], str | int)
        and not isinstance(value[0], bool)
        and type(value[1]) is int
    )


def _literal_int(inputs: dict[str, Any], key: str) -> bool:
    value = inputs.get(key)
    return type(value) is int


def is_latent_source(cls: str) -> bool:
    return "Empty" in cls and "Latent" in cls


def patch(
    wf: Workflow,
    *,
    seed: int | None,
    steps: int | None,
    batch_size: int | None,
    width: int | None,
    height: int | None,
    overrides: list[NodeOverride] | None = None,
) -> Patched:
    """The workflow with the settings given (None: left as the workflow has it)."""
    nodes = copy.deepcopy(wf.nodes)
    out = Patched(nodes)
    placed: dict[str, bool] = {
        "seed": False,
        "steps": False,
        "batch size": False,
        "width": False,
        "height": False,
    }

    def put(node_id: str, key: str, value: Any, what: str) -> None:
        nodes[node_id]["inputs"][key] = value
        out.applied.append(f"{node_id} {nodes[node_id]['class_type']}.{key} = {value}")
        placed[what] = True

    for node_id, node in nodes.items():
        cls = str(node["class_type"])
        inputs = node.setdefault("inputs", {})
        if seed is not None:
            for key in _SEED_KEYS:
                if _literal_int(inputs, key):
                    put(node_id, key, seed, "seed")
        if steps is not None and _SAMPLER.search(cls) and _literal_int(inputs, "steps"):
            put(node_id, "steps", steps, "steps")
        if is_latent_source(cls):
            for key, value, what in (
                ("batch_size", batch_size, "batch size"),
                ("width", width, "width"),
                ("height", height, "height"),
            ):
                if value is not None and _literal_int(inputs, key):
                    put(node_id, key, value, what)
    for ov in overrides or []:
        if ov.node not in nodes:
            raise UsageError(f"--set {ov.node}.{ov.input}: the workflow has no node {ov.node!r}")
        nodes[ov.node].setdefault("inputs", {})[ov.input] = ov.value
        out.applied.append(f"{ov.node} {nodes[ov.node]['class_type']}.{ov.input} = {ov.value!r}")
        for what, key in (
            ("seed", "seed"),
            ("seed", "noise_seed"),
            ("steps", "steps"),
            ("batch size", "batch_size"),
            ("width", "width"),
            ("height", "height"),
        ):
            if ov.input == key:
                placed[what] = True
    asked = {"seed": seed, "steps": steps, "batch size": batch_size, "width": width, "height": height}
    for what, value in asked.items():
        if value is not None and not placed[what]:
            out.unplaced.append(
                f"the workflow has no node that takes a literal {what} (KSampler, an empty-latent node, "
                "...): it runs with its own; give --set NODE.INPUT=VALUE to choose the node"
            )
    out.batch_size, out.width, out.height, out.steps = _read_back(nodes)
    return out


def _read_back(nodes: dict[str, dict[str, Any]]) -> tuple[int | None, int | None, int | None, int | None]:
    """The batch size, width and height of the first empty-latent node and the steps of the first
    sampler, as the request will run them (None where the workflow does not say)."""
    batch = width = height = steps = None
    for node in nodes.values():
        cls = str(node.get("class_type"))
        inputs = node.get("inputs") or {}
        if is_latent_source(cls) and batch is None and "Audio" not in cls:
            batch = inputs.get("batch_size") if type(inputs.get("batch_size")) is int else None
            width = inputs.get("width") if type(inputs.get("width")) is int else None
            height = inputs.get("height") if type(inputs.get("height")) is int else None
        if steps is None and _SAMPLER.search(cls) and type(inputs.get("steps")) is int:
            steps = inputs["steps"]
    return batch, width, height, steps


def parse_override(text: str) -> NodeOverride:
    """``12.steps=30`` / ``6.text="a cat"`` -> ``NodeOverride`` (the value read as JSON when it is JSON)."""
    left, sep, value = text.partition("=")
    node, dot, name = left.partition(".")
    if not (sep and dot and node.strip() and name.strip()):
        raise UsageError(f"--set {text!r}: write NODE_ID.INPUT=VALUE (e.g. --set 3.cfg=6.5)")
    parsed: Any
    try:
        parsed = json.loads(value)
    except ValueError:
        parsed = value
    if not isinstance(parsed, int | float | str | bool):
        raise UsageError(f"--set {text!r}: the value must be a number, a string or true/false")
    return NodeOverride(node=node.strip(), input=name.strip(), value=parsed)
