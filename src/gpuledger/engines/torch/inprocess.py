"""What the in-process engines share (inference: ``engine.TorchEngine``; training: ``trainer.TrainEngine``):
the planned model and the device they compute on, PyTorch's CPU threads for the run, the one worker thread
their computation runs on and the stop it checks, what they tell the run of PyTorch (``ServerInfo``, the
details and the host), and giving all of it back when they close.

- ``_settle`` takes the chosen device: the CPU fallback (when the device was ``auto``) and a busy CPU become
  warnings, and the device records the CPU threads the run computes with;
- ``_start`` opens the worker thread and resets the allocator's peak, so that the peak is the run's;
- ``_on_thread`` runs a computation on the worker thread; a cancelled call sets the stop, waits for the
  computation to end at its next check of it, and is cancelled (its half-done work is not a result);
- ``_release`` (after the worker thread is shut down and the model let go) puts PyTorch's thread count back
  and frees the GPU's cached memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, TypeVar

import psutil

from gpuledger.engines.base import ServerInfo
from gpuledger.engines.torch.device import (
    CpuThreads,
    DeviceInfo,
    device_warnings,
    peak_memory_reserved,
    reset_peak_memory,
)
from gpuledger.engines.torch.imports import import_torch, import_transformers
from gpuledger.engines.torch.models import ModelPlan
from gpuledger.facts.cpu import cpu_model_name
from gpuledger.tokenizer import Tokenizer

T = TypeVar("T")


class InProcessEngine:
    """The state and steps the in-process engines share; see the module docstring."""

    name: str

    def __init__(self, on_phase: Callable[[str], None] | None, plan: ModelPlan | None = None) -> None:
        self.on_phase = on_phase
        self.plan = plan
        self.chunks_seen = 0
        self.display_url: str | None = None
        self.warnings: list[str] = []
        self.device: DeviceInfo | None = None
        self.dtype: str | None = None
        self.warmup_s = 0.0
        self._threads: CpuThreads | None = None
        self._stop = threading.Event()
        # A computation on the worker thread failed (not stopped): the engine may be left half-way.
        self._broken = False
        self._executor: ThreadPoolExecutor | None = None

    @property
    def model(self) -> str | None:
        """The name the run records (``dummy:qwen2.5-7b``, a folder's absolute path, a Hugging Face id)."""
        return self.plan.name if self.plan is not None else None

    @property
    def tokenizer(self) -> Tokenizer | None:
        return None

    @property
    def rank(self) -> int:
        """This process's rank in a multi-process run (0: the one that speaks and stores)."""
        return 0

    def _say(self, text: str) -> None:
        if self.on_phase is not None and self.rank == 0:
            self.on_phase(text)

    def _settle(self, dev: DeviceInfo, asked: str) -> DeviceInfo:
        """``dev`` with the CPU threads the run computes with (set here); ``asked``: the ``--device``."""
        self._threads = CpuThreads(dev)
        self.warnings.extend(device_warnings(dev, asked, self._threads))
        return replace(dev, cpu_threads=self._threads.threads)

    def _start(self, dev: DeviceInfo, thread_name: str) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=thread_name)
        reset_peak_memory(dev)

    def _server_info(
        self, plan: ModelPlan, details: dict[str, Any], *, forced_length: bool = False
    ) -> ServerInfo:
        """PyTorch as the run's "server": its version, the model, ``details`` and the warnings so far;
        ``forced_length``: the engine generates exactly the output length asked for."""
        return ServerInfo(
            kind="torch",
            version=str(import_torch().__version__),
            version_source="torch.__version__ (in-process engine)",
            models=[plan.name],
            accepts_ignore_eos=forced_length,
            accepts_min_tokens=forced_length,
            details=details,
            warnings=list(self.warnings),
        )

    @staticmethod
    def _device_details(dev: DeviceInfo) -> dict[str, Any]:
        """The first of the server record's details: transformers' version, PyTorch's build, the device."""
        transformers = str(import_transformers().__version__)
        return {"transformers": transformers, "build": dev.build, "device": dev.to_dict()}

    @staticmethod
    def _reserved_peak(details: dict[str, Any], dev: DeviceInfo) -> None:
        """Adds the caching allocator's reserved peak to ``details`` (a GPU's; the CPU has none)."""
        reserved = peak_memory_reserved(dev)
        if reserved is not None:
            details["peak_memory_reserved"] = reserved.to_dict()

    def _run_record(self, dev: DeviceInfo, details: dict[str, Any]) -> dict[str, Any]:
        """What ``after_run`` gives the run: ``details``, the warnings, and the host (for a CPU run, the
        compute device itself: cost scales CPU power and rental by its logical CPUs)."""
        cpu = {
            "model": cpu_model_name(),
            "logical_cpus": psutil.cpu_count(logical=True),
            "torch_threads": dev.cpu_threads,
        }
        return {"details": details, "warnings": list(self.warnings), "cpu": cpu}

    def _client_note(self, engine: str, includes: str, gpu_work: str) -> str:
        """The client record's note: the process's CPU time includes ``includes`` — on a GPU, ``gpu_work``."""
        cpu = self.device is not None and self.device.type == "cpu"
        return f"{engine}: the process's CPU time includes {includes}" + (
            " (the run computes on the CPU)" if cpu else f" ({gpu_work})"
        )

    async def _on_thread(
        self, stopped: tuple[type[BaseException], ...], resume: bool, fn: Callable[..., T], *args: Any
    ) -> T:
        """``fn(*args)`` on the worker thread. Cancelled, the stop is set and the computation ends at its
        next check (raising one of ``stopped``, or finishing); ``resume``: the stop is cleared after, for the
        next call."""
        fut = asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)
        try:
            return await fut
        except asyncio.CancelledError:
            self._stop.set()
            await asyncio.wait([fut])
            if not fut.cancelled():
                with contextlib.suppress(*stopped):
                    fut.result()
            if resume:
                self._stop.clear()
            raise
        except BaseException:
            self._broken = True
            raise

    def _shutdown_thread(self) -> None:
        """Waits for the worker thread's computation to end and closes it."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    def _release(self) -> None:
        """PyTorch's thread count back as it was, and the GPU's cached memory freed: the caller has let go of
        its model first."""
        if self._threads is not None:
            self._threads.restore()
            self._threads = None
        dev = self.device
        if dev is not None and dev.type == "cuda":
            import_torch().cuda.empty_cache()
