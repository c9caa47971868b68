"""``gpuledger run``'s choice: which device, model and workload to measure on this machine, and why.

The device first (the GPU PyTorch can use, else the CPU), then the model: the one given with ``--model``
(refused when it cannot fit), else the first of ``DEFAULT_MODELS`` for the device whose memory estimate
fits. The workload is short and sized per device (``RUN_WORKLOADS``): on a 2-core CPU the whole
``gpuledger run`` stays under two minutes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from gpuledger.engines.torch.device import (
    DeviceInfo,
    ensure_fits,
    estimate_memory,
    resolve_dtype,
    select_device,
)
from gpuledger.engines.torch.models import DUMMY_PREFIX, ModelPlan, plan_model
from gpuledger.errors import ResourceError
from gpuledger.facts.cpu import usable_cpus
from gpuledger.kinds.text.options import torch_spec
from gpuledger.kinds.text.spec import TorchSpec
from gpuledger.records.torchspec import MemoryEstimate


@dataclass(frozen=True, slots=True)
class WorkloadShape:
    """A fixed-shape workload: ``num_requests`` prompts, ``batch_size`` at a time (the concurrency)."""

    batch_size: int
    input_tokens: int
    output_tokens: int
    num_requests: int
    max_duration_s: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# Short runs sized per device: on a 2-core CPU the whole `gpuledger run` stays under two minutes.
RUN_WORKLOADS: dict[tuple[str, bool], WorkloadShape] = {
    ("cuda", False): WorkloadShape(batch_size=8, input_tokens=512, output_tokens=256, num_requests=32,
                                   max_duration_s=300.0),
    ("cuda", True): WorkloadShape(batch_size=8, input_tokens=128, output_tokens=64, num_requests=8,
                                  max_duration_s=60.0),
    ("cpu", False): WorkloadShape(batch_size=4, input_tokens=32, output_tokens=32, num_requests=8,
                                  max_duration_s=30.0),
    ("cpu", True): WorkloadShape(batch_size=2, input_tokens=16, output_tokens=16, num_requests=2,
                                 max_duration_s=15.0),
}
# Default models, biggest first: the first whose memory estimate fits is used.
DEFAULT_MODELS: dict[tuple[str, bool], tuple[str, ...]] = {
    ("cuda", False): ("qwen2.5-7b", "qwen2.5-0.5b", "smollm2-135m"),
    ("cuda", True): ("qwen2.5-7b", "qwen2.5-0.5b", "smollm2-135m"),
    ("cpu", False): ("qwen2.5-0.5b", "smollm2-135m"),
    ("cpu", True): ("smollm2-135m",),
}
# On a CPU, a default model bigger than smollm2-135m needs this many usable logical CPUs: decode reads
# every weight once per step, and qwen2.5-0.5b in fp32 is 2 GB per step, too slow on a small VM for a run
# that should take a couple of minutes. `--model` measures any model on any CPU.
CPU_MIN_THREADS_FOR: dict[str, int] = {"qwen2.5-0.5b": 8}


@dataclass(slots=True)
class RunChoice:
    """The model, device, dtype and workload `gpuledger run` measures, and why."""

    plan: ModelPlan
    device: DeviceInfo
    dtype: str
    workload: WorkloadShape
    estimate: MemoryEstimate
    reason: str
    skipped: list[str] = field(default_factory=list)

    def spec(self, *, device: str, label: str, memory_budget_bytes: int | None = None) -> TorchSpec:
        """The run's spec: this model and workload, on the ``device`` asked for (``auto`` chooses again, and
        says so when it falls back to the CPU)."""
        w = self.workload
        return torch_spec(
            self.plan.spec, device=device, dtype=self.dtype, batch_size=w.batch_size,
            input_tokens=w.input_tokens, output_tokens=w.output_tokens, num_requests=w.num_requests,
            max_duration_s=w.max_duration_s, memory_budget_bytes=memory_budget_bytes, label=label,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.plan.name,
            "device": self.device.to_dict(),
            "dtype": self.dtype,
            "workload": self.workload.to_dict(),
            "memory_estimate": self.estimate.model_dump(mode="json"),
            "reason": self.reason,
            "skipped": self.skipped,
        }


def choose_run(
    device: str = "auto",
    model: str | None = None,
    dtype: str = "auto",
    quick: bool = False,
    memory_budget_bytes: int | None = None,
) -> RunChoice:
    """Pick the device, then the model: ``model`` when given (refused if it cannot fit), else the first
    of ``DEFAULT_MODELS`` for the device whose memory estimate fits (``dummy:qwen2.5-7b`` on a GPU with
    room for it, else ``dummy:qwen2.5-0.5b``, else ``dummy:smollm2-135m``; on a CPU with fewer logical
    CPUs than ``CPU_MIN_THREADS_FOR`` asks, the smaller model)."""
    dev = select_device(device)
    dt = resolve_dtype(dtype, dev)
    shape = RUN_WORKLOADS[(dev.type, quick)]

    def sized(plan: ModelPlan) -> MemoryEstimate:
        return estimate_memory(plan.params, plan.shape, dt, shape.batch_size, shape.input_tokens,
                               shape.output_tokens, dev, memory_budget_bytes)

    if model is not None:
        plan = plan_model(model)
        est = sized(plan)
        ensure_fits(plan.name, plan.params, est, dev)
        return RunChoice(plan, dev, dt, shape, est, "the model given with --model")
    skipped: list[str] = []
    candidates = DEFAULT_MODELS[(dev.type, quick)]
    cpus = usable_cpus()
    for name in candidates:
        need = CPU_MIN_THREADS_FOR.get(name, 0) if dev.type == "cpu" else 0
        if cpus < need:
            skipped.append(
                f"{DUMMY_PREFIX}{name}: the default uses it on CPUs with {need} or more logical CPUs "
                f"(this one has {cpus}) to keep the run short; --model {DUMMY_PREFIX}{name} measures it"
            )
            continue
        plan = plan_model(DUMMY_PREFIX + name)
        est = sized(plan)
        if est.fits:
            where = "GPU" if dev.type == "cuda" else "CPU"
            reason = (
                f"default for a {where}{' (--quick)' if quick else ''}: the largest of "
                f"{', '.join(DUMMY_PREFIX + c for c in candidates)} that fits"
            )
            return RunChoice(plan, dev, dt, shape, est, reason, skipped)
        skipped.append(f"{plan.name}: {est.text()}")
    raise ResourceError(
        f"none of the default models fits on {dev.name}: " + "; ".join(skipped),
        hint="free some memory, or pass --model with a smaller model",
    )
