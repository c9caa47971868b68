"""``gpuledger bench --task text``'s options as one typed model (``TextOptions``), and the specs they make: a
run against a server (``openai``, ``ollama``: ``ServerSpec``) or of the in-process engine (``torch``:
``TorchSpec``).

The model is validated once, when the command line is parsed (``bench.options.options_of``): each option's
type and bound (``bench.bounds``' table, with the sentences the specs have always used for a value below
them), the options only a server run takes (refused for ``--engine torch`` with one line, and ``--device``
/ ``--dtype`` for a server), ``--trace`` against ``--dataset``, the textual forms parsed (``--sweep 1,4,16``,
``--slo ttft_ms=500``, ``--turns all``). What the spec's fields must be together is the spec's
(``kinds/text/spec.py``), checked once ``bench --like`` has filled the stored workload in.

``FLAG_FIELDS`` says which spec fields each option sets (``--output-len`` → ``dataset.output_len`` for a
server run, ``output_tokens`` for the in-process engine): what ``bench --like`` copies from a stored run when
the option is not given, and compares when it is. ``server_spec`` and ``torch_spec`` make complete specs for
library callers (tests, ``gpuledger run``, the benchmarks, the matrix).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal, Self

from pydantic import Field, field_validator, model_validator

from gpuledger.bench.bounds import (
    BOUNDS,
    MAX_SWEEP_STAGES,
    TORCH_BOUNDS,
    Bound,
)
from gpuledger.bench.metrics import parse_slo
from gpuledger.bench.options import (
    MAX_NAME,
    TaskOptions,
    at_least_one,
    bound_problem,
    first,
    positive_seconds,
    spec_of,
    warmup_sentence,
)
from gpuledger.boundeddoc import NotADocument, load_json
from gpuledger.engines import EngineKind, engine_kind
from gpuledger.errors import UsageError
from gpuledger.kinds.text.spec import ServerSpec, TorchSpec
from gpuledger.records import BenchSpec
from gpuledger.records.spec import DEFAULT_NUM_REQUESTS
from gpuledger.records.workloads import parse_turns
from gpuledger.urls import parse_server_url
from gpuledger.workload.load import load_from_flags, parse_sweep

SAMPLING = "server defaults (no temperature/top_p sent)"
MAX_MODEL_CONFIG_BYTES = 2_000_000

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

# What a stored spec must record for ``--like`` to repeat its workload.
REPEAT_NEEDS: dict[type[BenchSpec], tuple[str, ...]] = {
    ServerSpec: ("dataset", "load"),
    TorchSpec: ("model.spec", "batch_size", "input_tokens", "output_tokens", "requests_planned"),
}

# The options that shape a server run's workload (records/workloads.py): not --engine torch's.
WORKLOAD_OPTIONS = ("turns", "think_time", "prefix_len", "prefix_groups", "prefix_ratio", "trace",
                    "trace_speed")


class TextOptions(TaskOptions):
    """The options of ``gpuledger bench --task text`` (the module docstring says what is checked here)."""

    TASK: ClassVar[str] = "text"

    engine: str = Field(default="openai", max_length=128)
    base_url: str | None = Field(default=None, max_length=MAX_NAME)
    model: str | None = Field(default=None, max_length=MAX_NAME)
    architecture: Path | None = Field(default=None, alias="model_config")
    endpoint: str | None = Field(default=None, max_length=64)
    dataset: str | None = Field(default=None, max_length=64)
    dataset_path: Path | None = None
    input_len: int | None = None
    output_len: int | None = None
    range_ratio: float = 0.0
    turns: int | Literal["all"] | None = None
    think_time: float | None = None
    prefix_len: int | None = None
    prefix_groups: int | None = None
    prefix_ratio: float | None = None
    trace: Path | None = None
    trace_speed: float | None = None
    concurrency: int | None = None
    rate: float | None = None
    sweep: tuple[int, ...] = ()
    num_requests: int | None = None
    duration: float | None = None
    warmup: int = 1
    seed: int | None = None
    slo: dict[str, float] = Field(default_factory=dict)
    server_metrics: bool = False
    server_metrics_interval: float | None = None
    request_timeout: float = 300.0
    api_key_env: str = Field(default="OPENAI_API_KEY", max_length=256)
    device: str | None = Field(default=None, max_length=32)
    dtype: str | None = Field(default=None, max_length=16)

    @field_validator("sweep", mode="before")
    @classmethod
    def _sweep(cls, value: Any) -> Any:
        return _parsed(parse_sweep, value) if isinstance(value, str) or value is None else value

    @field_validator("slo", mode="before")
    @classmethod
    def _slo(cls, value: Any) -> Any:
        return _parsed(parse_slo, value) if isinstance(value, str) or value is None else value

    @field_validator("turns", mode="before")
    @classmethod
    def _turns(cls, value: Any) -> Any:
        return parse_turns(value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _options(self) -> Self:
        problem = self.torch_problem() if self.in_process() else self.server_problem()
        problem = problem or self.bounds_problem()
        if problem:
            raise ValueError(problem)
        return self

    def in_process(self) -> bool:
        """Does the engine compute in this process (``torch``), not a server?"""
        try:
            return engine_kind(self.engine).spec is TorchSpec
        except UsageError as exc:
            raise ValueError(exc.message) from None

    def server_problem(self) -> str | None:
        if self.device is not None or self.dtype is not None:
            return "--device and --dtype are for --engine torch only"
        if self.trace is not None and (self.dataset not in (None, "trace") or self.dataset_path is not None):
            return "--trace FILE is the run's dataset: do not give --dataset or --dataset-path with it"
        return None

    def torch_problem(self) -> str | None:
        if any(v is not None for v in (self.base_url, self.endpoint, self.dataset, self.dataset_path)):
            return "--engine torch runs in-process: --base-url, --endpoint and --dataset do not apply"
        if self.rate is not None or self.sweep or self.duration is not None:
            return "--engine torch supports --concurrency (the batch size) and --num-requests only"
        if self.warmup < 0:
            return f"--warmup must be 0 or more, got {self.warmup}"
        if self.architecture is not None:
            return "--model-config is for a server run; --engine torch records the model it builds"
        asked = [f for f in WORKLOAD_OPTIONS if getattr(self, f) is not None]
        if asked:
            return f"--{asked[0].replace('_', '-')} shapes a server run's workload, not --engine torch's"
        return None

    def bounds_problem(self) -> str | None:
        """The first option outside its bound (``bench.bounds``: the in-process engine's batch is smaller)."""
        b = TORCH_BOUNDS if self.in_process() else BOUNDS
        sweep = self.sweep
        return first((
            bound_problem(b["--concurrency"], self.concurrency, at_least_one("--concurrency")),
            bound_problem(b["--rate"], self.rate, lambda v: (
                f"--rate must be a positive number of requests per second, got {v}" if v <= 0 else None)),
            f"--sweep runs at most {MAX_SWEEP_STAGES} stages, got {len(sweep)}"
            if len(sweep) > MAX_SWEEP_STAGES else None,
            *(bound_problem(b["--sweep"], c, lambda v: (
                "--sweep values must be concurrencies of at least 1" if v < 1 else None)) for c in sweep),
            bound_problem(b["--num-requests"], self.num_requests, at_least_one("--num-requests")),
            bound_problem(b["--duration"], self.duration, positive_seconds("--duration")),
            bound_problem(b["--warmup"], self.warmup, warmup_sentence),
            bound_problem(b["--input-len"], self.input_len, at_least_one("--input-len")),
            bound_problem(b["--output-len"], self.output_len, at_least_one("--output-len")),
            None if 0.0 <= self.range_ratio < 1.0
            else f"--range-ratio must be in [0, 1), got {self.range_ratio}",
            bound_problem(b["--seed"], self.seed),
            bound_problem(b["--request-timeout"], self.request_timeout,
                          positive_seconds("--request-timeout")),
            self.telemetry_problem(),
            bound_problem(b["--server-metrics-interval"], self.server_metrics_interval,
                          positive_seconds("--server-metrics-interval")),
            *(bound_problem(Bound(f"--slo {k}", b["--slo"].low, b["--slo"].high, b["--slo"].unit), v)
              for k, v in self.slo.items()),
            *workload_bounds(self),
        ))

    def document(self, kind: EngineKind) -> dict[str, Any]:
        if kind.spec is TorchSpec:
            return torch_document(
                self.model, device=self.device or "auto", dtype=self.dtype or "auto",
                batch_size=self.concurrency or 1, input_tokens=self.input_len or 128,
                output_tokens=self.output_len or 128, num_requests=self.num_requests, warmup=self.warmup > 0,
                seed=self.seed or 0, slo=self.slo, label=self.label, telemetry=self.telemetry,
                telemetry_interval_s=self.telemetry_interval,
            )
        return server_document(
            kind.name, base_url=self.base_url, model=self.model, endpoint=self.endpoint, dataset=self.dataset,
            dataset_path=self.dataset_path, input_len=self.input_len, output_len=self.output_len,
            range_ratio=self.range_ratio, concurrency=self.concurrency, rate=self.rate, sweep=self.sweep,
            num_requests=self.num_requests, duration_s=self.duration, warmup=self.warmup, seed=self.seed or 0,
            slo=self.slo, label=self.label, telemetry=self.telemetry,
            telemetry_interval_s=self.telemetry_interval, server_metrics=self.server_metrics,
            server_metrics_interval_s=self.server_metrics_interval, request_timeout_s=self.request_timeout,
            api_key_env=self.api_key_env, model_config=self.architecture, turns=self.turns,
            think_time_s=self.think_time, prefix_len=self.prefix_len, prefix_groups=self.prefix_groups,
            prefix_ratio=self.prefix_ratio, trace=self.trace, trace_speed=self.trace_speed,
        )


OPTIONS = TextOptions


def _parsed(parse: Any, value: str | None) -> Any:
    try:
        return parse(value)
    except UsageError as exc:
        raise ValueError(exc.message) from None


def workload_bounds(o: TextOptions) -> list[str | None]:
    """The bounds of the workload options alone (``records/workloads.py`` says what they mean together)."""
    from gpuledger.records.load import TRACE_SPEEDS
    from gpuledger.records.workloads import MAX_PREFIX_GROUPS, MAX_PREFIX_TOKENS, MAX_THINK_TIME_S, MAX_TURNS

    low, high = TRACE_SPEEDS
    return [
        f"--turns must be all or 1 to {MAX_TURNS}, got {o.turns}"
        if isinstance(o.turns, int) and not 1 <= o.turns <= MAX_TURNS else None,
        f"--think-time must be 0 to {MAX_THINK_TIME_S:g} seconds, got {o.think_time}"
        if o.think_time is not None and not 0.0 <= o.think_time <= MAX_THINK_TIME_S else None,
        f"--prefix-groups must be 1 to {MAX_PREFIX_GROUPS:,}, got {o.prefix_groups}"
        if o.prefix_groups is not None and not 1 <= o.prefix_groups <= MAX_PREFIX_GROUPS else None,
        f"--prefix-ratio must be between 0 and 1 (the share of each prompt), got {o.prefix_ratio}"
        if o.prefix_ratio is not None and not 0.0 < o.prefix_ratio < 1.0 else None,
        f"--prefix-len must be 1 to {MAX_PREFIX_TOKENS:,} tokens, got {o.prefix_len}"
        if o.prefix_len is not None and not 1 <= o.prefix_len <= MAX_PREFIX_TOKENS else None,
        f"--trace-speed must be {low:g} to {high:g} (times the recorded pace), got {o.trace_speed}"
        if o.trace_speed is not None and not low <= o.trace_speed <= high else None,
    ]


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


def model_architecture(path: Path) -> dict[str, Any]:
    """``--model-config PATH``: the config.json (of a folder, or the file) as a mapping to store with the run;
    one line for a file that is missing, too large or not a JSON object (its numbers are checked when
    ``cost`` computes the MBU: cost/modelarch.py)."""
    file = path / "config.json" if path.is_dir() else path
    if not file.is_file():
        raise UsageError(f"--model-config {path}: no such file (a model folder with config.json, or it)")
    try:
        if file.stat().st_size > MAX_MODEL_CONFIG_BYTES:
            raise UsageError(f"--model-config {file}: over {MAX_MODEL_CONFIG_BYTES:,} bytes: not a config")
        doc = load_json(file.read_text(encoding="utf-8"), f"--model-config {file}")  # nesting bounded
    except (OSError, UnicodeDecodeError, NotADocument) as exc:
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


def require(spec: BenchSpec) -> str | None:
    """What a text spec still lacks once ``--like`` filled it in, or a server URL that is not one
    (``--base-url 127.0.0.1:8000``: no scheme); None: nothing."""
    if isinstance(spec, ServerSpec) and spec.base_url is not None:
        try:
            parse_server_url(spec.base_url)
        except ValueError as exc:
            return f"--base-url {exc}"
    if isinstance(spec, TorchSpec) and spec.model is None:
        return "--engine torch needs --model (dummy:NAME, a directory, or a Hugging Face id)"
    return None


__all__ = [
    "FLAG_FIELDS",
    "OPTIONS",
    "REPEAT_NEEDS",
    "SAMPLING",
    "TextOptions",
    "model_architecture",
    "require",
    "server_document",
    "server_spec",
    "torch_document",
    "torch_spec",
]
