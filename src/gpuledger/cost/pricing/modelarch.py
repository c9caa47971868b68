"""What a model reads and computes per token, from its config: the architecture behind MBU, MFU, the
no-run estimate and the advisor.

A ``ModelArch`` comes from one of four places, each recorded in ``source``:

- a built-in dummy architecture (``dummy:qwen2.5-7b``, ``data/dummy_models.yaml``), also found by its
  Hugging Face id (``Qwen/Qwen2.5-7B``), that id's instruct or chat fine-tune (the same config), or an
  Ollama-style tag (``qwen2.5:7b``);
- a known model (``data/known_models.yaml``: a published architecture that is not a dummy, e.g. DeepSeek
  R1, by its id or aliases);
- a model folder's ``config.json`` (or the file itself);
- the shape a torch run recorded (``config.model.shape``, with its parameter count).

Parameter arithmetic (``config.json`` fields, Llama-style decoders and their mixture-of-experts and
multi-head-latent-attention variants): embeddings ``V·H`` (+ ``V·H`` for an untied LM head); per layer
attention ``H·(n·d) + 2·H·(k·d) + (n·d)·H`` (+ q/k/v biases) or, with MLA, the low-rank projections; a
gated MLP ``3·H·I`` or, in a MoE layer, ``E`` routed experts of ``3·H·I_moe`` + shared experts + a router
``H·E``; two RMSNorms per layer and a final one.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpuledger.boundeddoc import NotADocument, load_json
from gpuledger.catalog import normalise_dtype
from gpuledger.errors import InvalidInputError, NotFoundError

KNOWN_NAME = "known_models.yaml"
MAX_CONFIG_BYTES = 2_000_000
# The decoder families whose config.json the arithmetic below covers.
DENSE_TYPES = ("llama", "mistral", "qwen2", "qwen3", "granite")
MOE_TYPES = ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3")
BIASED_QKV = ("qwen2", "qwen2_moe")
Origin = Literal["dummy", "known", "config.json", "run spec"]


@dataclass(frozen=True, slots=True)
class MoeShape:
    """The routed experts of a mixture-of-experts model."""

    experts: int  # routed experts per MoE layer
    experts_per_token: int
    moe_layers: int
    expert_params: int  # parameters of one routed expert in one layer

    @property
    def routed_params(self) -> int:
        return self.experts * self.expert_params * self.moe_layers

    def experts_touched(self, tokens: float) -> float:
        """Expected distinct experts one layer reads for ``tokens`` tokens in a step, each routed to
        ``experts_per_token`` of ``experts`` uniformly: ``E · (1 − (1 − k/E)^tokens)``."""
        if tokens <= 0:
            return 0.0
        e, k = self.experts, self.experts_per_token
        return float(e * (1.0 - (1.0 - k / e) ** tokens))


@dataclass(frozen=True, slots=True)
class ModelArch:
    """The figures of a decoder that the roofline needs (module docstring: where they come from)."""

    name: str
    source: str
    origin: Origin
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tie_embeddings: bool
    params: int
    kv_elements_per_token: int  # K and V (or MLA's latent) elements one token keeps, all layers
    attention_dims: int  # per head: the q·k width + the v width (attention FLOPs per context position)
    attention: str
    max_positions: int | None = None
    moe: MoeShape | None = None
    published_params: int | None = None
    published_active_params: int | None = None
    params_source: str | None = None
    dtype: str | None = None  # what the config says its weights are (config_dtype)

    # -- counts -----------------------------------------------------------------------------------
    @property
    def embedding_params(self) -> int:
        """The input embedding table (a lookup of one row per token: not read whole in a step)."""
        return self.vocab * self.hidden

    @property
    def lm_head_params(self) -> int:
        """The output projection (read whole at every decode step, tied to the embeddings or not)."""
        return self.vocab * self.hidden

    @property
    def non_embedding_params(self) -> int:
        """Every parameter but the embedding table and the LM head (the model cards' "non-embedding")."""
        return self.params - self.embedding_params - (0 if self.tie_embeddings else self.lm_head_params)

    @property
    def matmul_params(self) -> int:
        """Parameters a forward pass multiplies with: the non-embedding ones and the LM head."""
        return self.non_embedding_params + self.lm_head_params

    @property
    def active_matmul_params(self) -> float:
        """Of those, what one token uses (a MoE token uses ``experts_per_token`` routed experts)."""
        if self.moe is None:
            return float(self.matmul_params)
        m = self.moe
        active_experts = m.experts_per_token * m.expert_params * m.moe_layers
        return float(self.matmul_params - m.routed_params + active_experts)

    @property
    def active_params(self) -> float:
        """Parameters one token activates, embedding table included (the model cards' "activated")."""
        return self.active_matmul_params + self.params - self.matmul_params

    def read_params_per_step(self, sequences: float) -> float:
        """Parameters one decode step of ``sequences`` sequences reads: every matmul weight, of a MoE only
        the experts its tokens are routed to (expected, uniform routing)."""
        if self.moe is None:
            return float(self.matmul_params)
        m = self.moe
        touched = m.experts_touched(sequences)
        return float(self.matmul_params - m.routed_params + touched * m.expert_params * m.moe_layers)

    def attention_flops_per_token(self, context: float) -> float:
        """Attention score and value FLOPs of one token attending to ``context`` positions."""
        return 2.0 * self.layers * self.heads * self.attention_dims * max(context, 0.0)

    def flops_per_token(self, context: float) -> float:
        """Forward FLOPs of one token at ``context``: 2 × active matmul parameters + attention."""
        return 2.0 * self.active_matmul_params + self.attention_flops_per_token(context)

    def prefill_flops(self, input_tokens: float) -> float:
        """FLOPs of prefilling a prompt of ``input_tokens`` (causal: token i attends to i positions)."""
        return input_tokens * (2.0 * self.active_matmul_params) + self.attention_flops_per_token(
            input_tokens * input_tokens / 2.0
        )

    def kv_bytes_per_token(self, kv_bytes: float) -> float:
        return self.kv_elements_per_token * kv_bytes

    @property
    def label(self) -> str:
        return f"{self.name} ({self.source})"

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(
            non_embedding_params=self.non_embedding_params,
            matmul_params=self.matmul_params,
            active_params=self.active_params,
        )
        return out


# ---- config.json arithmetic -----------------------------------------------------------------------
def _int(cfg: Mapping[str, Any], *names: str, default: int | None = None, where: str) -> int:
    for n in names:
        value = cfg.get(n)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    if default is not None:
        return default
    raise InvalidInputError(f"{where}: none of {', '.join(names)} is a positive whole number")


def _attention(cfg: Mapping[str, Any], h: int, heads: int, kv_heads: int, d: int, qkv_bias: bool,
               where: str) -> tuple[int, int, int, str]:
    """(attention params per layer, KV elements per token per layer, per-head attention dims, kind)."""
    kv_lora = cfg.get("kv_lora_rank")
    if isinstance(kv_lora, int) and kv_lora > 0:
        rope = _int(cfg, "qk_rope_head_dim", where=where)
        nope = _int(cfg, "qk_nope_head_dim", where=where)
        v = _int(cfg, "v_head_dim", where=where)
        q_lora = cfg.get("q_lora_rank")
        if isinstance(q_lora, int) and q_lora > 0:
            q = h * q_lora + q_lora + q_lora * heads * (nope + rope)
        else:
            q = h * heads * (nope + rope)
        kv = h * (kv_lora + rope) + kv_lora + kv_lora * heads * (nope + v)
        return q + kv + heads * v * h, kv_lora + rope, nope + rope + v, "multi-head latent attention"
    q_width, kv_width = heads * d, kv_heads * d
    params = h * q_width + 2 * h * kv_width + q_width * h + ((q_width + 2 * kv_width) if qkv_bias else 0)
    if str(cfg.get("model_type", "")).startswith("qwen3"):
        params += 2 * d  # q_norm, k_norm
    kind = "multi-head" if kv_heads == heads else "grouped-query"
    return params, 2 * kv_width, 2 * d, kind


def arch_from_config(
    cfg: Mapping[str, Any],
    *,
    name: str,
    source: str,
    origin: Origin,
    qkv_bias: bool | None = None,
    published_params: int | None = None,
    published_active_params: int | None = None,
    params_source: str | None = None,
) -> ModelArch:
    """The architecture of a config.json mapping (module docstring: the arithmetic). A family it does not
    cover, or a field it needs missing, is an ``InvalidInputError`` naming it."""
    where = f"model config {source}"
    text = cfg.get("text_config")
    if isinstance(text, Mapping):  # a multimodal wrapper: the language model's own config
        cfg = {**text, "tie_word_embeddings": cfg.get("tie_word_embeddings", text.get("tie_word_embeddings"))}
    model_type = str(cfg.get("model_type") or "")
    if model_type not in DENSE_TYPES + MOE_TYPES:
        raise InvalidInputError(
            f"{where}: model_type {model_type or '(none)'!r} is not one gpuledger's parameter arithmetic "
            f"covers ({', '.join(DENSE_TYPES + MOE_TYPES)})"
        )
    layers = _int(cfg, "num_hidden_layers", where=where)
    h = _int(cfg, "hidden_size", where=where)
    heads = _int(cfg, "num_attention_heads", where=where)
    kv_heads = _int(cfg, "num_key_value_heads", default=heads, where=where)
    d = _int(cfg, "head_dim", default=h // heads, where=where)
    vocab = _int(cfg, "vocab_size", where=where)
    inter = _int(cfg, "intermediate_size", where=where)
    tie = cfg.get("tie_word_embeddings")
    tie_embeddings = True if tie is None else bool(tie)  # transformers' default
    bias = qkv_bias if qkv_bias is not None else (bool(cfg.get("attention_bias")) or model_type in BIASED_QKV)
    attn, kv_per_layer, dims, kind = _attention(cfg, h, heads, kv_heads, d, bias, where)
    moe: MoeShape | None = None
    experts = _int(cfg, "n_routed_experts", "num_local_experts", "num_experts", default=0, where=where)
    mlp_total = 0
    if model_type in MOE_TYPES and experts:
        k = _int(cfg, "num_experts_per_tok", where=where)
        expert_inter = _int(cfg, "moe_intermediate_size", default=inter, where=where)
        first_dense = cfg.get("first_k_dense_replace")
        dense_layers = first_dense if isinstance(first_dense, int) and 0 <= first_dense < layers else 0
        moe_layers = layers - dense_layers
        expert = 3 * h * expert_inter
        shared = 0
        n_shared = cfg.get("n_shared_experts")
        if isinstance(n_shared, int) and n_shared > 0:
            shared = n_shared * expert
        shared_inter = cfg.get("shared_expert_intermediate_size")
        if isinstance(shared_inter, int) and shared_inter > 0:
            shared = 3 * h * shared_inter + h  # and its gate
        per_moe_layer = experts * expert + shared + h * experts
        mlp_total = dense_layers * 3 * h * inter + moe_layers * per_moe_layer
        moe = MoeShape(experts=experts, experts_per_token=k, moe_layers=moe_layers, expert_params=expert)
        kind += f", mixture of {experts} experts ({k} per token)"
    else:
        mlp_total = layers * 3 * h * inter
    embeddings = vocab * h * (1 if tie_embeddings else 2)
    params = embeddings + layers * (attn + 2 * h) + mlp_total + h
    max_pos = cfg.get("max_position_embeddings")
    return ModelArch(
        name=name,
        source=source,
        origin=origin,
        layers=layers,
        hidden=h,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=d,
        vocab=vocab,
        tie_embeddings=tie_embeddings,
        params=params,
        kv_elements_per_token=layers * kv_per_layer,
        attention_dims=dims,
        attention=kind,
        max_positions=max_pos if isinstance(max_pos, int) and max_pos > 0 else None,
        moe=moe,
        published_params=published_params,
        published_active_params=published_active_params,
        params_source=params_source,
        dtype=config_dtype(cfg),
    )


def arch_from_shape(shape: Any, params: int | None, *, name: str, source: str) -> ModelArch:
    """The architecture of the shape a torch run recorded (``records.torchspec.ModelShape``); ``params``
    is the count the run recorded (None: the dense arithmetic)."""
    cfg = {
        "model_type": "llama",
        "num_hidden_layers": shape.num_layers,
        "hidden_size": shape.hidden_size,
        "num_attention_heads": shape.num_heads,
        "num_key_value_heads": shape.num_kv_heads,
        "head_dim": shape.head_dim,
        "intermediate_size": shape.intermediate_size,
        "vocab_size": shape.vocab_size,
        "tie_word_embeddings": shape.tie_embeddings,
        "max_position_embeddings": shape.max_positions,
    }
    arch = arch_from_config(cfg, name=name, source=source, origin="run spec", qkv_bias=shape.qkv_bias)
    if params:
        from dataclasses import replace

        arch = replace(arch, params=int(params))
    return arch


def config_dtype(cfg: Mapping[str, Any]) -> str | None:
    """The dtype a config.json says its weights are in: a quantisation's (fp8, 8- or 4-bit), else
    ``torch_dtype`` (``dtype`` in newer files); None when it says nothing the catalog knows."""
    quant = cfg.get("quantization_config")
    if isinstance(quant, Mapping):
        method = str(quant.get("quant_method") or "").lower()
        bits = quant.get("bits") or quant.get("w_bit")
        if "fp8" in method:
            return "fp8"
        if bits in (4, 8):
            return f"int{bits}"
        if method in ("mxfp4", "fp4", "nvfp4"):
            return "fp4"
    for key in ("torch_dtype", "dtype"):
        value = cfg.get(key)
        if isinstance(value, str) and normalise_dtype(value):
            return normalise_dtype(value)
    return None


# ---- where a model's config is found --------------------------------------------------------------
class KnownModel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    hf_id: str
    aliases: list[str] = Field(default_factory=list)
    config_source: str
    published_params: int = Field(gt=0)
    published_active_params: int | None = Field(default=None, gt=0)
    params_text: str
    params_source: str
    config: dict[str, Any]


class _KnownFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: Literal["gpuledger-known-models"]
    version: Literal[1]
    models: dict[str, KnownModel]


def _key(name: str) -> str:
    """Names compared without case, punctuation, a ``dummy:`` prefix, an organisation, or the suffix of an
    instruct/chat fine-tune (which has its base model's config)."""
    text = name.strip().lower().removeprefix("dummy:")
    text = text.rsplit("/", 1)[-1]
    text = re.sub(r"[-_.:](instruct|chat|it)$", "", text)
    return re.sub(r"[^a-z0-9]", "", text)


@functools.cache
def known_architectures() -> dict[str, ModelArch]:
    """Every built-in architecture (dummy and known) by name (``dummy:qwen2.5-7b``, ``deepseek-r1``)."""
    from gpuledger.engines.torch.models import dummy_models

    out: dict[str, ModelArch] = {}
    for name, dm in dummy_models().items():
        cfg = dm.config.model_dump(exclude_none=True)
        out[f"dummy:{name}"] = arch_from_config(
            cfg, name=f"dummy:{name}", source=f"{dm.hf_id} config ({dm.config_source})", origin="dummy",
            qkv_bias=dm.qkv_bias, published_params=dm.published_params, params_source=dm.params_source,
        )
    text = resources.files("gpuledger").joinpath("data", KNOWN_NAME).read_text(encoding="utf-8")
    try:
        doc = _KnownFile.model_validate(yaml.safe_load(text))
    except (yaml.YAMLError, ValidationError) as exc:
        raise InvalidInputError(f"built-in data/{KNOWN_NAME} is invalid: {exc}") from exc
    for name, km in doc.models.items():
        out[name] = arch_from_config(
            km.config, name=name, source=f"{km.hf_id} config ({km.config_source})", origin="known",
            published_params=km.published_params, published_active_params=km.published_active_params,
            params_source=km.params_source,
        )
    return out


@functools.cache
def _aliases() -> dict[str, str]:
    from gpuledger.engines.torch.models import dummy_models

    table: dict[str, str] = {}
    for name, dm in dummy_models().items():
        for alias in (name, dm.hf_id):
            table[_key(alias)] = f"dummy:{name}"
    text = resources.files("gpuledger").joinpath("data", KNOWN_NAME).read_text(encoding="utf-8")
    doc = _KnownFile.model_validate(yaml.safe_load(text))
    for name, km in doc.models.items():
        for alias in (name, km.hf_id, *km.aliases):
            table[_key(alias)] = name
    return table


def find_known(name: str | None) -> ModelArch | None:
    """The built-in architecture a model name stands for (module docstring), else None."""
    if not name or not name.strip():
        return None
    found = _aliases().get(_key(name))
    return known_architectures()[found] if found is not None else None


def read_config_file(path: Path) -> ModelArch:
    """A model folder (its ``config.json``) or a config.json file."""
    file = path / "config.json" if path.is_dir() else path
    if not file.is_file():
        raise NotFoundError(f"no model config at {path} (a model folder with config.json, or the file)")
    try:
        if file.stat().st_size > MAX_CONFIG_BYTES:
            raise InvalidInputError(f"{file}: larger than {MAX_CONFIG_BYTES:,} bytes: not a model config")
        doc = load_json(file.read_text(encoding="utf-8"), str(file))  # nesting bounded (boundeddoc)
    except (OSError, UnicodeDecodeError, NotADocument) as exc:
        raise InvalidInputError(f"{file}: not a readable JSON model config ({type(exc).__name__})") from exc
    if not isinstance(doc, dict):
        raise InvalidInputError(f"{file}: not a JSON object")
    return arch_from_config(doc, name=str(path), source=str(file), origin="config.json")


def resolve_model(spec: str, config: Path | None = None) -> ModelArch:
    """``--model`` (and ``--model-config``) as the estimate and the advisor take them: a config file or
    folder when given, else a dummy or known name, else a folder holding config.json. NotFoundError lists
    what is known."""
    if config is not None:
        arch = read_config_file(config)
        return arch if not spec.strip() else _renamed(arch, spec.strip())
    found = find_known(spec)
    if found is not None:
        return found
    path = Path(spec).expanduser()
    if path.exists():
        return read_config_file(path)
    raise NotFoundError(
        f"no known config for model {spec!r}",
        hint="built in: " + ", ".join(known_architectures()) + "; or give --model-config PATH (config.json)",
    )


def _renamed(arch: ModelArch, name: str) -> ModelArch:
    from dataclasses import replace

    return replace(arch, name=name)
