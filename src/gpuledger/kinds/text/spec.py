"""What a run of LLM inference was asked to do: against a server (``ServerSpec``: ``openai``, ``ollama``)
or with the in-process PyTorch engine (``TorchSpec``: ``torch``). The base every spec shares and the
dataset and load records are ``gpuledger.records.spec``; the in-process model's records
``gpuledger.records.torchspec``.

The in-process engine's spec. What was asked: ``model.spec`` (``dummy:NAME``, a folder or a Hugging Face
id), ``device`` and ``dtype`` (``auto`` until the engine chooses), ``batch_size`` (the concurrency),
``input_tokens`` / ``output_tokens``, ``requests_planned`` (whole batches), ``warmup``, ``seed``, ``slo``,
``max_duration_s`` (no new batch past it), ``memory_budget_bytes``. What the engine resolved when it opened:
the chosen ``device``, its ``device_name`` and ``build``, the ``dtype``, the planned ``model``,
``num_parameters``, ``kv_bytes_per_token``, ``memory_estimate``, ``cpu_threads``, ``generation``.

Schema-1 torch specs (before the spec was typed) kept the lengths and the seed in the run's workload and the
SLOs in its summary only: ``upgrade_v1`` reads them from there, leaving the stored form as it was.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar, Self

from pydantic import ConfigDict, Field, ValidationInfo, model_validator

from gpuledger.kinds.text.summary import TextGenerationSummary
from gpuledger.records.load import BatchStage, ConcurrencyStage, LoadSpec, Stage, SweepLoad, TraceLoad
from gpuledger.records.spec import (
    DEFAULT_CONCURRENCY,
    DEFAULT_NUM_REQUESTS,
    SLO_KEYS,
    BenchSpec,
    DatasetSpec,
    ModelArchitecture,
    TokenIdDataset,
    register_upgrade,
    slo_problem,
)
from gpuledger.records.specbase import SecretUrl, finite_positive
from gpuledger.records.torchspec import (
    WARMUP_OUTPUT_TOKENS,
    GenerationSettings,
    MemoryEstimate,
    TorchModelSpec,
)


class ServerSpec(BenchSpec):
    """A run against an inference server (``openai``, ``ollama``). ``base_url`` is kept whole (the run's
    requests use its credentials) and every dump shows it redacted (``user:***@``; ``records.specbase``);
    the API key itself is never part of the spec, only the variable holding it."""

    KIND: ClassVar[str] = "server"
    LEGACY_ENGINES: ClassVar[tuple[str, ...]] = ("openai", "ollama")

    base_url: SecretUrl | None = None
    model: str | None = None
    endpoint: str | None = None
    dataset: DatasetSpec | None = None
    load: LoadSpec | None = None
    num_requests_per_stage: int | None = None
    duration_s: float | None = None
    warmup: int | None = None
    slo: dict[str, float] | None = None
    telemetry_interval: float | None = Field(default=None, alias="telemetry_interval_s")
    server_metrics: bool | None = None
    server_metrics_interval_s: float | None = None
    request_timeout_s: float | None = None
    api_key_env: str | None = None
    seed: int | None = None
    sampling: str | None = None
    model_architecture: ModelArchitecture | None = None

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @model_validator(mode="after")
    def _flags(self, info: ValidationInfo) -> Self:
        endpoints = (info.context or {}).get("endpoints")
        if self.endpoint is not None and endpoints and self.endpoint not in endpoints:
            raise ValueError(
                f"--endpoint {self.endpoint} is not an endpoint of --engine {self.engine} "
                f"(choose {' or '.join(endpoints)})"
            )
        if self.num_requests_per_stage is not None and self.duration_s is not None:
            raise ValueError("give --num-requests or --duration, not both")
        if self.num_requests_per_stage is not None and self.num_requests_per_stage < 1:
            raise ValueError(f"--num-requests must be at least 1, got {self.num_requests_per_stage}")
        if not finite_positive(self.duration_s):
            raise ValueError(f"--duration must be a positive number of seconds, got {self.duration_s}")
        if self.warmup is not None and self.warmup < 0:
            raise ValueError(f"--warmup must be 0 or more, got {self.warmup}")
        if not finite_positive(self.request_timeout_s):
            raise ValueError(
                f"--request-timeout must be a positive number of seconds, got {self.request_timeout_s}"
            )
        if not finite_positive(self.server_metrics_interval_s):
            raise ValueError(
                "--server-metrics-interval must be a positive number of seconds, got "
                f"{self.server_metrics_interval_s}"
            )
        if not finite_positive(self.telemetry_interval):
            raise ValueError(
                f"--telemetry-interval must be a positive number of seconds, got {self.telemetry_interval}"
            )
        slo = slo_problem(self.slo)
        if slo:
            raise ValueError(slo)
        traced = self.dataset is not None and self.dataset.name == "trace"
        if traced != isinstance(self.load, TraceLoad) and (self.dataset is not None or self.load is not None):
            raise ValueError(
                "a trace replays its own arrivals: --trace FILE, with no --rate or --sweep"
                if traced else "--trace-speed replays a trace: give --trace FILE"
            )
        return self

    def dataset_spec(self) -> DatasetSpec | TokenIdDataset | None:
        return self.dataset if self.dataset is not None else DatasetSpec(seed=self.workload_seed())

    def stages(self) -> list[Stage]:
        if self.load is None:
            return [ConcurrencyStage(stage=f"c={DEFAULT_CONCURRENCY}", concurrency=DEFAULT_CONCURRENCY)]
        return self.load.run_stages()

    def requests_per_stage(self) -> int | None:
        if self.duration_s is not None:
            return None
        if self.num_requests_per_stage is None and isinstance(self.load, TraceLoad):
            return None  # a trace without a count replays every arrival it has
        return self.num_requests_per_stage or DEFAULT_NUM_REQUESTS

    def stage_duration_s(self) -> float | None:
        return self.duration_s

    def warmup_requests(self) -> int:
        return self.warmup or 0

    def slo_limits(self) -> dict[str, float]:
        return {k: float(v) for k, v in (self.slo or {}).items() if k in SLO_KEYS}

    def workload_seed(self) -> int:
        return self.seed or 0

    def summary_stages(self) -> list[dict[str, Any]] | None:
        if not isinstance(self.load, SweepLoad):
            return None
        return [s.params() for s in self.load.stages]

    def workload_record(self, meta: Mapping[str, Any], warmup: Mapping[str, Any]) -> dict[str, Any]:
        return {
            **meta,
            "load": self.load.model_dump(mode="json") if self.load is not None else None,
            "num_requests_per_stage": self.requests_per_stage(),
            "duration_s": self.duration_s,
            "warmup": dict(warmup),
        }

    def telemetry_interval_s(self) -> float:
        if self.telemetry is not None:
            return self.telemetry.interval_s
        return self.telemetry_interval if self.telemetry_interval is not None else 0.1

    def fixed_concurrency(self) -> int | None:
        return self.load.fixed_concurrency() if self.load is not None else None

    def records_server_metrics(self) -> bool | None:
        return self.server_metrics

    def single_process_reason(self) -> str | None:
        if isinstance(self.load, TraceLoad):
            return "a trace's schedule is replayed by one process (one clock for every arrival)"
        if self.dataset is not None and self.dataset.turns is not None:
            return "a session's turns follow each other's answers in one process"
        return None


class TorchSpec(TorchModelSpec):
    """A run of the in-process PyTorch engine (``engine: torch``); see the module docstring."""

    KIND: ClassVar[str] = "torch"
    LEGACY_ENGINES: ClassVar[tuple[str, ...]] = ("torch",)
    OBSERVED: ClassVar[tuple[str, ...]] = (
        *BenchSpec.OBSERVED, "device_name", "build", "cpu_threads", "memory_estimate.available_bytes",
        "memory_estimate.available_source", "memory_estimate.fits",
    )

    batch_size: int | None = None
    concurrency: int | None = None  # = batch_size: every sequence of a batch is in flight together
    input_tokens: int | None = None
    output_tokens: int | None = None
    requests_planned: int | None = None
    warmup: bool | None = None
    seed: int | None = None
    slo: dict[str, float] | None = None
    max_duration_s: float | None = None
    memory_budget_bytes: int | None = None
    device_name: str | None = None
    build: str | None = None
    num_parameters: int | None = None
    kv_bytes_per_token: int | None = None
    cpu_threads: int | None = None
    memory_estimate: MemoryEstimate | None = None
    generation: GenerationSettings | None = None

    @model_validator(mode="after")
    def _flags(self) -> Self:
        counts = (("--batch/--concurrency", self.batch_size), ("--input-tokens", self.input_tokens),
                  ("--output-tokens", self.output_tokens), ("--num-requests", self.requests_planned))
        for flag, value in counts:
            if value is not None and value < 1:
                raise ValueError(f"{flag} must be at least 1 (got {value})")
        self.check_model()
        cap = self.max_duration_s
        if cap is not None and not (math.isfinite(cap) and cap > 0):
            raise ValueError(f"the time cap must be a positive number of seconds, got {self.max_duration_s}")
        if self.memory_budget_bytes is not None and self.memory_budget_bytes < 0:
            raise ValueError(f"--memory-budget must be 0 or more, got {self.memory_budget_bytes}")
        slo = slo_problem(self.slo)
        if slo:
            raise ValueError(slo)
        return self

    @classmethod
    def whole_batches(cls, requests: int | None, batch_size: int) -> int:
        """``requests`` (default: one batch) rounded up to whole batches; a count under 1 stays as it is
        (the validator refuses it with the number given)."""
        n = requests if requests is not None else batch_size
        return math.ceil(n / batch_size) * batch_size if n >= 1 and batch_size >= 1 else n

    def token_lengths(self) -> tuple[int, int]:
        """(input, output) tokens per request (128 each when the spec does not say)."""
        return self.input_tokens or 128, self.output_tokens or 128

    def dataset_spec(self) -> DatasetSpec | TokenIdDataset | None:
        inp, out = self.token_lengths()
        return TokenIdDataset(input_tokens=inp, output_tokens=out, count=self.requests_per_stage() or 1,
                              seed=self.workload_seed())

    def stages(self) -> list[Stage]:
        batch = self.fixed_concurrency() or 1
        return [BatchStage(stage="", batch_size=batch, time_cap_s=self.max_duration_s)]

    def requests_per_stage(self) -> int | None:
        return self.requests_planned or self.fixed_concurrency() or 1

    def warmup_requests(self) -> int:
        return (self.fixed_concurrency() or 1) if self.warmup is not False else 0

    def warmup_output_tokens(self) -> int | None:
        return min(self.token_lengths()[1], WARMUP_OUTPUT_TOKENS)

    def slo_limits(self) -> dict[str, float]:
        return dict(self.slo or {})

    def workload_seed(self) -> int:
        return self.seed or 0

    def parameter_count(self) -> int | None:
        if self.num_parameters is not None:
            return self.num_parameters
        return self.model.params if self.model is not None else None

    def fixed_concurrency(self) -> int | None:
        return self.batch_size or self.concurrency


def upgrade_v1(spec: BenchSpec, workload: Mapping[str, Any], summary: Any) -> BenchSpec:
    """A schema-1 torch spec with its lengths and seed from the run's workload and its SLOs from the
    summary; the fields filled are left unset, so the spec dumps as it was stored."""
    if not isinstance(spec, TorchSpec):
        return spec
    filled: dict[str, Any] = {}
    for key in ("input_tokens", "output_tokens", "seed"):
        value = workload.get(key)
        if getattr(spec, key) is None and type(value) is int:
            filled[key] = value
    if spec.slo is None and isinstance(summary, TextGenerationSummary) and summary.slo is not None:
        filled["slo"] = summary.slo.limits()
    if not filled:
        return spec
    whole = TorchSpec.model_validate({**spec.model_dump(exclude_unset=True), **filled})
    return TorchSpec.model_construct(_fields_set=set(spec.model_fields_set), **dict(whole))


register_upgrade(TorchSpec.KIND, upgrade_v1)

