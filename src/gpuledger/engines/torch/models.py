"""The models the in-process engine runs: the built-in architectures (``dummy:NAME``: the published configs
with random weights, nothing downloaded), real weights through transformers' ``from_pretrained``, the plan
of what will be loaded (shape, parameter count and where it comes from), and loading it on a device.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpuledger.engines.torch.device import TORCH_DTYPE_NAMES, DeviceInfo
from gpuledger.engines.torch.imports import dtype_kwarg, import_torch, import_transformers, no_init_weights
from gpuledger.errors import EngineError, InvalidInputError, NotFoundError, ResourceError, UsageError
from gpuledger.records.torchspec import ModelShape, TorchModel

DUMMY_PREFIX = "dummy:"


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

    def record(self) -> TorchModel:
        """What the run stores of the plan (``config.model``)."""
        out: dict[str, Any] = {
            "spec": self.spec,
            "kind": self.kind,
            "name": self.name,
            "params": self.params,
            "params_method": self.params_method,
            "source": self.source,
            "shape": self.shape,
        }
        if self.dummy is not None:
            out["published_params"] = self.dummy.published_params
            out["params_source"] = self.dummy.params_source
            out["hf_id"] = self.dummy.hf_id
            out["weights"] = "random (dummy: architecture only, nothing downloaded)"
        return TorchModel(**out)

    def to_dict(self) -> dict[str, Any]:
        return self.record().model_dump(mode="json", exclude_unset=True)


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
    torch_dtype = getattr(torch, TORCH_DTYPE_NAMES[dtype])
    t = time.perf_counter()
    try:
        dtype_kw = dtype_kwarg(transformers, torch_dtype)
        if plan.kind == "dummy":
            with torch.device(device.torch_device), no_init_weights(transformers)():
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
        raise EngineError(f"cannot load {plan.name}: {first_line(exc)}") from exc
    except RuntimeError as exc:  # e.g. "no kernel image is available for execution on the device"
        raise EngineError(
            f"PyTorch failed on {device.name} while building {plan.name}: {first_line(exc)}",
            hint=device_hint(device),
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


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def device_hint(device: DeviceInfo) -> str | None:
    """Where to look when PyTorch's kernels fail on a device it says it can use."""
    if device.vendor == "amd":
        return ("on AMD this is often a GPU whose gfx target the ROCm build does not support "
                "(HSA_OVERRIDE_GFX_VERSION): run `gpuledger doctor`")
    if device.vendor == "nvidia":
        return ("the torch build may not support this GPU's architecture, or the driver is older than the "
                "build's CUDA: run `gpuledger doctor`")
    return None


def check_positions(plan: ModelPlan, input_tokens: int, output_tokens: int) -> None:
    """``InvalidInputError`` when the lengths are longer than the model's positions."""
    limit = plan.shape.max_positions
    if limit is not None and input_tokens + output_tokens > limit:
        raise InvalidInputError(
            f"{plan.name} handles at most {limit} positions; input {input_tokens} + output "
            f"{output_tokens} tokens is longer"
        )
