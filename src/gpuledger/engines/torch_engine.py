"""In-process PyTorch engine: a real transformer on the best device this machine has.

The one module of gpuledger that imports ``torch`` and ``transformers`` (lazily: importing this module
costs nothing, and without them every other command works; asking for the engine then raises
``MissingDependencyError`` with the install line). They are imported through ``importlib`` and handled
as ``Any``: none of their types cross this module, and it keeps ``mypy --strict`` from type-checking
all of torch and transformers (minutes) whenever they are installed.

- ``--model dummy:NAME`` builds a built-in architecture (``data/dummy_models.yaml``: configs as their
  authors publish them) with random weights on the target device: no download, the real model's compute
  and memory shape (vLLM's ``--load-format dummy`` idea).
- ``--model PATH_OR_HF_ID`` loads real weights through transformers' ``from_pretrained``.
- Prompts are token ids and output lengths are forced (``min_new_tokens == max_new_tokens``), so the
  work is the same on every machine. Concurrency is the batch size: every sequence of a batch is sent
  at once and gets one token per decode step; a streamer stamps each step with ``time.perf_counter()``
  right after the step's tokens reached the host (``.cpu()`` synchronises the device).
- Before loading, the memory the run needs is estimated from the config and dtype and compared with
  what the device has free; a model that cannot fit is refused with the numbers (``ResourceError``).
"""

from __future__ import annotations

import functools
import importlib
import math
import os
import platform
import resource
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import psutil
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpuledger.bench.writer import RunWriter, StoreLike
from gpuledger.engines.base import ServerInfo
from gpuledger.errors import (
    EngineError,
    GpuledgerError,
    Interrupted,
    InvalidInputError,
    MissingDependencyError,
    NotFoundError,
    ResourceError,
    UsageError,
)
from gpuledger.quantity import Quantity
from gpuledger.records import RequestRecord, RunInfo, RunStatus

DeviceRequest = Literal["auto", "cpu", "cuda"]
DEVICE_CHOICES: tuple[str, ...] = ("auto", "cpu", "cuda")
DTYPE_CHOICES: tuple[str, ...] = ("auto", "bf16", "fp16", "fp32")
DUMMY_PREFIX = "dummy:"
INSTALL_HINT = (
    "pip install 'gpuledger[torch]' — on a GPU machine install the torch build for your CUDA or ROCm "
    "first (README, 'Which PyTorch?')"
)
BYTES_PER_ELEMENT: dict[str, int] = {"fp32": 4, "bf16": 2, "fp16": 2}
_DTYPE_ALIASES: dict[str, str] = {
    "auto": "auto",
    "bf16": "bf16", "bfloat16": "bf16",
    "fp16": "fp16", "float16": "fp16", "half": "fp16",
    "fp32": "fp32", "float32": "fp32", "float": "fp32",
}
_TORCH_DTYPE_NAMES: dict[str, str] = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
GIB = 1024**3


def gib(n: float) -> str:
    """``31.2 GiB`` (sizes are binary, as the allocators count them)."""
    return f"{n / GIB:.1f} GiB"


def fmt_params(n: int) -> str:
    """``7.62B``, ``494M``, ``352K``."""
    for div, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.3g}{suffix}"
    return str(n)


# --------------------------------------------------------------------------------------------------
# Optional dependencies
# --------------------------------------------------------------------------------------------------


def import_torch() -> Any:
    """``torch``, or ``MissingDependencyError`` with the install line (exit 7)."""
    try:
        torch = importlib.import_module("torch")
    except ImportError as exc:
        raise MissingDependencyError(f"torch not installed: {INSTALL_HINT}") from exc
    except OSError as exc:  # a CUDA/ROCm build whose shared libraries cannot be loaded
        raise MissingDependencyError(
            f"torch is installed but cannot be imported: {exc}",
            hint="reinstall the torch build that matches this machine (README, 'Which PyTorch?')",
        ) from exc
    return torch


def import_transformers() -> Any:
    """``transformers`` (quietened: its warnings and progress bars would clutter the terminal)."""
    import_torch()
    try:
        transformers = importlib.import_module("transformers")
        hf_logging = importlib.import_module("transformers.utils.logging")
    except ImportError as exc:
        raise MissingDependencyError(f"transformers not installed: {INSTALL_HINT}") from exc
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    return transformers


def _dtype_kwarg(transformers: Any, torch_dtype: Any) -> dict[str, Any]:
    """transformers >= 4.56 takes ``dtype=``; older releases (the extra allows >= 4.45) ``torch_dtype=``."""
    parts = str(transformers.__version__).split(".")
    major, minor = int(parts[0]), int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    return {"dtype": torch_dtype} if (major, minor) >= (4, 56) else {"torch_dtype": torch_dtype}


def _no_init_weights(transformers: Any) -> Any:
    """transformers' context manager that skips weight initialisation (moved in transformers 5)."""
    try:
        return importlib.import_module("transformers.initialization").no_init_weights
    except (ImportError, AttributeError):
        return importlib.import_module("transformers.modeling_utils").no_init_weights


def torch_status() -> tuple[bool, str]:
    """(available, version or reason) without raising: for summaries and doctor-like lines."""
    try:
        torch = import_torch()
        import_transformers()
    except MissingDependencyError as exc:
        return False, exc.message
    return True, str(torch.__version__)


