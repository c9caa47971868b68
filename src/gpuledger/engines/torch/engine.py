"""The in-process PyTorch engine: a real transformer on the best device this machine has, behind the same
``Engine`` protocol as the HTTP engines, so that it runs through the bench's one run lifecycle (window,
telemetry, writer, interruption, failure: ``bench/runner.py``).

- ``open`` plans the model (``dummy:NAME``, a folder or a Hugging Face id), picks the device and dtype,
  estimates the memory the run needs and refuses a model that cannot fit (``ResourceError``, with the
  numbers) before anything is loaded, loads it and draws the prompts: ``requests_planned`` rows of
  ``input_tokens`` token ids from its vocabulary (seeded). Request ``i`` is row ``i`` (the runner's warm-up
  requests, with negative indexes, wrap around to the last rows).
- ``generate_batch`` generates a batch of requests together, every sequence in flight at once and one token
  per decode step each, with a forced output length; each result keeps its own per-token times. It runs on
  the engine's own thread, so the event loop stays free for signals: a cancelled batch stops within one
  decode step (its requests never finished and are not recorded).
- ``after_run`` adds the allocator's peak, the warm-up time and the host's CPU to the run's server record
  (PyTorch is the "server"); ``close`` releases the model and puts PyTorch's thread count back.
- ``report`` is what the engine resolved and measured, typed (``TorchReport``: the planned model, the device,
  the dtype, the memory estimate, the allocator's peak), read by ``gpuledger run`` after the run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuledger.engines.base import GenRequest, GenResult, ServerInfo
from gpuledger.engines.torch.device import (
    DeviceInfo,
    ensure_fits,
    estimate_memory,
    fmt_params,
    peak_memory,
    resolve_dtype,
    select_device,
)
from gpuledger.engines.torch.generate import (
    GENERATION,
    BatchStopped,
    BatchTiming,
    generate_batch,
    make_prompts,
)
from gpuledger.engines.torch.imports import import_torch
from gpuledger.engines.torch.inprocess import InProcessEngine
from gpuledger.engines.torch.models import LoadedModel, ModelPlan, check_positions, load_model, plan_model
from gpuledger.errors import EngineError
from gpuledger.kinds.text.spec import TorchSpec
from gpuledger.quantity import Quantity
from gpuledger.records import BenchSpec
from gpuledger.records.torchspec import GenerationSettings, MemoryEstimate


@dataclass(frozen=True, slots=True)
class TorchReport:
    """What the engine resolved when it opened and measured when the run ended: the model it planned, the
    device and dtype it chose, the memory it estimated and the allocator's peak over the run."""

    plan: ModelPlan
    device: DeviceInfo
    dtype: str
    estimate: MemoryEstimate
    peak_memory: Quantity


