"""A tiny, real Llama checkpoint for tests: random weights, a byte-level BPE tokenizer, a chat template.

``make_tiny_llama(dir)`` writes a Hugging Face model folder that transformers, vLLM's CPU build and
gpuledger's torch engine load like any downloaded model::

    config.json, generation_config.json, model.safetensors,
    tokenizer.json, tokenizer_config.json, chat_template.jinja

Architecture (COOKBOOK.md): ``LlamaConfig(vocab_size=len(tok), hidden_size=128, intermediate_size=256,
num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=2048,
tie_word_embeddings=True)`` -> head_dim 64, which vLLM's CPU attention accepts (16 is rejected).

The folder is deterministic (fixed seed, fixed training text): two builds hold byte-identical weights
and tokenizer. It is built once per test session (per process) and copied for later calls, so asking
for it in many tests costs one build (a few seconds, mostly importing transformers).
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import threading
from pathlib import Path

__all__ = ["CHAT_TEMPLATE", "SPECIAL_TOKENS", "TRAINING_TEXT", "make_tiny_llama"]

# ChatML-style template so /v1/chat/completions works on servers that load this folder.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
TRAINING_TEXT = (
    "The capital of France is Paris.",
    "What does a token of my workload cost on my GPU stack?",
    "gpuledger measures tokens per second, time to first token, power and money.",
    "Run your own model on your own data and record time, power and cost.",
    "NVIDIA, AMD or CPU: the driver, the runtime and the framework must all agree.",
    "Hello world! Numbers 0 1 2 3 4 5 6 7 8 9 and punctuation: , . ; : ? ! ( ) [ ] { }",
)
_VOCAB_SIZE = 512
_SEED = 0
_MARKER = ".gpuledger-tiny-llama"

_lock = threading.Lock()
_cache: Path | None = None


def _build(dest: Path) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=_VOCAB_SIZE,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(list(TRAINING_TEXT), trainer=trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token="<|endoftext|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )
    tok.chat_template = CHAT_TEMPLATE

    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(_SEED)
        model = LlamaForCausalLM(config)
    model.eval()
    dest.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dest)
    tok.save_pretrained(dest)
    (dest / _MARKER).write_text("complete\n")


def make_tiny_llama(dir: Path) -> Path:
    """Write the tiny Llama model folder into ``dir`` (created if needed) and return ``dir``.

    Deterministic; the first call in a process builds the model, later calls copy that build.
    A ``dir`` that already holds a complete build is returned as it is.
    """
    global _cache
    dir = Path(dir)
    if (dir / _MARKER).is_file():
        return dir
    with _lock:
        if _cache is None or not (_cache / _MARKER).is_file():
            root = Path(tempfile.mkdtemp(prefix="gpuledger-tiny-llama-"))
            atexit.register(shutil.rmtree, root, ignore_errors=True)
            cache = root / "model"
            _build(cache)
            _cache = cache
        dir.mkdir(parents=True, exist_ok=True)
        shutil.copytree(_cache, dir, dirs_exist_ok=True)
    return dir