# --------------------------------------------------------------------------------------------------
# Built-in architectures (dummy models)
# --------------------------------------------------------------------------------------------------


class DummyArchitecture(BaseModel):
    """The architecture fields of a published config.json (what transformers needs to build it)."""

    model_config = ConfigDict(extra="forbid")

    model_type: Literal["llama", "qwen2"]
    architectures: list[str]
    num_hidden_layers: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_key_value_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    intermediate_size: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    hidden_act: str
    rms_norm_eps: float = Field(gt=0)
    rope_theta: float = Field(gt=0)
    rope_scaling: dict[str, Any] | None = None
    tie_word_embeddings: bool
    max_position_embeddings: int = Field(gt=0)
    bos_token_id: int | None = None
    eos_token_id: int | None = None


class DummyModel(BaseModel):
    """One built-in model: its published architecture, parameter count and where both come from."""

    model_config = ConfigDict(extra="forbid")

    name: str = ""
    hf_id: str
    family: str
    config_source: str
    published_params: int = Field(gt=0)
    params_text: str
    params_source: str
    qkv_bias: bool
    config: DummyArchitecture


class _DummyFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: Literal["gpuledger-dummy-models"]
    version: Literal[1]
    models: dict[str, DummyModel]


@functools.cache
def dummy_models() -> dict[str, DummyModel]:
    """The built-in architectures, by name (``smollm2-135m``, ``qwen2.5-0.5b``, ...)."""
    text = resources.files("gpuledger").joinpath("data/dummy_models.yaml").read_text(encoding="utf-8")
    try:
        parsed = _DummyFile.model_validate(yaml.safe_load(text))
    except (yaml.YAMLError, ValidationError) as exc:
        raise InvalidInputError(f"built-in data/dummy_models.yaml is invalid: {exc}") from exc
    return {name: m.model_copy(update={"name": name}) for name, m in parsed.models.items()}


def get_dummy(name: str) -> DummyModel:
    """A built-in architecture by name (``dummy:`` prefix allowed); ``NotFoundError`` lists the names."""
    key = name.removeprefix(DUMMY_PREFIX).strip().lower()
    models = dummy_models()
    if key not in models:
        raise NotFoundError(
            f"unknown dummy model {name!r}; built in: "
            + ", ".join(DUMMY_PREFIX + n for n in models)
        )
    return models[key]