class TorchEngine(InProcessEngine):
    """See the module docstring. ``plan``: the model already planned (``gpuledger run`` chose it)."""

    name = "torch"

    def __init__(
        self, spec: TorchSpec, *, on_phase: Callable[[str], None] | None = None, plan: ModelPlan | None = None
    ) -> None:
        super().__init__(on_phase, plan)
        self.spec = spec
        self.estimate: MemoryEstimate | None = None
        self.loaded: LoadedModel | None = None
        self.peak: Quantity | None = None
        self._prompts: Any = None

    async def open(self, concurrency: int | None) -> ServerInfo:
        """Plan, check, load; nothing is stored yet, so every refusal here leaves no run behind."""
        spec = self.spec
        if self.plan is None:
            self._say(f"planning {spec.model_spec}")
            self.plan = plan_model(spec.model_spec)
        plan = self.plan
        batch = spec.fixed_concurrency() or 1
        inp, out = spec.token_lengths()
        check_positions(plan, inp, out)
        asked = spec.device or "auto"
        dev = select_device(asked)
        dt = resolve_dtype(spec.dtype or "auto", dev)
        budget = spec.memory_budget_bytes
        estimate = estimate_memory(plan.params, plan.shape, dt, batch, inp, out, dev, budget)
        ensure_fits(plan.name, plan.params, estimate, dev)
        dev = self._settle(dev, asked)
        self.device, self.dtype, self.estimate = dev, dt, estimate
        self._say(f"{'building' if plan.kind == 'dummy' else 'loading'} {plan.name} "
                  f"({fmt_params(plan.params)} params, {dt}) on {dev.text()}")
        self.loaded = load_model(plan, dev, dt, seed=spec.workload_seed())
        count = spec.requests_per_stage() or batch
        self._prompts = make_prompts(self.loaded, count, inp, spec.workload_seed())
        self._start(dev, "gpuledger-torch")
        return self._server_info(plan, self._details(), forced_length=True)

    def _details(self) -> dict[str, Any]:
        loaded, dev = self._ready()
        return {**self._device_details(dev), "dtype": loaded.dtype, "load_s": loaded.load_s}

    def _ready(self) -> tuple[LoadedModel, DeviceInfo]:
        if self.loaded is None or self.device is None:
            raise EngineError("the torch engine was used before open()")
        return self.loaded, self.device

    def resolved(self, spec: BenchSpec) -> BenchSpec:
        """``spec`` with what ``open`` chose: the device, its name and build, the dtype, the planned model,
        its size, the memory estimate, PyTorch's threads and how it generates."""
        loaded, dev = self._ready()
        plan = loaded.plan
        out = self.spec.token_lengths()[1]
        return spec.model_copy(update={
            "device": dev.torch_device,
            "device_name": dev.name,
            "build": dev.build,
            "dtype": loaded.dtype,
            "num_parameters": plan.params,
            "kv_bytes_per_token": plan.shape.kv_bytes_per_token(loaded.dtype),
            "model": plan.record(),
            "memory_estimate": self.estimate,
            "cpu_threads": dev.cpu_threads,
            "generation": GenerationSettings(min_new_tokens=out, max_new_tokens=out, **GENERATION),
        })

    def client_note(self) -> str:
        includes = "the model's computation"
        return self._client_note("in-process torch engine", includes, "kernel launches, sampling")

    async def generate(self, req: GenRequest) -> GenResult:
        """One request: a batch of one."""
        return (await self.generate_batch([req]))[0]

    async def generate_batch(self, reqs: list[GenRequest]) -> list[GenResult]:
        loaded, _ = self._ready()
        if not reqs:
            return []
        torch = import_torch()
        rows = torch.tensor([r.index % len(self._prompts) for r in reqs])
        ids = self._prompts.index_select(0, rows)
        max_tokens = max(r.max_tokens for r in reqs)
        # Cancelled, the batch ends at its next decode step; the next batch runs.
        timing = await self._on_thread(
            (BatchStopped,), True, generate_batch, loaded, ids, max_tokens, self._stop
        )
        if reqs[0].index < 0:  # the runner's warm-up (not measured)
            self.warmup_s += timing.t_end - timing.t_send
        results = self._results(reqs, timing, int(ids.shape[1]), max_tokens)
        self.chunks_seen += sum(len(r.chunk_times) for r in results)
        return results

    @staticmethod
    def _results(reqs: list[GenRequest], timing: BatchTiming, input_tokens: int,
                 max_tokens: int) -> list[GenResult]:
        """One result per sequence: the batch's send time, its step times up to the sequence's length."""
        out: list[GenResult] = []
        for req, n in zip(reqs, timing.output_lengths, strict=True):
            times = timing.step_times[:n]
            out.append(GenResult(
                index=req.index,
                t_send=timing.t_send,
                t_end=times[-1] if times else timing.t_end,
                chunk_times=times,
                input_tokens=input_tokens,
                output_tokens=n,
                token_source="engine",
                requested_output_tokens=max_tokens,
                error=None if times else "no token generated",
                stage=req.stage,
            ))
        return out

    async def after_run(self) -> dict[str, Any]:
        """The server record's details with the peak memory and the warm-up time, its warnings, and the
        host."""
        _, dev = self._ready()
        self.peak = peak_memory(dev)
        details = {**self._details(), "warmup_s": self.warmup_s or None, "peak_memory": self.peak.to_dict()}
        self._reserved_peak(details, dev)
        return self._run_record(dev, details)

    def report(self) -> TorchReport:
        """``TorchReport`` of the run this engine made; ``EngineError`` before it opened and ran."""
        if (self.plan is None or self.device is None or self.dtype is None or self.estimate is None
                or self.peak is None):
            raise EngineError("the torch engine did not report its device and memory (it has not run)")
        return TorchReport(self.plan, self.device, self.dtype, self.estimate, self.peak)

    async def close(self) -> None:
        self._stop.set()
        self._shutdown_thread()
        self.loaded = None
        self._prompts = None
        self._release()
