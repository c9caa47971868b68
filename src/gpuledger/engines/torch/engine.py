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
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import psutil

from gpuledger.engines.base import GenRequest, GenResult, ServerInfo
from gpuledger.engines.torch.device import (
    CpuThreads,
    DeviceInfo,
    ensure_fits,
    estimate_memory,
    fmt_params,
    peak_memory,
    peak_memory_reserved,
    reset_peak_memory,
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
from gpuledger.engines.torch.imports import import_torch, import_transformers
from gpuledger.engines.torch.models import LoadedModel, ModelPlan, check_positions, load_model, plan_model
from gpuledger.errors import EngineError
from gpuledger.facts.cpu import cpu_model_name
from gpuledger.quantity import Quantity
from gpuledger.records import BenchSpec, TorchSpec
from gpuledger.records.torchspec import GenerationSettings, MemoryEstimate
from gpuledger.tokenizer import Tokenizer


class TorchEngine:
    """See the module docstring. ``plan``: the model already planned (``gpuledger run`` chose it)."""

    name = "torch"

    def __init__(
        self, spec: TorchSpec, *, on_phase: Callable[[str], None] | None = None, plan: ModelPlan | None = None
    ) -> None:
        self.spec = spec
        self.on_phase = on_phase
        self.plan = plan
        self.chunks_seen = 0
        self.display_url: str | None = None
        self.warnings: list[str] = []
        self.device: DeviceInfo | None = None
        self.dtype: str | None = None
        self.estimate: MemoryEstimate | None = None
        self.loaded: LoadedModel | None = None
        self.peak: Quantity | None = None
        self.warmup_s = 0.0
        self._prompts: Any = None
        self._threads: CpuThreads | None = None
        self._stop = threading.Event()
        self._executor: ThreadPoolExecutor | None = None

    @property
    def model(self) -> str | None:
        """The name the run records (``dummy:qwen2.5-7b``, a folder's absolute path, a Hugging Face id)."""
        return self.plan.name if self.plan is not None else None

    @property
    def tokenizer(self) -> Tokenizer | None:
        return None

    def _say(self, text: str) -> None:
        if self.on_phase is not None:
            self.on_phase(text)

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
        if dev.fallback_reason and asked == "auto":
            self.warnings.append(f"running on the CPU: {dev.fallback_reason}")
        self._threads = CpuThreads(dev)
        if self._threads.note:
            self.warnings.append(self._threads.note)
        dev = replace(dev, cpu_threads=self._threads.threads)
        self.device, self.dtype, self.estimate = dev, dt, estimate
        self._say(f"{'building' if plan.kind == 'dummy' else 'loading'} {plan.name} "
                  f"({fmt_params(plan.params)} params, {dt}) on {dev.text()}")
        self.loaded = load_model(plan, dev, dt, seed=spec.workload_seed())
        count = spec.requests_per_stage() or batch
        self._prompts = make_prompts(self.loaded, count, inp, spec.workload_seed())
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpuledger-torch")
        reset_peak_memory(dev)
        torch = import_torch()
        return ServerInfo(
            kind="torch",
            version=str(torch.__version__),
            version_source="torch.__version__ (in-process engine)",
            models=[plan.name],
            accepts_ignore_eos=True,
            accepts_min_tokens=True,
            details=self._details(),
            warnings=list(self.warnings),
        )

    def _details(self) -> dict[str, Any]:
        loaded, dev = self._ready()
        details: dict[str, Any] = {
            "transformers": str(import_transformers().__version__),
            "build": dev.build,
            "device": dev.to_dict(),
            "dtype": loaded.dtype,
            "load_s": loaded.load_s,
        }
        return details

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
        cpu = self.device is not None and self.device.type == "cpu"
        return "in-process torch engine: the process's CPU time includes the model's computation" + (
            " (the run computes on the CPU)" if cpu else " (kernel launches, sampling)"
        )

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
        loop = asyncio.get_running_loop()
        fut = loop.run_in_executor(self._executor, generate_batch, loaded, ids, max_tokens, self._stop)
        try:
            timing = await fut
        except asyncio.CancelledError:
            self._stop.set()  # the batch ends at its next decode step
            await asyncio.wait([fut])
            if not fut.cancelled():
                with contextlib.suppress(BatchStopped):
                    fut.result()
            self._stop.clear()
            raise
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
        """The server record's details with the peak memory and the warm-up time, its warnings, and the host
        (for a CPU run, the compute device itself: cost scales CPU power and rental by its logical CPUs)."""
        _, dev = self._ready()
        self.peak = peak_memory(dev)
        details = {**self._details(), "warmup_s": self.warmup_s or None, "peak_memory": self.peak.to_dict()}
        reserved = peak_memory_reserved(dev)
        if reserved is not None:
            details["peak_memory_reserved"] = reserved.to_dict()
        cpu = {"model": cpu_model_name(), "logical_cpus": psutil.cpu_count(logical=True),
               "torch_threads": dev.cpu_threads}
        return {"details": details, "warnings": list(self.warnings), "cpu": cpu}

    async def close(self) -> None:
        self._stop.set()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        if self._threads is not None:
            self._threads.restore()
            self._threads = None
        dev = self.device
        self.loaded = None
        self._prompts = None
        if dev is not None and dev.type == "cuda":
            import_torch().cuda.empty_cache()