@dataclass(frozen=True, slots=True)
class ModelShape:
    """What the memory estimate and the parameter arithmetic need (decoder-only transformer)."""

    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_positions: int | None
    tie_embeddings: bool
    qkv_bias: bool

    def kv_bytes_per_token(self, dtype: str) -> int:
        """KV cache bytes one token occupies: K and V, every layer, every KV head."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * BYTES_PER_ELEMENT[dtype]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def shape_of_dummy(model: DummyModel) -> ModelShape:
    c = model.config
    return ModelShape(
        num_layers=c.num_hidden_layers,
        hidden_size=c.hidden_size,
        num_heads=c.num_attention_heads,
        num_kv_heads=c.num_key_value_heads,
        head_dim=c.head_dim,
        intermediate_size=c.intermediate_size,
        vocab_size=c.vocab_size,
        max_positions=c.max_position_embeddings,
        tie_embeddings=c.tie_word_embeddings,
        qkv_bias=model.qkv_bias,
    )


def param_count(shape: ModelShape) -> int:
    """Parameters of a Llama/Qwen2-style decoder, from its config alone.

    embeddings ``V·H`` (+ ``V·H`` for an untied LM head); per layer: attention
    ``H·(n·d) + 2·H·(k·d) + (n·d)·H`` (+ ``(n+2k)·d`` q/k/v biases), gated MLP ``3·H·I``, two RMSNorms
    ``2·H``; a final norm ``H``. (``V`` vocab, ``H`` hidden, ``I`` intermediate, ``n``/``k`` query/KV
    heads, ``d`` head dim.)
    """
    h, d = shape.hidden_size, shape.head_dim
    q, kv = shape.num_heads * d, shape.num_kv_heads * d
    attention = h * q + 2 * h * kv + q * h + ((q + 2 * kv) if shape.qkv_bias else 0)
    mlp = 3 * h * shape.intermediate_size
    per_layer = attention + mlp + 2 * h
    embeddings = shape.vocab_size * h * (1 if shape.tie_embeddings else 2)
    return embeddings + shape.num_layers * per_layer + h


def hf_config_of(model: DummyModel) -> Any:
    """The transformers config object for a built-in architecture."""
    transformers = import_transformers()
    fields = model.config.model_dump(exclude_none=True)
    model_type = fields.pop("model_type")
    return transformers.AutoConfig.for_model(model_type, **fields)


def count_params_on_meta(hf_config: Any) -> int:
    """Parameters counted by building the model on PyTorch's ``meta`` device (no memory used).
    Shared (tied) tensors are counted once."""
    torch = import_torch()
    transformers = import_transformers()
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf_config)
    return int(sum(p.numel() for p in model.parameters()))


def shape_of_hf_config(cfg: Any) -> ModelShape:
    """The shape of any decoder config transformers loaded (fields it lacks -> ``InvalidInputError``)."""
    text_cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg

    def need(*names: str) -> int:
        for n in names:
            value = getattr(text_cfg, n, None)
            if isinstance(value, int) and value > 0:
                return value
        raise InvalidInputError(
            f"model config ({getattr(cfg, 'model_type', '?')}) has none of {', '.join(names)}: "
            "the torch engine runs decoder-only language models"
        )

    hidden = need("hidden_size", "n_embd", "d_model")
    heads = need("num_attention_heads", "n_head")
    kv_value = getattr(text_cfg, "num_key_value_heads", None)
    kv_heads = kv_value if isinstance(kv_value, int) and kv_value > 0 else heads
    head_dim_value = getattr(text_cfg, "head_dim", None)
    head_dim = head_dim_value if isinstance(head_dim_value, int) and head_dim_value > 0 else hidden // heads
    inter_value = getattr(text_cfg, "intermediate_size", None) or getattr(text_cfg, "n_inner", None)
    intermediate = inter_value if isinstance(inter_value, int) and inter_value > 0 else 4 * hidden
    max_pos = getattr(text_cfg, "max_position_embeddings", None) or getattr(text_cfg, "n_positions", None)
    return ModelShape(
        num_layers=need("num_hidden_layers", "n_layer", "num_layers"),
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=intermediate,
        vocab_size=need("vocab_size"),
        max_positions=max_pos if isinstance(max_pos, int) else None,
        tie_embeddings=bool(getattr(cfg, "tie_word_embeddings", False)),
        qkv_bias=bool(getattr(text_cfg, "attention_bias", False)),
    )


# --------------------------------------------------------------------------------------------------
# Device and dtype
# --------------------------------------------------------------------------------------------------


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
        """``NVIDIA H200 (cuda:0, torch 2.8.0 cuda 12.8)``."""
        return f"{self.name} ({self.torch_device}, torch {self.torch_version} {self.build})"


def torch_build(torch: Any) -> str:
    """``cuda 12.8``, ``rocm 6.4.43482`` (torch.version.hip) or ``cpu``."""
    hip = getattr(torch.version, "hip", None)
    if hip:
        return f"rocm {hip}"
    cuda = getattr(torch.version, "cuda", None)
    if cuda:
        return f"cuda {cuda}"
    return "cpu"


def cpu_model_name(root: Path = Path("/")) -> str:
    """The CPU's model name from /proc/cpuinfo (``AMD EPYC 7B13``), else what Python knows."""
    try:
        for line in (root / "proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "cpu model") and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


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


# --------------------------------------------------------------------------------------------------
# Model plan and memory estimate
# --------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class ModelPlan:
    """What will be loaded: the name the run records, its shape and size, and where that came from."""

    spec: str
    kind: Literal["dummy", "pretrained"]
    name: str
    shape: ModelShape
    params: int
    params_method: str
    source: str
    hf_config: Any = field(repr=False, default=None)
    dummy: DummyModel | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "spec": self.spec,
            "kind": self.kind,
            "name": self.name,
            "params": self.params,
            "params_method": self.params_method,
            "source": self.source,
            "shape": self.shape.to_dict(),
        }
        if self.dummy is not None:
            out["published_params"] = self.dummy.published_params
            out["params_source"] = self.dummy.params_source
            out["hf_id"] = self.dummy.hf_id
            out["weights"] = "random (dummy: architecture only, nothing downloaded)"
        return out


