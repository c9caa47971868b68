"""Where the in-process engine computes: the device (the GPU PyTorch can use, CUDA or ROCm, else the CPU with
the reason recorded), the dtype, the memory a run needs there (estimated before anything is loaded, refused
with the numbers when it cannot fit), the allocator's peak, and PyTorch's CPU threads on a busy machine.
"""

from __future__ import annotations

import os
import platform
import resource
import sys
import warnings
from dataclasses import asdict, dataclass
from typing import Any, Literal

import psutil

from gpuledger.engines.torch.imports import import_torch
from gpuledger.errors import ResourceError, UsageError
from gpuledger.facts.cpu import cpu_model_name, usable_cpus
from gpuledger.quantity import Quantity
from gpuledger.records.run import CPU_BUSY_WARNING
from gpuledger.records.torchspec import BYTES_PER_ELEMENT, MemoryEstimate, ModelShape

DEVICE_CHOICES: tuple[str, ...] = ("auto", "cpu", "cuda")
DTYPE_CHOICES: tuple[str, ...] = ("auto", "bf16", "fp16", "fp32")
_DTYPE_ALIASES: dict[str, str] = {
    "auto": "auto",
    "bf16": "bf16", "bfloat16": "bf16",
    "fp16": "fp16", "float16": "fp16", "half": "fp16",
    "fp32": "fp32", "float32": "fp32", "float": "fp32",
}
TORCH_DTYPE_NAMES: dict[str, str] = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def fmt_params(n: int) -> str:
    """``7.62B``, ``494M``, ``352K``."""
    for div, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.3g}{suffix}"
    return str(n)


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """Where the engine computes, as PyTorch sees it, with the build that decided it."""

    type: Literal["cuda", "cpu"]
    torch_device: str
    vendor: Literal["nvidia", "amd", "cpu"]
    name: str
    build: str
    torch_version: str
    total_memory_bytes: int | None
    free_memory_bytes: int | None
    memory_source: str
    bf16_supported: bool
    arch: str | None = None
    cpu_threads: int | None = None
    fallback_reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def text(self) -> str:
        """``NVIDIA H200 (cuda:0, torch 2.8.0 cuda 12.8)``, ``AMD EPYC (cpu, torch 2.13.0+cpu)``."""
        return f"{self.name} ({self.torch_device}, {torch_text(self.torch_version, self.build)})"


def torch_text(version: str, build: str) -> str:
    """``torch 2.8.0 cuda 12.8``; the build said once: a version whose local tag names it already
    (``2.13.0+cpu``, ``2.8.0+cu128``, ``2.8.0+rocm6.4``) is shown alone, not ``torch 2.13.0+cpu cpu``."""
    tag = version.partition("+")[2].lower()
    said = bool(tag) and any(tag.startswith(p) and build.startswith(b)
                             for p, b in (("cpu", "cpu"), ("cu", "cuda"), ("rocm", "rocm")))
    return f"torch {version}" if said or not build else f"torch {version} {build}"


def torch_build(torch: Any) -> str:
    """``cuda 12.8``, ``rocm 6.4.43482`` (torch.version.hip) or ``cpu``."""
    hip = getattr(torch.version, "hip", None)
    if hip:
        return f"rocm {hip}"
    cuda = getattr(torch.version, "cuda", None)
    if cuda:
        return f"cuda {cuda}"
    return "cpu"


def _cpu_device(torch: Any, fallback_reason: str | None) -> DeviceInfo:
    vm = psutil.virtual_memory()
    return DeviceInfo(
        type="cpu",
        torch_device="cpu",
        vendor="cpu",
        name=cpu_model_name(),
        build=torch_build(torch),
        torch_version=str(torch.__version__),
        total_memory_bytes=int(vm.total),
        free_memory_bytes=int(vm.available),
        memory_source="psutil.virtual_memory().available",
        bf16_supported=True,
        arch=platform.machine(),
        cpu_threads=int(torch.get_num_threads()),
        fallback_reason=fallback_reason,
    )


