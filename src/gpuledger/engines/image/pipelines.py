"""Making a diffusers pipeline: a built-in architecture from its published configs with random weights
(``dummy:NAME``, ``catalog.py``), or a diffusers folder through ``from_pretrained``; counting its
parameters (on the meta device: no memory) and estimating the memory a run needs before anything is
loaded. diffusers, transformers and torch come through ``imports.py``; their objects stay ``Any`` here.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuledger.engines.image.catalog import DummyPipeline, ModelComponent, TokenizerComponent
from gpuledger.engines.image.imports import (
    import_diffusers,
    import_tokenizers,
    import_torch,
    import_transformers,
)
from gpuledger.errors import EngineError, InvalidInputError, MissingDependencyError

BYTES_PER_ELEMENT = {"fp32": 4, "bf16": 2, "fp16": 2}
# The VAE decoder's widest feature maps (128 channels at the full resolution, SD/SDXL/SD3/FLUX alike), a few
# alive at once: the usual peak of a high-resolution image (docs/image.md, "Memory estimate").
VAE_CHANNELS = 128
VAE_LIVE_MAPS = 6
OVERHEAD_BYTES = 512 * 1024**2


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2/CLIP's byte-level alphabet: every byte maps to a printable character."""
    bs = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    cs = bs[:]
    extra = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + extra)
            extra += 1
    return dict(zip(bs, [chr(c) for c in cs], strict=True))


