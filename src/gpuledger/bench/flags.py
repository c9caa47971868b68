"""The typed spec of a bench run, built from the command line's values (``gpuledger bench``), by spec kind.

The values make the spec's document first (``flags_document``), which is validated into the spec
(``spec_of``) — after ``bench --like`` filled in the stored workload, when it is a repeat: a flag given
alone (``--dataset-path``) is then checked together with the stored values it goes with.

``FLAG_FIELDS`` says which spec fields each workload flag sets (``--output-len`` → ``dataset.output_len``
for a server run, ``output_tokens`` for the in-process engine): what ``bench --like`` copies from a stored
run when the flag is not given, and compares when it is. ``server_spec`` and ``torch_spec`` make complete
specs for library callers (tests, ``gpuledger run``, the benchmarks).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gpuledger.bench.image_flags import image_from
from gpuledger.bench.metrics import parse_slo
from gpuledger.bench.train_flags import TRAIN_FLAG_FIELDS, TRAIN_REPEAT_NEEDS, train_from
from gpuledger.engines import EngineKind, engine_kind
from gpuledger.errors import UsageError
from gpuledger.kinds.image.spec import ImageSpec
from gpuledger.kinds.text.spec import ServerSpec, TorchSpec
from gpuledger.kinds.train.spec import TrainSpec
from gpuledger.records import BenchSpec
from gpuledger.records.spec import DEFAULT_NUM_REQUESTS, checked, settled
from gpuledger.records.workloads import parse_turns
from gpuledger.urls import parse_server_url
from gpuledger.workload.load import load_from_flags, parse_sweep

SAMPLING = "server defaults (no temperature/top_p sent)"

FLAG_FIELDS: dict[type[BenchSpec], dict[str, tuple[str, ...]]] = {
    ServerSpec: {
        "endpoint": ("endpoint",),
        "dataset": ("dataset.name",),
        "dataset_path": ("dataset.path",),
        "input_len": ("dataset.input_len",),
        "output_len": ("dataset.output_len",),
        "range_ratio": ("dataset.range_ratio",),
        # issue 23's workloads (records/workloads.py): sessions, shared prefixes, trace replay
        "turns": ("dataset.turns",),
        "think_time": ("dataset.think_time_s",),
        "prefix_len": ("dataset.prefix_len",),
        "prefix_groups": ("dataset.prefix_groups",),
        "prefix_ratio": ("dataset.prefix_ratio",),
        "trace": ("dataset.name", "dataset.path", "load", "num_requests_per_stage"),
        "trace_speed": ("load",),
        # A load pattern or a count given on the command line replaces the stored one whole.
        "concurrency": ("load",),
        "rate": ("load",),
        "sweep": ("load",),
        "num_requests": ("num_requests_per_stage", "duration_s"),
        "duration": ("num_requests_per_stage", "duration_s"),
        "warmup": ("warmup",),
        "seed": ("seed", "dataset.seed"),
        "slo": ("slo",),
        "request_timeout": ("request_timeout_s",),
        "telemetry_interval": ("telemetry_interval_s", "telemetry.interval_s"),
        "model_config": ("model_architecture",),
    },
    TorchSpec: {
        "model": ("model.spec",),
        "concurrency": ("batch_size", "concurrency"),
        "input_len": ("input_tokens",),
        "output_len": ("output_tokens",),
        "num_requests": ("requests_planned",),
        "warmup": ("warmup",),
        "seed": ("seed",),
        "slo": ("slo",),
    },
}

FLAG_FIELDS[ImageSpec] = {  # bench --task image (bench/image_flags.py)
    "model": ("model",),
    "workflow": ("workflow", "workflow_sha256"),
    "set": ("node_overrides",),
    "prompt": ("prompt",),
    "negative_prompt": ("negative_prompt",),
    "steps": ("steps",),
    "height": ("height",),
    "width": ("width",),
    "batch_size": ("batch_size",),
    "guidance": ("guidance",),
    "scheduler": ("scheduler",),
    "num_images": ("num_images",),
    "num_requests": ("num_images",),
    "concurrency": ("concurrency",),
    "warmup": ("warmup",),
    "seed": ("seed",),
    "request_timeout": ("request_timeout_s",),
}

# What a stored spec must record for ``--like`` to repeat its workload.
REPEAT_NEEDS: dict[type[BenchSpec], tuple[str, ...]] = {
    ServerSpec: ("dataset", "load"),
    TorchSpec: ("model.spec", "batch_size", "input_tokens", "output_tokens", "requests_planned"),
    ImageSpec: ("num_images",),
}
FLAG_FIELDS[TrainSpec] = TRAIN_FLAG_FIELDS  # bench --task train (bench/train_flags.py)
REPEAT_NEEDS[TrainSpec] = TRAIN_REPEAT_NEEDS


def server_document(
    engine: str = "openai",
    *,
    base_url: str | None = None,
    model: str | None = None,
    endpoint: str | None = None,
    dataset: str | None = None,
    dataset_path: Path | None = None,
    input_len: int | None = None,
    output_len: int | None = None,
    range_ratio: float = 0.0,
    concurrency: int | None = None,
    rate: float | None = None,
    sweep: tuple[int, ...] = (),
    num_requests: int | None = None,
    duration_s: float | None = None,
    warmup: int = 0,
    seed: int = 0,
    slo: Mapping[str, float] | None = None,
    label: str = "",
    telemetry: bool = True,
    telemetry_interval_s: float = 0.1,
    server_metrics: bool = False,
    server_metrics_interval_s: float | None = None,
    request_timeout_s: float = 300.0,
    api_key_env: str = "OPENAI_API_KEY",
    model_config: Path | None = None,
    turns: int | str | None = None,
    think_time_s: float | None = None,
    prefix_len: int | None = None,
    prefix_groups: int | None = None,
    prefix_ratio: float | None = None,
    trace: Path | None = None,
    trace_speed: float | None = None,
) -> dict[str, Any]:
    """The document of a run against a server (the same defaults as ``gpuledger bench``, but no warm-up);
    ``UsageError`` with the flag's one line for a bad load. ``turns`` .. ``trace_speed``: sessions, shared
    prefixes and trace replay (records/workloads.py), in the dataset only when given."""
    kind = engine_kind(engine)
    extra = {"model_architecture": model_architecture(model_config)} if model_config is not None else {}
    if trace is not None:
        if dataset not in (None, "trace") or dataset_path is not None:
            raise UsageError(
                "--trace FILE is the run's dataset: do not give --dataset or --dataset-path with it"
            )
        dataset, dataset_path = "trace", trace
    traced = dataset == "trace"
    shared = prefix_len is not None or prefix_ratio is not None or prefix_groups is not None
    workload = {k: v for k, v in (("turns", turns), ("think_time_s", think_time_s),
                                  ("prefix_len", prefix_len), ("prefix_groups", prefix_groups),
                                  ("prefix_ratio", prefix_ratio)) if v is not None}
    counted = num_requests is not None or duration_s is not None
    return {
        **extra,
        "engine": kind.name,
        "base_url": base_url or kind.default_base_url,
        "model": model,
        "endpoint": endpoint or kind.default_endpoint,
        "dataset": {
            "name": dataset or ("random" if input_len is not None or shared else "builtin"),
            "path": dataset_path,
            "input_len": input_len,
            "output_len": output_len,
            "range_ratio": range_ratio,
            "seed": seed,
            **workload,
        },
        "load": load_from_flags(concurrency, rate, sweep, trace=traced,
                                trace_speed=trace_speed).model_dump(mode="json"),
        # A trace without a count replays every arrival it has.
        "num_requests_per_stage": num_requests if counted else None if traced else DEFAULT_NUM_REQUESTS,
        "duration_s": duration_s,
        "warmup": warmup,
        "slo": dict(slo or {}),
        "label": label,
        "telemetry": {"enabled": telemetry, "interval_s": telemetry_interval_s},
        "telemetry_interval_s": telemetry_interval_s,
        "server_metrics": server_metrics,
        "server_metrics_interval_s": server_metrics_interval_s,
        "request_timeout_s": request_timeout_s,
        "api_key_env": api_key_env,
        "seed": seed,
        "sampling": SAMPLING,
    }


MAX_MODEL_CONFIG_BYTES = 2_000_000


def model_architecture(path: Path) -> dict[str, Any]:
    """``--model-config PATH``: the config.json (of a folder, or the file) as a mapping to store with the run;
    one line for a file that is missing, too large or not a JSON object (its numbers are checked when
    ``cost`` computes the MBU: cost/pricing/modelarch.py)."""
    file = path / "config.json" if path.is_dir() else path
    if not file.is_file():
        raise UsageError(f"--model-config {path}: no such file (a model folder with config.json, or it)")
    try:
        if file.stat().st_size > MAX_MODEL_CONFIG_BYTES:
            raise UsageError(f"--model-config {file}: over {MAX_MODEL_CONFIG_BYTES:,} bytes: not a config")
        doc = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"--model-config {file}: not a readable JSON file ({type(exc).__name__})") from exc
    if not isinstance(doc, dict):
        raise UsageError(f"--model-config {file}: not a JSON object")
    return {"path": str(file.resolve()), "config": doc}


def server_spec(engine: str = "openai", **values: Any) -> ServerSpec:
    """A complete, validated server spec (``server_document``'s arguments); ``UsageError`` for a bad value."""
    spec = spec_of(engine_kind(engine), server_document(engine, **values))
    assert isinstance(spec, ServerSpec)
    return spec


def torch_document(
    model: str | None,
    *,
    device: str = "auto",
    dtype: str = "auto",
    batch_size: int = 1,
    input_tokens: int = 128,
    output_tokens: int = 128,
    num_requests: int | None = None,
    warmup: bool = True,
    seed: int = 0,
    slo: Mapping[str, float] | None = None,
    label: str = "",
    telemetry: bool = True,
    telemetry_interval_s: float = 0.1,
    max_duration_s: float | None = None,
    memory_budget_bytes: int | None = None,
) -> dict[str, Any]:
    """The document of an in-process run: ``num_requests`` (default: one batch) rounded up to whole
    batches of ``batch_size``, each request ``input_tokens`` token ids in, exactly ``output_tokens`` out."""
    return {
        "engine": "torch",
        "label": label,
        "model": {"spec": model.strip()} if model is not None else None,
        "device": device,
        "dtype": dtype,
        "batch_size": batch_size,
        "concurrency": batch_size,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "requests_planned": TorchSpec.whole_batches(num_requests, batch_size),
        "warmup": warmup,
        "seed": seed,
        "slo": dict(slo or {}),
        "max_duration_s": max_duration_s,
        "memory_budget_bytes": memory_budget_bytes,
        "telemetry": {"enabled": telemetry, "interval_s": telemetry_interval_s},
    }


def torch_spec(model: str | None, **values: Any) -> TorchSpec:
    """A complete, validated in-process spec (``torch_document``'s arguments)."""
    spec = spec_of(engine_kind("torch"), torch_document(model, **values))
    assert isinstance(spec, TorchSpec)
    return spec


def spec_of(kind: EngineKind, document: Mapping[str, Any]) -> BenchSpec:
    """The validated spec of a document for an engine of ``kind``: the first problem is a ``UsageError``
    with the flag's one line; every field of the document counts as set (a new run stores them all)."""
    return settled(checked(kind.spec, document, {"endpoints": tuple(kind.endpoints)}))


def _server_from(kind: EngineKind, v: Mapping[str, Any]) -> dict[str, Any]:
    if v.get("device") is not None or v.get("dtype") is not None:
        raise UsageError("--device and --dtype are for --engine torch only")
    return server_document(
        kind.name, base_url=v["base_url"], model=v["model"], endpoint=v["endpoint"], dataset=v["dataset"],
        dataset_path=v["dataset_path"], input_len=v["input_len"], output_len=v["output_len"],
        range_ratio=v["range_ratio"], concurrency=v["concurrency"], rate=v["rate"],
        sweep=parse_sweep(v["sweep"]), num_requests=v["num_requests"], duration_s=v["duration"],
        warmup=v["warmup"], seed=v["seed"], slo=parse_slo(v["slo"]), label=v["label"],
        telemetry=v["telemetry"], telemetry_interval_s=v["telemetry_interval"],
        server_metrics=v["server_metrics"], server_metrics_interval_s=v["server_metrics_interval"],
        request_timeout_s=v["request_timeout"], api_key_env=v["api_key_env"],
        model_config=v.get("model_config"), turns=parse_turns_flag(v.get("turns")),
        think_time_s=v.get("think_time"), prefix_len=v.get("prefix_len"),
        prefix_groups=v.get("prefix_groups"), prefix_ratio=v.get("prefix_ratio"), trace=v.get("trace"),
        trace_speed=v.get("trace_speed"),
    )


WORKLOAD_FLAGS = ("turns", "think_time", "prefix_len", "prefix_groups", "prefix_ratio", "trace",
                  "trace_speed")


def parse_turns_flag(text: str | None) -> int | str | None:
    """``--turns all|N`` (``UsageError`` with the flag's line otherwise)."""
    try:
        return parse_turns(text)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _torch_from(kind: EngineKind, v: Mapping[str, Any]) -> dict[str, Any]:
    if any(v.get(k) is not None for k in ("base_url", "endpoint", "dataset", "dataset_path")):
        raise UsageError("--engine torch runs in-process: --base-url, --endpoint and --dataset do not apply")
    if any(v.get(k) is not None for k in ("rate", "sweep", "duration")):
        raise UsageError("--engine torch supports --concurrency (the batch size) and --num-requests only")
    if v["warmup"] < 0:
        raise UsageError(f"--warmup must be 0 or more, got {v['warmup']}")
    if v.get("model_config") is not None:
        raise UsageError("--model-config is for a server run; --engine torch records the model it builds")
    asked = [f for f in WORKLOAD_FLAGS if v.get(f) is not None]
    if asked:
        flag = "--" + asked[0].replace("_", "-")
        raise UsageError(f"{flag} shapes a server run's workload, not --engine torch's")
    return torch_document(
        v["model"], device=v.get("device") or "auto", dtype=v.get("dtype") or "auto",
        batch_size=v["concurrency"] or 1, input_tokens=v["input_len"] or 128,
        output_tokens=v["output_len"] or 128, num_requests=v["num_requests"], warmup=v["warmup"] > 0,
        seed=v["seed"], slo=parse_slo(v["slo"]), label=v["label"], telemetry=v["telemetry"],
        telemetry_interval_s=v["telemetry_interval"],
    )


_BUILDERS: dict[type[BenchSpec], Callable[[EngineKind, Mapping[str, Any]], dict[str, Any]]] = {
    ServerSpec: _server_from,
    TorchSpec: _torch_from,
    ImageSpec: image_from,
    TrainSpec: train_from,
}


def flags_document(kind: EngineKind, values: Mapping[str, Any]) -> dict[str, Any]:
    """The spec document ``gpuledger bench``'s values ask for, for an engine of ``kind`` (not validated yet:
    ``spec_of``). Values a repeat may still supply (``--like``: the in-process engine's model) can be
    missing here: ``require`` checks them once the spec is whole."""
    return _BUILDERS[kind.spec](kind, values)


def require(spec: BenchSpec) -> None:
    """``UsageError`` when the spec still lacks what the run needs (after ``--like`` filled it in), or has a
    server URL that is not one (``--base-url 127.0.0.1:8000``: no scheme) — a bad value, not the engine's
    error, refused before anything is opened."""
    if isinstance(spec, ServerSpec | ImageSpec) and spec.base_url is not None:
        try:
            parse_server_url(spec.base_url)
        except ValueError as exc:
            raise UsageError(f"--base-url {exc}") from None
    if isinstance(spec, ImageSpec) and spec.engine == "comfyui" and not spec.workflow:
        raise UsageError("--engine comfyui needs --workflow FILE.json (a workflow in ComfyUI's API format)")
    if isinstance(spec, TorchSpec) and spec.model is None:
        raise UsageError("--engine torch needs --model (dummy:NAME, a directory, or a Hugging Face id)")
    if isinstance(spec, TrainSpec) and spec.model is None:
        raise UsageError("--task train needs --model (dummy:NAME or a model folder)")