def _cuda_probe(torch: Any) -> tuple[bool, str | None]:
    """(usable, reason when not) — a warning torch raises while probing becomes the reason."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ok = bool(torch.cuda.is_available()) and int(torch.cuda.device_count()) > 0
    if ok:
        return True, None
    build = torch_build(torch)
    if build == "cpu":
        return False, f"PyTorch {torch.__version__} is a CPU-only build (no CUDA or ROCm support compiled in)"
    detail = "; ".join(str(w.message).strip().splitlines()[0] for w in caught if str(w.message).strip())
    return False, (
        f"PyTorch {torch.__version__} ({build} build) sees no GPU"
        + (f": {detail}" if detail else " (driver not loaded, or hidden by CUDA_VISIBLE_DEVICES / "
           "HIP_VISIBLE_DEVICES?) — run `gpuledger doctor`")
    )


def select_device(requested: str = "auto", index: int = 0) -> DeviceInfo:
    """``auto``: the GPU (CUDA, or ROCm which PyTorch also calls ``cuda``) if PyTorch can use one, else
    the CPU with the reason recorded; ``cuda`` without a usable GPU -> ``ResourceError`` (exit 8)."""
    if requested not in DEVICE_CHOICES:
        raise UsageError(f"--device must be one of {', '.join(DEVICE_CHOICES)} (got {requested!r})")
    torch = import_torch()
    if requested == "cpu":
        return _cpu_device(torch, None)
    usable, reason = _cuda_probe(torch)
    if not usable:
        if requested == "cuda":
            raise ResourceError(
                f"--device cuda: {reason}",
                hint="use --device cpu, or install the CUDA/ROCm build of torch (README, 'Which PyTorch?')",
            )
        return _cpu_device(torch, reason)
    count = int(torch.cuda.device_count())
    if not 0 <= index < count:
        raise ResourceError(f"GPU index {index} does not exist (PyTorch sees {count})")
    props = torch.cuda.get_device_properties(index)
    free, total = (int(x) for x in torch.cuda.mem_get_info(index))
    build = torch_build(torch)
    is_rocm = build.startswith("rocm")
    arch = getattr(props, "gcnArchName", None) if is_rocm else f"sm_{props.major}{props.minor}"
    return DeviceInfo(
        type="cuda",
        torch_device=f"cuda:{index}",
        vendor="amd" if is_rocm else "nvidia",
        name=str(torch.cuda.get_device_name(index)),
        build=build,
        torch_version=str(torch.__version__),
        total_memory_bytes=total,
        free_memory_bytes=free,
        memory_source="torch.cuda.mem_get_info",
        bf16_supported=bool(torch.cuda.is_bf16_supported()),
        arch=str(arch) if arch else None,
        cpu_threads=int(torch.get_num_threads()),
    )


def resolve_dtype(requested: str, device: DeviceInfo) -> str:
    """``auto``: bf16 on GPUs that support it (else fp16), fp32 on the CPU."""
    key = _DTYPE_ALIASES.get(requested.strip().lower())
    if key is None:
        raise UsageError(f"--dtype must be one of {', '.join(DTYPE_CHOICES)} (got {requested!r})")
    if key != "auto":
        if key == "bf16" and device.type == "cuda" and not device.bf16_supported:
            raise ResourceError(f"{device.name} does not support bf16 in PyTorch; use --dtype fp16")
        return key
    if device.type == "cuda":
        return "bf16" if device.bf16_supported else "fp16"
    return "fp32"


def estimate_memory(
    params: int,
    shape: ModelShape,
    dtype: str,
    batch_size: int,
    input_tokens: int,
    output_tokens: int,
    device: DeviceInfo,
    budget_bytes: int | None = None,
) -> MemoryEstimate:
    """Estimate first, from the config and dtype (docs/run.md has the formula):

    weights = params × bytes/element; KV cache = batch × (input + output) × kv_bytes_per_token;
    activations (prefill, the peak) = batch × input × (4·H + 2·I) × bytes + batch × heads × input² × bytes
    (attention scores) + 2 × batch × vocab × 4 (fp32 logits of the last position); overhead = 5 % of the
    weights + 256 MiB (allocator slack, runtime). Available: ``budget_bytes`` when given, else the
    device's free memory (``torch.cuda.mem_get_info``) or available RAM (psutil)."""
    bpe = BYTES_PER_ELEMENT[dtype]
    seq = input_tokens + output_tokens
    weights = params * bpe
    if budget_bytes is not None:
        available: int | None = budget_bytes
        source = "memory budget given (--memory-budget)"
    else:
        available = device.free_memory_bytes
        source = device.memory_source
    return MemoryEstimate.of(
        weights=weights,
        kv=batch_size * seq * shape.kv_bytes_per_token(dtype),
        activations=(
            batch_size * input_tokens * (4 * shape.hidden_size + 2 * shape.intermediate_size) * bpe
            + batch_size * shape.num_heads * input_tokens * input_tokens * bpe
            + 2 * batch_size * shape.vocab_size * 4
        ),
        overhead=weights // 20 + 256 * 1024**2,
        available=available,
        source=source,
        dtype=dtype,
        batch_size=batch_size,
        sequence_tokens=seq,
    )


