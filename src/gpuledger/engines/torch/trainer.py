"""The in-process training engine (``torch-train``: ``bench --task train --engine torch``): a real model
trained on the best device this machine has, behind the same ``Engine`` protocol as every engine, so that a
training run goes through the bench's one run lifecycle (``bench/runner.py``: window, telemetry, store writer,
interruption, failure). Each runner request is one optimizer step; its result is stored as the step's record.

- ``open`` plans the model, picks the device (``cuda:LOCAL_RANK`` under torchrun) and the dtype, estimates
  the memory a step needs and refuses (``ResourceError``, exit 8, with the figures) before anything is built
  — every rank checks its own device and they refuse together; joins the process group when there are
  several ranks; builds or loads the model in fp32, wraps it for data parallelism, compiles it when asked;
  reads the data file; looks up one device's peak FLOP/s at the dtype for the MFU.
- ``generate`` runs one step on the engine's own thread (the event loop stays free for signals); a
  single-process step asked to stop ends before its next micro-batch and is not recorded. On the CPU, the
  last warm-up step runs under PyTorch's profiler to read the CPU allocator's peak (the GPU's is
  ``torch.cuda.max_memory_allocated``).
- ``follow`` is what the other ranks run: the steps rank 0 names, until it says stop (``distributed.Group``).
- ``close`` tells the other ranks to stop, leaves the process group, releases the model.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable
from typing import Any

from gpuledger.engines.base import GenRequest, GenResult, ServerInfo
from gpuledger.engines.torch import trainplan
from gpuledger.engines.torch.device import DeviceInfo, fmt_params, peak_memory, resolve_dtype, select_device
from gpuledger.engines.torch.distributed import DistEnv, Group, dist_env, host_name
from gpuledger.engines.torch.imports import import_torch
from gpuledger.engines.torch.inprocess import InProcessEngine
from gpuledger.engines.torch.models import LoadedModel, ModelPlan, load_model, plan_model
from gpuledger.engines.torch.traindata import load_tokens
from gpuledger.engines.torch.trainstep import (
    ATTENTION,
    StepResult,
    StepStopped,
    TokenSource,
    TrainState,
    build_state,
    cpu_allocator_peak,
    train_step,
)
from gpuledger.errors import EngineError, Interrupted, InvalidInputError, ResourceError, UsageError
from gpuledger.kinds.train.spec import (
    DEFAULT_LEARNING_RATE,
    RankDevice,
    TrainData,
    TrainMemoryEstimate,
    TrainSpec,
)
from gpuledger.kinds.train.summary import TrainStep
from gpuledger.quantity import Quantity
from gpuledger.records import BenchSpec

NAME = "torch-train"


class TrainEngine(InProcessEngine):
    """See the module docstring. ``env``: this process's place in a multi-process run (default: read from the
    launcher's variables)."""

    name = NAME

    def __init__(
        self,
        spec: TrainSpec,
        *,
        on_phase: Callable[[str], None] | None = None,
        env: DistEnv | None | bool = True,
    ) -> None:
        super().__init__(on_phase)
        self.spec = spec
        self.env: DistEnv | None = dist_env() if env is True else (env or None)
        self.estimate: TrainMemoryEstimate | None = None
        self.state: TrainState | None = None
        self.group: Group | None = None
        self.ranks: list[RankDevice] = []
        self.data: TrainData = spec.data or TrainData()
        self.peak: tuple[float | None, str] = (None, "the engine was not opened")
        self.cpu_peak: Quantity | None = None
        self.warmup_first_s: float | None = None

    # -- what the runner reads ------------------------------------------------------------------------
    @property
    def rank(self) -> int:
        return self.env.rank if self.env is not None else 0

    @property
    def world_size(self) -> int:
        return self.env.world_size if self.env is not None else 1

    # -- open -----------------------------------------------------------------------------------------
    async def open(self, concurrency: int | None) -> ServerInfo:
        spec = self.spec
        self._say(f"planning {spec.model_spec}")
        self.plan = plan = plan_model(spec.model_spec)
        seq = spec.sequence_length()
        limit = plan.shape.max_positions
        if limit is not None and seq > limit:
            raise InvalidInputError(
                f"{plan.name} handles at most {limit} positions; --seq-len {seq} is longer"
            )
        if self.data.kind == "file" and plan.kind == "dummy":
            raise UsageError(
                f"--data needs the model folder's tokenizer: {plan.name} is a built-in architecture without "
                "one (give a model folder, or leave --data out for random token ids)"
            )
        asked = spec.device or "auto"
        if self.env is not None and asked != "cpu":
            dev = select_device("auto" if asked == "auto" else asked, index=self.env.local_rank)
        else:
            dev = select_device(asked)
        if self.env is not None and dev.type == "cuda":
            import_torch().cuda.set_device(dev.torch_device)
        dt = resolve_dtype(spec.dtype or "auto", dev)
        optimizer = spec.optimizer or "adamw"
        est = trainplan.estimate_training_memory(
            plan.params,
            plan.shape,
            dtype=dt,
            optimizer=optimizer,
            micro_batch=spec.micro_batch(),
            seq_len=seq,
            checkpointing=bool(spec.activation_checkpointing),
            device=dev,
        )
        if self.env is not None:
            self._say(f"joining the process group: rank {self.rank} of {self.world_size}")
            self.group = Group(self.env, dev.type)
            refused = self.group.all_fit(est.fits)
            if refused and est.fits:
                raise ResourceError(
                    f"{refused} other rank(s) of {self.world_size} do not have the memory for "
                    f"{plan.name}: every rank refuses the run"
                )
        self._ensure_fits(plan, est, dev)
        dev = self._settle(dev, asked)
        self.device, self.dtype, self.estimate = dev, dt, est
        self._say(
            f"{'building' if plan.kind == 'dummy' else 'loading'} {plan.name} "
            f"({fmt_params(plan.params)} params, fp32 weights, {dt} compute) on {dev.text()}"
        )
        loaded = load_model(plan, dev, "fp32", seed=spec.workload_seed())
        tokens = self._data(plan, loaded)
        self.state = build_state(
            loaded,
            dtype=dt,
            optimizer=optimizer,
            learning_rate=spec.learning_rate or DEFAULT_LEARNING_RATE,
            checkpointing=bool(spec.activation_checkpointing),
            compile_model=bool(spec.compile),
            data=TokenSource(
                vocab=plan.shape.vocab_size,
                seed=spec.workload_seed(),
                batch=spec.micro_batch(),
                seq_len=seq,
                accum=spec.accumulation(),
                world=self.world_size,
                tokens=tokens,
            ),
            accum=spec.accumulation(),
            group=self.group,
        )
        self.peak = trainplan.peak_flops(dev, dt)
        mine = {
            "rank": self.rank,
            "local_rank": self.env.local_rank if self.env is not None else 0,
            "device": dev.torch_device,
            "name": dev.name,
            "host": host_name(),
        }
        gathered = self.group.gather(mine) if self.group is not None else [mine]
        self.ranks = [RankDevice.model_validate(d) for d in gathered]
        self._start(dev, "gpuledger-train")
        return self._server_info(plan, self._details())

    def _ensure_fits(self, plan: ModelPlan, est: TrainMemoryEstimate, dev: DeviceInfo) -> None:
        if est.fits:
            return
        where = "RAM" if dev.type == "cpu" else "GPU memory"
        other = est.total_with(not est.checkpointing)
        fits_other = est.available_bytes is not None and other <= est.available_bytes
        hint = (
            "--activation-checkpointing would make it fit"
            if fits_other and not est.checkpointing
            else "a smaller --model, --batch-size or --seq-len, --activation-checkpointing, --optimizer sgd, "
            "or a device with more memory"
        )
        raise ResourceError(
            f"training {plan.name} ({fmt_params(plan.params)} params, {est.dtype}, {est.optimizer}) does not "
            "fit "
            f"in the {where} of {dev.name}: {est.text()}",
            hint=hint,
        )

    def _data(self, plan: ModelPlan, loaded: LoadedModel) -> Any:
        spec = self.spec
        if self.data.kind != "file" or self.data.path is None:
            return None
        per_step = spec.micro_batch() * spec.accumulation() * self.world_size * spec.sequence_length()
        needed = per_step * (spec.requests_per_stage() + spec.warmup_requests())
        self._say(f"tokenising {self.data.path}")
        got = load_tokens(self.data.path, plan.source, needed, plan.shape.vocab_size)
        if int(got.ids.shape[0]) < spec.sequence_length():
            raise InvalidInputError(
                f"--data {self.data.path}: {int(got.ids.shape[0])} tokens, fewer than one sequence of "
                "--seq-len "
                f"{spec.sequence_length()}"
            )
        if got.skipped_lines:
            self.warnings.append(
                f"--data: {got.skipped_lines} line(s) left out; the first: {got.first_problem}"
            )
        self.data = TrainData(
            kind="file",
            path=got.path,
            format=got.format,
            sha256=got.sha256,
            tokens=int(got.ids.shape[0]),
            tokenizer=got.tokenizer,
            epochs=round(got.epochs, 4),
        )
        return got.ids

    def _details(self) -> dict[str, Any]:
        state, dev = self._ready()
        return {
            **self._device_details(dev),
            "dtype": self.dtype,
            "weights_dtype": "fp32",
            "load_s": state.loaded.load_s,
            "world_size": self.world_size,
            "dist_backend": self.group.backend if self.group is not None else None,
        }

    def _ready(self) -> tuple[TrainState, DeviceInfo]:
        if self.state is None or self.device is None:
            raise EngineError("the training engine was used before open()")
        return self.state, self.device

    def resolved(self, spec: BenchSpec) -> BenchSpec:
        """``spec`` with what ``open`` chose (the module docstring lists it)."""
        state, dev = self._ready()
        plan = state.loaded.plan
        peak, why = self.peak
        return spec.model_copy(
            update={
                "device": dev.torch_device,
                "device_name": dev.name,
                "build": dev.build,
                "dtype": self.dtype,
                "model": plan.record(),
                "num_parameters": plan.params,
                "non_embedding_parameters": trainplan.non_embedding_parameters(plan.params, plan.shape),
                "flops_per_token": trainplan.flops_per_token(
                    plan.params, plan.shape, self.spec.sequence_length()
                ),
                "flops_method": trainplan.FLOPS_METHOD,
                "world_size": self.world_size,
                "ranks": self.ranks,
                "dist_backend": self.group.backend if self.group is not None else None,
                "peak_flops_per_s": peak,
                "peak_flops_source": why if peak is not None else None,
                "mfu_unavailable": None if peak is not None else why,
                "grad_scaler": state.scaler is not None,
                "attention": ATTENTION,
                "memory_estimate": self.estimate,
                "cpu_threads": dev.cpu_threads,
                "data": self.data,
                "optimizer": self.spec.optimizer or "adamw",
            }
        )

    def client_note(self) -> str:
        gpu_work = "kernel launches, the optimizer's bookkeeping"
        return self._client_note("in-process torch training engine", "the training itself", gpu_work)

    # -- steps ----------------------------------------------------------------------------------------
    def _run_step(self, index: int) -> StepResult:
        """On the engine's thread: agree on the step with the other ranks, then run it."""
        state, dev = self._ready()
        if self.group is not None:
            stop, _ = self.group.agree(False, index)
            if stop:
                raise Interrupted("another rank of the data-parallel run was stopped (a signal reached it, "
                                  "not rank 0): the finished steps are kept")
        if dev.type == "cpu" and index == -1 and self.spec.warmup_requests() >= 2:
            result, self.cpu_peak = cpu_allocator_peak(state, lambda: train_step(state, index, self._stop))
            return result
        return train_step(state, index, self._stop)

    async def generate(self, req: GenRequest) -> GenResult:
        self._ready()
        # Cancelled, a single-process step ends before its next micro-batch (the stop stays set).
        result = await self._on_thread((StepStopped, Interrupted), False, self._run_step, req.index)
        if req.index < 0:
            took = result.t_end - result.t_start
            self.warmup_s += took
            if self.warmup_first_s is None:
                self.warmup_first_s = took
        samples = self.spec.micro_batch() * self.spec.accumulation() * self.world_size
        finite = result.loss == result.loss and abs(result.loss) != float("inf")
        step = TrainStep(
            step=max(req.index, 0),
            forward_s=result.forward_s,
            backward_s=result.backward_s,
            optimizer_s=result.optimizer_s,
            step_s=result.t_end - result.t_start,
            loss=result.loss if finite else None,
            nonfinite=not finite,
            tokens=samples * self.spec.sequence_length(),
            samples=samples,
            micro_batches=self.spec.accumulation(),
            world_size=self.world_size,
            skipped=result.skipped,
            grad_scale=result.grad_scale,
        )
        self.chunks_seen += step.tokens
        return GenResult(
            index=req.index,
            t_send=result.t_start,
            t_end=result.t_end,
            token_source="engine",
            stage=req.stage,
            server_timings={"train": step.model_dump(mode="json")},
        )

    async def generate_batch(self, reqs: list[GenRequest]) -> list[GenResult]:
        return [await self.generate(r) for r in reqs]

    async def follow(self) -> int:
        """The other ranks' loop: the step rank 0 names, until a stop is agreed. Returns the steps run."""
        state, _ = self._ready()
        group = self.group
        if group is None:
            raise EngineError("follow() is for the other ranks of a multi-process run")
        asked: list[str] = []
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(RuntimeError, ValueError):
                loop.add_signal_handler(sig, asked.append, sig.name)

        def one() -> bool:
            stop, index = group.agree(bool(asked), 0)
            if stop:
                return False
            train_step(state, index)
            return True

        done = 0
        try:
            while await loop.run_in_executor(self._executor, one):
                done += 1
        except BaseException:
            self._broken = True
            raise
        if asked:
            raise Interrupted(f"{asked[0]}: rank {self.rank} stopped after {done} steps")
        return done

    # -- the end --------------------------------------------------------------------------------------
    async def after_run(self) -> dict[str, Any]:
        """The details with the allocator's peak (GPU; the CPU's from the profiled warm-up step), the process
        peak RSS, the warm-up time and the host (for a CPU run, the compute device itself)."""
        _, dev = self._ready()
        details = {
            **self._details(),
            "warmup_s": self.warmup_s or None,
            "warmup_first_step_s": self.warmup_first_s,
        }
        if dev.type == "cuda":
            details["peak_memory"] = peak_memory(dev).to_dict()
            self._reserved_peak(details, dev)
        else:
            alloc = self.cpu_peak or Quantity.missing(
                "B",
                "torch.profiler memory events",
                "the CPU allocator's peak is read on the last of ≥ 2 warm-up steps (--warmup-steps 2 or "
                "more)",
            )
            details["peak_memory"] = alloc.to_dict()
            details["peak_rss"] = peak_memory(dev).to_dict()
        if self.estimate is not None:
            details["memory_estimate_model_bytes"] = self.estimate.model_bytes
        return self._run_record(dev, details)

    async def close(self) -> None:
        self._stop.set()
        group, executor = self.group, self._executor
        if group is not None and not group.stopped and not self._broken and executor is not None:
            with contextlib.suppress(Exception):  # the others may be gone already: nothing left to tell
                await asyncio.get_running_loop().run_in_executor(executor, group.agree, True, 0)
        self._shutdown_thread()
        if group is not None:
            with contextlib.suppress(Exception):
                group.close()
            self.group = None
        self.state = None
        self._release()