def clip_tokenizer(transformers: Any, max_length: int, workdir: Path) -> Any:
    """A byte-level CLIP tokenizer without merges (514 ids: every byte, with and without ``</w>``, and the
    two specials): each character is a token, padded to ``max_length`` like the real one."""
    chars = list(_bytes_to_unicode().values())
    vocab = {c: i for i, c in enumerate(chars)}
    vocab.update({c + "</w>": len(chars) + i for i, c in enumerate(chars)})
    vocab["<|startoftext|>"] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    (workdir / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    (workdir / "merges.txt").write_text("#version: 0.2\n", encoding="utf-8")
    return transformers.CLIPTokenizer(
        str(workdir / "vocab.json"), str(workdir / "merges.txt"), model_max_length=max_length
    )


def t5_tokenizer(transformers: Any, max_length: int) -> Any:
    """A character-level T5 tokenizer (``<pad>`` 0, ``</s>`` 1, ``<unk>`` 2, printable ASCII), ``</s>``
    appended like the real one."""
    tokenizers = import_tokenizers()
    words = ["<pad>", "</s>", "<unk>"] + [chr(c) for c in range(32, 127)]
    tk = tokenizers.Tokenizer(
        tokenizers.models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>")
    )
    tk.pre_tokenizer = tokenizers.pre_tokenizers.Split("", "isolated")
    tk.post_processor = tokenizers.processors.TemplateProcessing(
        single="$A </s>", special_tokens=[("</s>", 1)]
    )
    return transformers.T5TokenizerFast(
        tokenizer_object=tk,
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        model_max_length=max_length,
    )


def _model(diffusers: Any, transformers: Any, comp: ModelComponent) -> Any:
    if comp.library == "diffusers":
        return getattr(diffusers, comp.class_name).from_config(comp.config)
    config = getattr(transformers, comp.config_class or "PretrainedConfig")(**comp.config)
    return getattr(transformers, comp.class_name)(config)


def component_parameters(spec: DummyPipeline) -> dict[str, int]:
    """Each network's parameter count, built on the meta device (no memory, no weights initialised)."""
    torch = import_torch()
    diffusers = import_diffusers()
    transformers = import_transformers()
    out: dict[str, int] = {}
    with torch.device("meta"):
        for name, comp in spec.models().items():
            model = _model(diffusers, transformers, comp)
            out[name] = int(sum(p.numel() for p in model.parameters()))
            del model
    return out


@dataclass(frozen=True, slots=True)
class BuiltPipeline:
    pipe: Any
    pipeline_class: str
    components: dict[str, int]
    parameters: int
    scheduler: str
    max_sequence_length: int | None


def build_dummy(spec: DummyPipeline, dtype: Any, device: str) -> BuiltPipeline:
    """The pipeline with random weights, made on ``device`` directly in ``dtype`` (torch's default dtype is
    ``dtype`` while the networks are built: a 16-bit model never passes through fp32, whose copy would
    double its memory peak)."""
    torch = import_torch()
    diffusers = import_diffusers()
    transformers = import_transformers()
    parts: dict[str, Any] = {}
    counts: dict[str, int] = {}
    target = torch.device(device)
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(target):
            for name, comp in spec.models().items():
                model = _model(diffusers, transformers, comp).to(dtype=dtype)
                model.eval()
                model.requires_grad_(False)
                parts[name] = model
                counts[name] = int(sum(p.numel() for p in model.parameters()))
    finally:
        torch.set_default_dtype(before)
    workdir = Path(tempfile.mkdtemp(prefix="gpuledger-tok-"))
    for name, tok in spec.tokenizers().items():
        parts[name] = _tokenizer(transformers, tok, workdir / name)
    sched = spec.scheduler()
    parts["scheduler"] = getattr(diffusers, sched.class_name).from_config(sched.config)
    cls = getattr(diffusers, spec.pipeline)
    extra: dict[str, Any] = {}
    if spec.pipeline == "StableDiffusionPipeline":
        extra = {"safety_checker": None, "feature_extractor": None, "requires_safety_checker": False}
    try:
        pipe = cls(**parts, **extra)
    except TypeError as exc:
        raise InvalidInputError(f"{spec.pipeline} cannot be made from the dummy components: {exc}") from exc
    pipe.set_progress_bar_config(disable=True)
    return BuiltPipeline(
        pipe, spec.pipeline, counts, sum(counts.values()), sched.class_name, spec.defaults.max_sequence_length
    )


def _tokenizer(transformers: Any, tok: TokenizerComponent, workdir: Path) -> Any:
    if tok.kind == "t5":
        return t5_tokenizer(transformers, tok.max_length)
    workdir.mkdir(parents=True, exist_ok=True)
    return clip_tokenizer(transformers, tok.max_length, workdir)


def load_folder(path: Path, dtype: Any, device: str) -> BuiltPipeline:
    """A diffusers folder (``model_index.json``) through ``DiffusionPipeline.from_pretrained``, offline."""
    if not (path / "model_index.json").is_file():
        raise InvalidInputError(f"--model {path}: not a diffusers folder (no model_index.json)")
    diffusers = import_diffusers()
    parts = str(diffusers.__version__).split(".")
    release = (int(parts[0]), int(parts[1])) if len(parts) > 1 and parts[1].isdigit() else (0, 0)
    # diffusers 0.42 takes dtype= (torch_dtype= is deprecated there); older releases take torch_dtype=
    dtype_kwarg = {"dtype": dtype} if release >= (0, 42) else {"torch_dtype": dtype}
    try:
        pipe = diffusers.DiffusionPipeline.from_pretrained(str(path), local_files_only=True, **dtype_kwarg)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise EngineError(f"--model {path}: diffusers could not load it: {str(exc).splitlines()[0]}") from exc
    except ImportError as exc:
        raise MissingDependencyError(
            f"--model {path} needs a library diffusers could not import: {exc}"
        ) from exc
    pipe.to(device)
    pipe.set_progress_bar_config(disable=True)
    counts: dict[str, int] = {}
    for name, comp in pipe.components.items():
        if hasattr(comp, "parameters") and callable(comp.parameters):
            counts[name] = int(sum(p.numel() for p in comp.parameters()))
    return BuiltPipeline(
        pipe, type(pipe).__name__, counts, sum(counts.values()), type(pipe.scheduler).__name__, None
    )


def folder_parameters(path: Path) -> dict[str, int] | None:
    """A diffusers folder's parameter count from its safetensors headers (no weights read), or None."""
    counts: dict[str, int] = {}
    for file in sorted(path.glob("*/*.safetensors")):
        try:
            with file.open("rb") as fh:
                size = int.from_bytes(fh.read(8), "little")
                if not 0 < size < 100 * 1024**2:
                    return None
                header = json.loads(fh.read(size))
        except (OSError, ValueError):
            return None
        n = 0
        for key, value in header.items():
            if key == "__metadata__" or not isinstance(value, dict):
                continue
            shape = value.get("shape")
            if isinstance(shape, list) and all(isinstance(d, int) for d in shape):
                prod = 1
                for d in shape:
                    prod *= d
                n += prod
        counts[file.parent.name] = counts.get(file.parent.name, 0) + n
    return counts or None


@dataclass(frozen=True, slots=True)
class ImageMemoryEstimate:
    weights_bytes: int
    activations_bytes: int
    overhead_bytes: int
    available_bytes: int | None
    source: str

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.activations_bytes + self.overhead_bytes

    @property
    def fits(self) -> bool:
        return self.available_bytes is None or self.total_bytes <= self.available_bytes

    def text(self) -> str:
        gib = 1024**3
        avail = "unknown" if self.available_bytes is None else f"{self.available_bytes / gib:.2f} GiB"
        return (
            f"needs ~{self.total_bytes / gib:.2f} GiB (weights {self.weights_bytes / gib:.2f} + "
            f"activations {self.activations_bytes / gib:.2f} + overhead {self.overhead_bytes / gib:.2f}), "
            f"{avail} available ({self.source})"
        )


def estimate_memory(
    parameters: int, dtype: str, batch_size: int, height: int, width: int, available: int | None, source: str
) -> ImageMemoryEstimate:
    """weights = parameters × bytes/element; activations = batch × height × width × 128 channels × 6 live maps
    × bytes (the VAE decoder's full-resolution feature maps, the usual peak); overhead = 5 % of the weights +
    512 MiB (allocator slack, runtime)."""
    bpe = BYTES_PER_ELEMENT.get(dtype, 4)
    weights = parameters * bpe
    activations = batch_size * height * width * VAE_CHANNELS * VAE_LIVE_MAPS * bpe
    return ImageMemoryEstimate(weights, activations, weights // 20 + OVERHEAD_BYTES, available, source)