def plan_model(spec: str) -> ModelPlan:
    """``dummy:NAME`` -> the built-in config; anything else -> ``AutoConfig.from_pretrained(spec)``
    (a local folder, or a Hugging Face id through transformers' normal cache/download path)."""
    spec = spec.strip()
    if not spec:
        raise UsageError("--model must not be empty")
    if spec.lower().startswith(DUMMY_PREFIX):
        dummy = get_dummy(spec)
        shape = shape_of_dummy(dummy)
        return ModelPlan(
            spec=spec,
            kind="dummy",
            name=DUMMY_PREFIX + dummy.name,
            shape=shape,
            params=param_count(shape),
            params_method="config arithmetic",
            source=dummy.config_source,
            hf_config=hf_config_of(dummy),
            dummy=dummy,
        )
    transformers = import_transformers()
    path = Path(spec).expanduser()
    target = str(path) if path.exists() else spec
    if path.exists() and not (path / "config.json").is_file():
        raise InvalidInputError(f"{path} has no config.json: not a transformers model folder")
    try:
        cfg = transformers.AutoConfig.from_pretrained(target)
    except (OSError, ValueError, KeyError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise NotFoundError(
            f"cannot load model config for {spec!r}: {first}",
            hint="give a local model folder, or a Hugging Face id reachable from this machine",
        ) from exc
    shape = shape_of_hf_config(cfg)
    return ModelPlan(
        spec=spec,
        kind="pretrained",
        name=str(path.resolve()) if path.exists() else spec,
        shape=shape,
        params=count_params_on_meta(cfg),
        params_method="meta-device instantiation",
        source=target,
        hf_config=cfg,
    )


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    """Bytes the run needs on its device, by part, against what the device has free."""

    weights_bytes: int
    kv_cache_bytes: int
    activation_bytes: int
    overhead_bytes: int
    available_bytes: int | None
    available_source: str
    dtype: str
    batch_size: int
    sequence_tokens: int

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_cache_bytes + self.activation_bytes + self.overhead_bytes

    @property
    def fits(self) -> bool:
        return self.available_bytes is None or self.total_bytes <= self.available_bytes

    def text(self) -> str:
        parts = (
            f"weights {gib(self.weights_bytes)} + KV cache {gib(self.kv_cache_bytes)} + activations "
            f"{gib(self.activation_bytes)} + overhead {gib(self.overhead_bytes)}"
        )
        free = "unknown" if self.available_bytes is None else gib(self.available_bytes)
        return f"needs ~{gib(self.total_bytes)} ({parts}); available {free} ({self.available_source})"

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["total_bytes"] = self.total_bytes
        out["fits"] = self.fits
        return out


def estimate_memory(
    plan: ModelPlan,
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
    s = plan.shape
    seq = input_tokens + output_tokens
    weights = plan.params * bpe
    kv = batch_size * seq * s.kv_bytes_per_token(dtype)
    act = (
        batch_size * input_tokens * (4 * s.hidden_size + 2 * s.intermediate_size) * bpe
        + batch_size * s.num_heads * input_tokens * input_tokens * bpe
        + 2 * batch_size * s.vocab_size * 4
    )
    overhead = weights // 20 + 256 * 1024**2
    if budget_bytes is not None:
        available: int | None = budget_bytes
        source = "memory budget given (--memory-budget)"
    else:
        available = device.free_memory_bytes
        source = device.memory_source
    return MemoryEstimate(
        weights_bytes=weights,
        kv_cache_bytes=kv,
        activation_bytes=act,
        overhead_bytes=overhead,
        available_bytes=available,
        available_source=source,
        dtype=dtype,
        batch_size=batch_size,
        sequence_tokens=seq,
    )


def ensure_fits(plan: ModelPlan, estimate: MemoryEstimate, device: DeviceInfo) -> None:
    """``ResourceError`` (exit 8) with the numbers when the estimate exceeds what is available."""
    if estimate.fits:
        return
    where = "RAM" if device.type == "cpu" else "GPU memory"
    raise ResourceError(
        f"{plan.name} ({fmt_params(plan.params)} params, {estimate.dtype}) does not fit in the {where} of "
        f"{device.name}: {estimate.text()}",
        hint="choose a smaller --model, a 16-bit --dtype on a GPU, a smaller batch or shorter lengths "
        "(bench: --concurrency, --input-len, --output-len), or a device with more memory",
    )


# --------------------------------------------------------------------------------------------------
# Loading and generating
# --------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class LoadedModel:
    """A model on its device, ready to generate."""

    plan: ModelPlan
    device: DeviceInfo
    dtype: str
    model: Any = field(repr=False)
    load_s: float
    eos_token_id: int | None
    pad_token_id: int
    special_ids: frozenset[int]


def _fill_random_(torch: Any, model: Any, seed: int) -> None:
    """Dummy weights, cheaply and reproducibly: matrices U(-a, a) with a = 0.02·√3 (std 0.02, the
    configs' initializer_range), norm weights 1, biases 0. Uniform is several times cheaper than the
    normal init transformers would run, which matters for a 7B model on a CPU-bound host."""
    a = 0.02 * math.sqrt(3.0)
    gen = torch.Generator(device=next(model.parameters()).device).manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.uniform_(-a, a, generator=gen)
            elif name.endswith("bias"):
                p.zero_()
            else:
                p.fill_(1.0)


def load_model(plan: ModelPlan, device: DeviceInfo, dtype: str, seed: int = 0) -> LoadedModel:
    """Build (dummy) or load (pretrained) the model on ``device`` in ``dtype``."""
    torch = import_torch()
    transformers = import_transformers()
    torch_dtype = getattr(torch, _TORCH_DTYPE_NAMES[dtype])
    t = time.perf_counter()
    try:
        dtype_kw = _dtype_kwarg(transformers, torch_dtype)
        if plan.kind == "dummy":
            with torch.device(device.torch_device), _no_init_weights(transformers)():
                model = transformers.AutoModelForCausalLM.from_config(plan.hf_config, **dtype_kw)
            model.tie_weights()
            _fill_random_(torch, model, seed)
        else:
            # Loaded on the host, then moved: transformers' device_map needs `accelerate`.
            model = transformers.AutoModelForCausalLM.from_pretrained(plan.source, **dtype_kw)
            model = model.to(device.torch_device)
    except torch.cuda.OutOfMemoryError as exc:
        raise ResourceError(
            f"{plan.name} ran out of GPU memory while loading on {device.name}: "
            f"{str(exc).splitlines()[0]}"
        ) from exc
    except MemoryError as exc:
        raise ResourceError(f"{plan.name} ran out of RAM while loading on {device.name}") from exc
    except (OSError, ValueError) as exc:
        raise EngineError(f"cannot load {plan.name}: {_first_line(exc)}") from exc
    except RuntimeError as exc:  # e.g. "no kernel image is available for execution on the device"
        raise EngineError(
            f"PyTorch failed on {device.name} while building {plan.name}: {_first_line(exc)}",
            hint=_device_hint(device),
        ) from exc
    model.eval()
    if device.type == "cuda":
        torch.cuda.synchronize(device.torch_device)
    load_s = time.perf_counter() - t
    cfg = model.config

    def token_id(name: str) -> Any:
        value = getattr(model.generation_config, name, None)
        return value if value is not None else getattr(cfg, name, None)

    eos = token_id("eos_token_id")
    eos_id = eos[0] if isinstance(eos, list) and eos else eos
    pad = token_id("pad_token_id")
    pad_id = pad if isinstance(pad, int) else (eos_id if isinstance(eos_id, int) else 0)
    special = {
        x for x in (getattr(cfg, "bos_token_id", None), eos_id, pad_id) if isinstance(x, int)
    }
    if isinstance(eos, list):
        special.update(x for x in eos if isinstance(x, int))
    return LoadedModel(
        plan=plan,
        device=device,
        dtype=dtype,
        model=model,
        load_s=load_s,
        eos_token_id=eos_id if isinstance(eos_id, int) else None,
        pad_token_id=pad_id,
        special_ids=frozenset(special),
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _device_hint(device: DeviceInfo) -> str | None:
    """Where to look when PyTorch's kernels fail on a device it says it can use."""
    if device.vendor == "amd":
        return ("on AMD this is often a GPU whose gfx target the ROCm build does not support "
                "(HSA_OVERRIDE_GFX_VERSION): run `gpuledger doctor`")
    if device.vendor == "nvidia":
        return ("the torch build may not support this GPU's architecture, or the driver is older than the "
                "build's CUDA: run `gpuledger doctor`")
    return None


@functools.cache
def _step_clock_class() -> type:
    """A transformers ``BaseStreamer`` that stamps every decode step (defined lazily: the base class
    lives in transformers)."""
    import_transformers()
    base: Any = importlib.import_module("transformers.generation.streamers").BaseStreamer

    class StepClock(base):  # type: ignore[misc]
        """``put`` is called once with the prompt, then once per step with one token per sequence,
        after ``.cpu()`` brought them to the host: the device has finished that step."""

        def __init__(self) -> None:
            self.prompt_seen = False
            self.times: list[float] = []
            self.tokens: list[list[int]] = []
            self.t_end: float | None = None

        def put(self, value: Any) -> None:
            now = time.perf_counter()
            if not self.prompt_seen:
                self.prompt_seen = True
                return
            self.times.append(now)
            self.tokens.append([int(x) for x in value.reshape(-1).tolist()])

        def end(self) -> None:
            self.t_end = time.perf_counter()

    return StepClock


@dataclass(slots=True)
class BatchTiming:
    """One batch: sent at ``t_send``; step ``i`` finished at ``step_times[i]``; sequence ``j`` produced
    ``output_lengths[j]`` tokens (all of them, unless it emitted EOS after the forced minimum)."""

    t_send: float
    step_times: list[float]
    t_end: float
    output_lengths: list[int]


def make_prompts(loaded: LoadedModel, count: int, input_tokens: int, seed: int) -> Any:
    """``count`` prompts of ``input_tokens`` random token ids (seeded; special ids avoided)."""
    torch = import_torch()
    gen = torch.Generator().manual_seed(seed)
    vocab = loaded.plan.shape.vocab_size
    ids = torch.randint(0, vocab, (count, input_tokens), generator=gen)
    for sid in loaded.special_ids:
        if 0 <= sid < vocab:
            ids[ids == sid] = (sid + 1) % vocab
    return ids


def generate_batch(loaded: LoadedModel, prompt_ids: Any, output_tokens: int) -> BatchTiming:
    """Run one batch with forced output length and per-step timestamps."""
    torch = import_torch()
    clock = _step_clock_class()()
    ids = prompt_ids.to(loaded.device.torch_device)
    mask = torch.ones_like(ids)
    kwargs: dict[str, Any] = {
        "max_new_tokens": output_tokens,
        "min_new_tokens": output_tokens,
        "do_sample": False,
        "num_beams": 1,
        "use_cache": True,
        "pad_token_id": loaded.pad_token_id,
        "eos_token_id": loaded.eos_token_id,
        "streamer": clock,
    }
    if loaded.device.type == "cuda":
        torch.cuda.synchronize(loaded.device.torch_device)
    t_send = time.perf_counter()
    try:
        with torch.inference_mode():
            loaded.model.generate(input_ids=ids, attention_mask=mask, **kwargs)
    except torch.cuda.OutOfMemoryError as exc:
        raise ResourceError(
            f"out of GPU memory while generating (batch {ids.shape[0]}, "
            f"{ids.shape[1]}+{output_tokens} tokens): {str(exc).splitlines()[0]}",
            hint="lower --batch or the lengths",
        ) from exc
    except RuntimeError as exc:
        raise EngineError(
            f"generation failed on {loaded.device.name}: {_first_line(exc)}", hint=_device_hint(loaded.device)
        ) from exc
    batch = int(ids.shape[0])
    lengths = [len(clock.times)] * batch
    eos = loaded.eos_token_id
    if eos is not None:
        for j in range(batch):
            for i, step in enumerate(clock.tokens):
                if j < len(step) and step[j] == eos:
                    lengths[j] = i + 1
                    break
    t_end = clock.times[-1] if clock.times else (clock.t_end or time.perf_counter())
    return BatchTiming(t_send=t_send, step_times=list(clock.times), t_end=t_end, output_lengths=lengths)


def batch_records(
    timing: BatchTiming,
    first_index: int,
    input_tokens: int,
    requested_output: int,
    t0: float,
    stage: str = "",
) -> list[RequestRecord]:
    """One ``RequestRecord`` per sequence of the batch, on the run's clock (``t0`` = its zero). The
    sequences of one batch share ``t_send`` and their step times."""
    out: list[RequestRecord] = []
    for j, n in enumerate(timing.output_lengths):
        times = [t - t0 for t in timing.step_times[:n]]
        out.append(
            RequestRecord(
                index=first_index + j,
                t_send=timing.t_send - t0,
                t_first=times[0] if times else None,
                t_end=(times[-1] if times else timing.t_end - t0),
                chunk_times=times,
                chunk_tokens=None,
                input_tokens=input_tokens,
                output_tokens=n,
                token_source="engine",
                requested_output_tokens=requested_output,
                error=None if times else "no token generated",
                stage=stage,
            )
        )
    return out


# --------------------------------------------------------------------------------------------------
# Peak memory
# --------------------------------------------------------------------------------------------------


def reset_peak_memory(device: DeviceInfo) -> None:
    if device.type == "cuda":
        import_torch().cuda.reset_peak_memory_stats(device.torch_device)


def peak_memory(device: DeviceInfo) -> Quantity:
    """GPU: the caching allocator's peak (``torch.cuda.max_memory_allocated``) since the last reset;
    CPU: the process's peak resident set (``getrusage`` ``ru_maxrss``, over the process's life)."""
    if device.type == "cuda":
        torch = import_torch()
        value = int(torch.cuda.max_memory_allocated(device.torch_device))
        return Quantity(float(value), "B", "torch.cuda.max_memory_allocated",
                        "allocator peak, measured window")
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    scale = 1 if sys.platform == "darwin" else 1024  # Linux reports KiB, macOS bytes
    return Quantity(float(maxrss * scale), "B", "getrusage ru_maxrss", "process peak RSS (whole process)")


# --------------------------------------------------------------------------------------------------
# A measured run: the same Run record as the server engines, written by the bench RunWriter
# --------------------------------------------------------------------------------------------------

WORKLOAD_NAME = "random-token-ids"


@dataclass(slots=True)
class TorchBenchResult:
    """What ``run_torch_bench`` did: the stored run plus the engine's own view of it."""

    run: RunInfo
    plan: ModelPlan
    device: DeviceInfo
    dtype: str
    estimate: MemoryEstimate
    peak_memory: Quantity
    load_s: float
    warmup_s: float | None
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run.id,
            "status": self.run.status,
            "model": self.plan.to_dict(),
            "device": self.device.to_dict(),
            "dtype": self.dtype,
            "memory_estimate": self.estimate.to_dict(),
            "peak_memory": self.peak_memory.to_dict(),
            "load_s": self.load_s,
            "warmup_s": self.warmup_s,
            "warnings": self.warnings,
        }


def _check_workload(plan: ModelPlan, batch_size: int, input_tokens: int, output_tokens: int,
                    num_requests: int) -> None:
    for flag, value in (("--batch/--concurrency", batch_size), ("--input-tokens", input_tokens),
                        ("--output-tokens", output_tokens), ("--num-requests", num_requests)):
        if value < 1:
            raise UsageError(f"{flag} must be at least 1 (got {value})")
    limit = plan.shape.max_positions
    if limit is not None and input_tokens + output_tokens > limit:
        raise InvalidInputError(
            f"{plan.name} handles at most {limit} positions; input {input_tokens} + output "
            f"{output_tokens} tokens is longer"
        )


def _engine_server(loaded: LoadedModel, peak: Quantity, warmup_s: float | None,
                   warnings_: list[str]) -> dict[str, Any]:
    """``RunInfo.server`` for a torch run: PyTorch is the "server" (ServerInfo's keys)."""
    transformers = import_transformers()
    torch = import_torch()
    details: dict[str, Any] = {
        "transformers": str(transformers.__version__),
        "build": loaded.device.build,
        "device": loaded.device.to_dict(),
        "dtype": loaded.dtype,
        "load_s": loaded.load_s,
        "warmup_s": warmup_s,
        "peak_memory": peak.to_dict(),
    }
    if loaded.device.type == "cuda":
        details["peak_memory_reserved"] = Quantity(
            float(torch.cuda.max_memory_reserved(loaded.device.torch_device)), "B",
            "torch.cuda.max_memory_reserved", "caching allocator reserved peak, measured window",
        ).to_dict()
    server = ServerInfo(
        kind="torch",
        version=str(torch.__version__),
        version_source="torch.__version__ (in-process engine)",
        models=[loaded.plan.name],
        accepts_ignore_eos=True,
        accepts_min_tokens=True,
        details=details,
        warnings=list(warnings_),
    ).to_dict()
    # The host the engine ran in (for a CPU run, the compute device itself: cost scales CPU power and
    # rental by its logical CPUs).
    server["cpu"] = {
        "model": cpu_model_name(),
        "logical_cpus": psutil.cpu_count(logical=True),
        "torch_threads": loaded.device.cpu_threads,
    }
    return server


def _engine_client(client: dict[str, Any], device: DeviceInfo) -> dict[str, Any]:
    """The writer measures the client process's CPU use; in-process, that process IS the engine, so
    on a CPU run its CPU time is the model's computation, not client overhead limiting the run."""
    out = {k: v for k, v in client.items() if k != "warnings"}
    out["in_process_engine"] = True
    out["note"] = (
        "in-process torch engine: the process's CPU time includes the model's computation"
        + (" (the run computes on the CPU)" if device.type == "cpu" else " (kernel launches, sampling)")
    )
    return out


def run_torch_bench(
    store: StoreLike,
    *,
    model: str = "dummy:qwen2.5-0.5b",
    device: str = "auto",
    dtype: str = "auto",
    batch_size: int = 1,
    input_tokens: int = 128,
    output_tokens: int = 128,
    num_requests: int | None = None,
    warmup: bool = True,
    seed: int = 0,
    label: str = "",
    telemetry: bool = True,
    telemetry_interval_s: float = 0.1,
    slo: dict[str, float] | None = None,
    memory_budget_bytes: int | None = None,
    max_duration_s: float | None = None,
    on_phase: Callable[[str], None] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    plan: ModelPlan | None = None,
    like: dict[str, Any] | None = None,
) -> TorchBenchResult:
    """Measure ``model`` in-process and store the run (engine ``torch``) through ``RunWriter``.

    ``batch_size`` is the concurrency: ``num_requests`` (default: one batch; rounded up to whole
    batches) prompts of ``input_tokens`` random token ids run ``batch_size`` at a time, each producing
    exactly ``output_tokens`` tokens. Order: plan the model -> pick the device and dtype -> estimate
    memory (refuse with ``ResourceError`` if it cannot fit) -> load -> one unrecorded warm-up batch ->
    the measured window (telemetry sampled by the writer). ``max_duration_s`` stops starting new
    batches once the next one would end past it (the run says so). Ctrl-C keeps the finished batches
    as an ``incomplete`` run and raises ``Interrupted``. ``plan``: an already planned ``model`` (skips
    planning it again). ``on_phase(text)`` reports each step, ``on_progress(done, total)`` requests.
    ``like``: where the workload was copied from (``bench --like``), kept in the run's config."""
    def say(text: str) -> None:
        if on_phase is not None:
            on_phase(text)

    if plan is None:
        say(f"planning {model}")
        plan = plan_model(model)
    requests = num_requests if num_requests is not None else batch_size
    _check_workload(plan, batch_size, input_tokens, output_tokens, requests)
    num_batches = math.ceil(requests / batch_size)
    requests = num_batches * batch_size
    dev = select_device(device)
    dt = resolve_dtype(dtype, dev)
    estimate = estimate_memory(plan, dt, batch_size, input_tokens, output_tokens, dev, memory_budget_bytes)
    ensure_fits(plan, estimate, dev)
    warn: list[str] = []
    if dev.fallback_reason and device == "auto":
        warn.append(f"running on the CPU: {dev.fallback_reason}")
    with _cpu_threads_for(dev, warn) as threads:
        dev = replace(dev, cpu_threads=threads)
        return _measure(
            store, plan, dev, dt, estimate, warn, batch_size=batch_size, input_tokens=input_tokens,
            output_tokens=output_tokens, requests=requests, num_batches=num_batches, warmup=warmup,
            seed=seed, label=label, telemetry=telemetry, telemetry_interval_s=telemetry_interval_s, slo=slo,
            max_duration_s=max_duration_s, say=say, on_progress=on_progress, like=like,
        )


def busy_cpu() -> tuple[float, int] | None:
    """(1-minute load average, usable logical CPUs) when other work already fills the CPUs, else None."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        return None
    cpus = usable_cpus()
    return (load, cpus) if load > cpus else None


@contextmanager
def _cpu_threads_for(device: DeviceInfo, warn: list[str]) -> Iterator[int | None]:
    """PyTorch's intra-op threads for the run. On a CPU already busy with other work, PyTorch's threads
    wait for each other at every operation (measured here: a decode step 5-10x slower with 2 threads
    than with 1 on a 2-CPU machine at load 40), so a busy CPU runs with one thread, unless the user set
    ``OMP_NUM_THREADS``; the run says so. Restored afterwards."""
    torch = import_torch()
    before = int(torch.get_num_threads())
    busy = busy_cpu() if device.type == "cpu" else None
    if busy is not None:
        load, cpus = busy
        note = (
            f"the CPU is busy (1-minute load average {load:.1f} on {cpus} usable logical CPUs): other "
            "processes compete with this measurement"
        )
        if "OMP_NUM_THREADS" not in os.environ and before > 1:
            torch.set_num_threads(1)
            note += (
                f"; PyTorch runs with 1 thread instead of {before} (it suffers less from the "
                "contention; set OMP_NUM_THREADS to choose)"
            )
        warn.append(note)
    try:
        yield int(torch.get_num_threads())
    finally:
        torch.set_num_threads(before)


def _measure(
    store: StoreLike,
    plan: ModelPlan,
    dev: DeviceInfo,
    dt: str,
    estimate: MemoryEstimate,
    warn: list[str],
    *,
    batch_size: int,
    input_tokens: int,
    output_tokens: int,
    requests: int,
    num_batches: int,
    warmup: bool,
    seed: int,
    label: str,
    telemetry: bool,
    telemetry_interval_s: float,
    slo: dict[str, float] | None,
    max_duration_s: float | None,
    say: Callable[[str], None],
    on_progress: Callable[[int, int], None] | None,
    like: dict[str, Any] | None = None,
) -> TorchBenchResult:
    """Load, warm up, and measure (``run_torch_bench`` after its checks)."""
    say(f"{'building' if plan.kind == 'dummy' else 'loading'} {plan.name} "
        f"({fmt_params(plan.params)} params, {dt}) on {dev.text()}")
    loaded = load_model(plan, dev, dt, seed=seed)
    prompts = make_prompts(loaded, requests, input_tokens, seed)

    warmup_s: float | None = None
    if warmup:
        say("warm-up batch (not measured)")
        t = time.perf_counter()
        generate_batch(loaded, prompts[:batch_size], min(output_tokens, 2))
        warmup_s = time.perf_counter() - t

    info = RunInfo(
        id="",
        label=label,
        engine="torch",
        model=plan.name,
        unit="token",
        workload={
            "dataset": WORKLOAD_NAME,
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "fixed_output": True,
            "num_requests": requests,
            "seed": seed,
            "prompts": "token ids drawn uniformly from the vocabulary, fixed seed, special ids avoided",
        },
        config={
            "engine": "torch",
            "concurrency": batch_size,
            "batch_size": batch_size,
            "device": dev.torch_device,
            "device_name": dev.name,
            "build": dev.build,
            "dtype": dt,
            "num_parameters": plan.params,
            "kv_bytes_per_token": plan.shape.kv_bytes_per_token(dt),
            "model": plan.to_dict(),
            "memory_estimate": estimate.to_dict(),
            "warmup": warmup,
            "max_duration_s": max_duration_s,
            "requests_planned": requests,
            **({"like": like} if like else {}),
            "cpu_threads": dev.cpu_threads,
            "generation": {
                "do_sample": False,
                "num_beams": 1,
                "min_new_tokens": output_tokens,
                "max_new_tokens": output_tokens,
                "use_cache": True,
                "timestamps": "per decode step: streamer, after the step's tokens reached the host",
            },
        },
    )
    writer = RunWriter(store, info, telemetry=telemetry, telemetry_interval_s=telemetry_interval_s, slo=slo)
    writer.start()
    reset_peak_memory(dev)
    done = 0
    status: RunStatus = "complete"
    if on_progress is not None:
        on_progress(0, requests)
    say(f"measuring: {requests} requests, batch {batch_size}, {input_tokens} in / {output_tokens} out")
    try:
        for b in range(num_batches):
            rows = prompts[b * batch_size:(b + 1) * batch_size]
            timing = generate_batch(loaded, rows, output_tokens)
            for rec in batch_records(timing, done, input_tokens, output_tokens, writer.t0):
                writer.add(rec)
            done += int(rows.shape[0])
            if on_progress is not None:
                on_progress(done, requests)
            if writer.failed is not None:
                status = "incomplete"
                break
            if max_duration_s is not None and b + 1 < num_batches:
                elapsed = time.perf_counter() - writer.t0
                batch_s = timing.t_end - timing.t_send
                if elapsed + batch_s > max_duration_s:
                    warn.append(
                        f"time cap {max_duration_s:g} s reached: ran {done} of {requests} planned requests"
                    )
                    break
    except KeyboardInterrupt:
        peak = peak_memory(dev)
        writer.finish("incomplete", server=_engine_server(loaded, peak, warmup_s, warn))
        raise Interrupted(
            f"interrupted: {done} finished requests kept as an incomplete run {writer.run_id}"
        ) from None
    except GpuledgerError:
        peak = peak_memory(dev)
        writer.finish("failed", server=_engine_server(loaded, peak, warmup_s, warn))
        raise
    peak = peak_memory(dev)
    run = writer.finish(status, server=_engine_server(loaded, peak, warmup_s, warn))
    run.client = _engine_client(run.client, dev)
    store.update_run(run.id, client=run.client)
    return TorchBenchResult(
        run=run,
        plan=plan,
        device=dev,
        dtype=dt,
        estimate=estimate,
        peak_memory=peak,
        load_s=loaded.load_s,
        warmup_s=warmup_s,
        warnings=warn,
    )


# --------------------------------------------------------------------------------------------------
# `gpuledger run`: which model and workload for this device
# --------------------------------------------------------------------------------------------------


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


def usable_cpus() -> int:
    """Logical CPUs this process may run on (a container's CPU set, not the host's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return psutil.cpu_count(logical=True) or 1


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

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.plan.name,
            "device": self.device.to_dict(),
            "dtype": self.dtype,
            "workload": self.workload.to_dict(),
            "memory_estimate": self.estimate.to_dict(),
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
        return estimate_memory(plan, dt, shape.batch_size, shape.input_tokens, shape.output_tokens, dev,
                               memory_budget_bytes)

    if model is not None:
        plan = plan_model(model)
        est = sized(plan)
        ensure_fits(plan, est, dev)
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