def ensure_fits(name: str, params: int, estimate: MemoryEstimate, device: DeviceInfo) -> None:
    """``ResourceError`` (exit 8) with the numbers when the estimate exceeds what is available."""
    if estimate.fits:
        return
    where = "RAM" if device.type == "cpu" else "GPU memory"
    raise ResourceError(
        f"{name} ({fmt_params(params)} params, {estimate.dtype}) does not fit in the {where} of "
        f"{device.name}: {estimate.text()}",
        hint="choose a smaller --model, a 16-bit --dtype on a GPU, a smaller batch or shorter lengths "
        "(bench: --concurrency, --input-len, --output-len), or a device with more memory",
    )


def reset_peak_memory(device: DeviceInfo) -> None:
    if device.type == "cuda":
        import_torch().cuda.reset_peak_memory_stats(device.torch_device)


def peak_memory(device: DeviceInfo) -> Quantity:
    """GPU: the caching allocator's peak (``torch.cuda.max_memory_allocated``) since the model was loaded;
    CPU: the process's peak resident set (``getrusage`` ``ru_maxrss``, over the process's life)."""
    if device.type == "cuda":
        torch = import_torch()
        value = int(torch.cuda.max_memory_allocated(device.torch_device))
        return Quantity(float(value), "B", "torch.cuda.max_memory_allocated",
                        "allocator peak, warm-up and measured window")
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    scale = 1 if sys.platform == "darwin" else 1024  # Linux reports KiB, macOS bytes
    return Quantity(float(maxrss * scale), "B", "getrusage ru_maxrss", "process peak RSS (whole process)")


def peak_memory_reserved(device: DeviceInfo) -> Quantity | None:
    """GPU: the caching allocator's reserved peak; None on the CPU."""
    if device.type != "cuda":
        return None
    value = float(import_torch().cuda.max_memory_reserved(device.torch_device))
    return Quantity(value, "B", "torch.cuda.max_memory_reserved",
                    "caching allocator reserved peak, warm-up and measured window")


def busy_cpu() -> tuple[float, int] | None:
    """(1-minute load average, usable logical CPUs) when other work already fills the CPUs, else None."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        return None
    cpus = usable_cpus()
    return (load, cpus) if load > cpus else None


def device_warnings(dev: DeviceInfo, asked: str, threads: CpuThreads) -> list[str]:
    """What a run on ``dev`` says about where it computes: the CPU fallback when the device was ``auto``
    (``asked``: the ``--device``), and a busy CPU (``threads``' note)."""
    out = [f"running on the CPU: {dev.fallback_reason}"] if dev.fallback_reason and asked == "auto" else []
    return out + ([threads.note] if threads.note else [])


class CpuThreads:
    """PyTorch's intra-op threads for a run. On a CPU already busy with other work, PyTorch's threads wait
    for each other at every operation (measured here: a decode step 5-10x slower with 2 threads than with 1
    on a 2-CPU machine at load 40), so a busy CPU runs with one thread, unless the user set
    ``OMP_NUM_THREADS``; ``note`` says so. ``restore`` puts the count back."""

    def __init__(self, device: DeviceInfo) -> None:
        torch = import_torch()
        self.before = int(torch.get_num_threads())
        self.note: str | None = None
        busy = busy_cpu() if device.type == "cpu" else None
        if busy is not None:
            load, cpus = busy
            note = (
                f"{CPU_BUSY_WARNING} (1-minute load average {load:.1f} on {cpus} usable logical CPUs): other "
                "processes compete with this measurement"
            )
            if "OMP_NUM_THREADS" not in os.environ and self.before > 1:
                torch.set_num_threads(1)
                note += (
                    f"; PyTorch runs with 1 thread instead of {self.before} (it suffers less from the "
                    "contention; set OMP_NUM_THREADS to choose)"
                )
            self.note = note
        self.threads = int(torch.get_num_threads())

    def restore(self) -> None:
        import_torch().set_num_threads(self.before)
