"""One training step on a device, timed: the model (data-parallel across ranks when there are several), its
optimizer, autocast and grad scaler, the token ids of each micro-batch, and the step itself with the device
synchronised before it starts, between its phases (forward, backward, optimizer) and at its end, so that each
phase's time is the device's, not the time it took to queue the kernels.

A step of ``grad_accum`` micro-batches: forward (the model's own causal-LM loss: labels = the input ids,
shifted inside the model), backward (scaled by the grad scaler in fp16; DDP's gradient all-reduce runs
during the last micro-batch's backward), then the optimizer (and the scaler's update). The loss is the mean
over the micro-batches and, with several ranks, over the ranks.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from gpuledger.engines.torch.device import DeviceInfo
from gpuledger.engines.torch.distributed import Group
from gpuledger.engines.torch.imports import import_torch
from gpuledger.engines.torch.models import LoadedModel, device_hint, first_line
from gpuledger.errors import EngineError, ResourceError
from gpuledger.quantity import Quantity

AUTOCAST_DTYPES: dict[str, str] = {"bf16": "bfloat16", "fp16": "float16"}
SGD_MOMENTUM = 0.9
ATTENTION = "sdpa"  # transformers' default: PyTorch's fused scaled-dot-product attention


class StepStopped(Exception):
    """The step was stopped between micro-batches (a single-process run asked to stop): it never finished."""


@dataclass(slots=True)
class StepResult:
    """What one step measured (seconds; ``loss`` the mean over micro-batches and ranks)."""

    index: int
    t_start: float
    t_end: float
    forward_s: float
    backward_s: float
    optimizer_s: float
    loss: float
    skipped: bool
    grad_scale: float | None


class TokenSource:
    """The token ids of micro-batch ``micro`` of step ``index`` on rank ``rank``: random ids (seeded by all
    three, so every rank trains on its own data and a run repeats exactly), or windows of a tokenised file
    taken in order (rank-interleaved), the file reused from its start when the run needs more tokens."""

    def __init__(
        self, *, vocab: int, seed: int, batch: int, seq_len: int, accum: int, world: int, tokens: Any = None
    ) -> None:
        self.vocab, self.seed, self.batch, self.seq_len = vocab, seed, batch, seq_len
        self.accum, self.world = accum, world
        self.tokens = tokens  # a 1-D CPU tensor of ids, or None for random ids
        self.torch = import_torch()

    def batch_for(self, index: int, micro: int, rank: int) -> Any:
        torch = self.torch
        if self.tokens is None:
            key = (self.seed * 1_000_003 + index * 8_191 + micro * 131 + rank) % (2**63 - 1)
            gen = torch.Generator().manual_seed(key)
            return torch.randint(0, self.vocab, (self.batch, self.seq_len), generator=gen)
        n = int(self.tokens.shape[0])
        windows = max(1, n // self.seq_len)
        first = ((index * self.accum + micro) * self.world + rank) * self.batch
        rows = [((first + j) % windows) * self.seq_len for j in range(self.batch)]
        return torch.stack([self.tokens[r : r + self.seq_len] for r in rows])


@dataclass(slots=True)
class TrainState:
    """A model ready to train on its device (see ``build_state``)."""

    loaded: LoadedModel
    model: Any  # what is called: the model, DDP-wrapped and/or compiled
    optimizer: Any
    scaler: Any
    autocast: Any  # torch dtype, or None (fp32)
    device: DeviceInfo
    data: TokenSource
    accum: int
    group: Group | None
    ddp: bool
    rank: int = 0
    notes: list[str] = field(default_factory=list)

    def sync(self) -> None:
        if self.device.type == "cuda":
            import_torch().cuda.synchronize(self.device.torch_device)


def build_state(
    loaded: LoadedModel,
    *,
    dtype: str,
    optimizer: str,
    learning_rate: float,
    checkpointing: bool,
    compile_model: bool,
    data: TokenSource,
    accum: int,
    group: Group | None,
) -> TrainState:
    """The model in training mode (activation checkpointing as asked), wrapped for data parallelism when
    there are several ranks, compiled when asked, with its optimizer and — fp16 — a grad scaler."""
    torch = import_torch()
    model = loaded.model
    model.train()
    model.config.use_cache = False
    if checkpointing:
        _checkpoint_activations(model)
    params = [p for p in model.parameters() if p.requires_grad]
    if optimizer == "adamw":
        opt = torch.optim.AdamW(params, lr=learning_rate)
    else:
        opt = torch.optim.SGD(params, lr=learning_rate, momentum=SGD_MOMENTUM)
    dev = loaded.device
    wrapped = model
    if group is not None:
        ids = [int(dev.torch_device.split(":")[1])] if dev.type == "cuda" else None
        wrapped = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=ids, gradient_as_bucket_view=True
        )
    if compile_model:
        wrapped = torch.compile(wrapped)
    autocast = getattr(torch, AUTOCAST_DTYPES[dtype]) if dtype in AUTOCAST_DTYPES else None
    scaler = torch.amp.GradScaler(dev.type) if dtype == "fp16" else None
    return TrainState(
        loaded=loaded,
        model=wrapped,
        optimizer=opt,
        scaler=scaler,
        autocast=autocast,
        device=dev,
        data=data,
        accum=accum,
        group=group,
        ddp=group is not None,
        rank=group.rank if group is not None else 0,
    )


def _checkpoint_activations(model: Any) -> None:
    """transformers' activation checkpointing, non-reentrant (it works with DDP and leaves the inputs alone):
    ``activation_checkpointing_enable`` since transformers 5, ``gradient_checkpointing_enable`` before."""
    kwargs = {"use_reentrant": False}
    newer = getattr(model, "activation_checkpointing_enable", None)
    if newer is not None:
        newer(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def _autocast(state: TrainState) -> Any:
    torch = import_torch()
    if state.autocast is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=state.device.type, dtype=state.autocast)


def train_step(state: TrainState, index: int, stop: threading.Event | None = None) -> StepResult:
    """Run step ``index`` (negative: a warm-up step) and time it (module docstring). ``stop`` is checked
    between micro-batches of a single-process run (a data-parallel step always runs to its end: the ranks
    must run the same collectives)."""
    torch = import_torch()
    try:
        return _step(torch, state, index, stop)
    except torch.cuda.OutOfMemoryError as exc:
        raise ResourceError(
            f"out of GPU memory in training step {index} on {state.device.name}: {first_line(exc)}",
            hint="a smaller --batch-size or --seq-len, --activation-checkpointing, or a 16-bit --dtype",
        ) from exc
    except MemoryError as exc:
        raise ResourceError(f"out of RAM in training step {index} on {state.device.name}") from exc
    except RuntimeError as exc:
        raise EngineError(
            f"PyTorch failed in training step {index} on {state.device.name}: {first_line(exc)}",
            hint=device_hint(state.device),
        ) from exc


def _step(torch: Any, state: TrainState, index: int, stop: threading.Event | None) -> StepResult:
    batches = [state.data.batch_for(index, m, state.rank) for m in range(state.accum)]
    non_blocking = state.device.type == "cuda"
    batches = [b.to(state.device.torch_device, non_blocking=non_blocking) for b in batches]
    state.sync()
    t_start = time.perf_counter()
    forward = backward = 0.0
    loss_sum = torch.zeros((), device=state.device.torch_device, dtype=torch.float32)
    t = t_start
    for m, ids in enumerate(batches):
        if stop is not None and stop.is_set() and not state.ddp:
            raise StepStopped(f"stopped before micro-batch {m} of step {index}")
        last = m == state.accum - 1
        quiet = state.model.no_sync() if state.ddp and not last else contextlib.nullcontext()
        with quiet:
            with _autocast(state):
                loss = state.model(input_ids=ids, labels=ids).loss / state.accum
            state.sync()
            t_fwd = time.perf_counter()
            forward += t_fwd - t
            (state.scaler.scale(loss) if state.scaler is not None else loss).backward()
            state.sync()
            t = time.perf_counter()
            backward += t - t_fwd
        loss_sum += loss.detach().float()
    skipped = False
    scale: float | None = None
    if state.scaler is not None:
        before = float(state.scaler.get_scale())
        state.scaler.step(state.optimizer)
        state.scaler.update()
        scale = float(state.scaler.get_scale())
        skipped = scale < before
    else:
        state.optimizer.step()
    state.optimizer.zero_grad(set_to_none=True)
    state.sync()
    t_end = time.perf_counter()
    value = float(loss_sum.item())
    if state.group is not None:
        value = state.group.mean(value)
    return StepResult(
        index=index,
        t_start=t_start,
        t_end=t_end,
        forward_s=forward,
        backward_s=backward,
        optimizer_s=t_end - t,
        loss=value,
        skipped=skipped,
        grad_scale=scale,
    )


def live_bytes(state: TrainState) -> int:
    """Bytes the model's parameters, their gradients and the optimizer's states hold right now."""
    torch = import_torch()
    total = 0
    for p in state.loaded.model.parameters():
        total += p.numel() * p.element_size()
        if p.grad is not None:
            total += p.grad.numel() * p.grad.element_size()
    for st in state.optimizer.state.values():
        for v in st.values():
            if isinstance(v, torch.Tensor):
                total += v.numel() * v.element_size()
    return total


def cpu_allocator_peak(state: TrainState, run: Callable[[], StepResult]) -> tuple[StepResult, Quantity]:
    """Run one step under PyTorch's profiler with its memory events: the CPU allocator's peak over the step is
    what was live when it started (weights, gradients, optimizer states) plus the highest running sum of
    the allocations and frees the profiler recorded (its trace's ``[memory]`` events)."""
    torch = import_torch()
    before = live_bytes(state)
    profiler = torch.profiler
    prof = profiler.profile(activities=[profiler.ProfilerActivity.CPU], profile_memory=True)
    with _quiet_stderr():  # the profiler's own start/stop lines (Kineto's) are not the user's business
        prof.__enter__()
    try:
        result = run()
    finally:
        with _quiet_stderr():
            prof.__exit__(None, None, None)
    fd, path = tempfile.mkstemp(prefix="gpuledger-train-", suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path, encoding="utf-8") as f:
            trace = json.load(f)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    running = peak = 0
    found = 0
    for ev in sorted(_memory_events(events), key=lambda e: e[0]):
        running += ev[1]
        peak = max(peak, running)
        found += 1
    if not found:
        return result, Quantity.missing("B", "torch.profiler memory events", "the profiler recorded none")
    return result, Quantity(
        float(before + peak),
        "B",
        "torch.profiler memory events (CPU allocator)",
        f"warm-up step {result.index}: live before the step + peak of {found} allocations",
    )


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """File descriptor 2 to /dev/null for a moment (C++ libraries write there directly)."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    try:
        with open(os.devnull, "w", encoding="utf-8") as null:
            os.dup2(null.fileno(), 2)
            try:
                yield
            finally:
                os.dup2(saved, 2)
    finally:
        os.close(saved)


def _memory_events(events: Any) -> Iterator[tuple[float, int]]:
    for ev in events if isinstance(events, list) else []:
        if not isinstance(ev, dict) or ev.get("name") != "[memory]":
            continue
        args = ev.get("args")
        if not isinstance(args, dict) or args.get("Device Type") not in (0, None):
            continue
        nbytes, ts = args.get("Bytes"), ev.get("ts")
        if isinstance(nbytes, int) and isinstance(ts, int | float):
            yield float(ts), nbytes
