"""Model FLOPs per token (torchtitan's convention) against a hand count of two built-in architectures, the
non-embedding parameters against the real model built on the meta device, and the peak FLOP/s MFU divides by
(the catalog's, per dtype; a CPU, an unknown GPU or fp32 say why there is none)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuledger.engines.torch import models as tm
from gpuledger.engines.torch import trainplan as tp
from gpuledger.engines.torch.device import DeviceInfo

torch = pytest.importorskip("torch", reason="the meta-device count needs torch")


def test_smollm2_135m_flops_per_token_is_the_hand_count() -> None:
    shape = tm.shape_of_dummy(tm.get_dummy("dummy:smollm2-135m"))
    # hidden 576, 30 layers, 9 query heads and 3 KV heads of 64, MLP 1536, vocab 49152, tied embeddings:
    attention = 576 * 576 + 2 * 576 * 192 + 576 * 576  # q, k and v, o
    mlp = 3 * 576 * 1536  # gate, up, down
    per_layer = attention + mlp + 2 * 576  # + two RMSNorms
    non_embedding = 30 * per_layer + 576  # + the final norm; the (tied) embedding left out
    assert non_embedding == 106_203_456
    params = tp.dummy_parameters(shape)
    assert params == non_embedding + 49152 * 576
    assert tp.non_embedding_parameters(params, shape) == non_embedding
    # 6 × N + 12 × layers × hidden × sequence length, at a sequence of 64 tokens
    assert tp.flops_per_token(params, shape, 64) == 6 * 106_203_456 + 12 * 30 * 576 * 64 == 650_491_776


def test_qwen2_5_0_5b_flops_per_token_is_the_hand_count() -> None:
    shape = tm.shape_of_dummy(tm.get_dummy("dummy:qwen2.5-0.5b"))
    # hidden 896, 24 layers, 14 query heads and 2 KV heads of 64 with q/k/v biases, MLP 4864, vocab 151936:
    attention = 896 * 896 + 2 * 896 * 128 + 896 * 896 + (896 + 2 * 128)
    per_layer = attention + 3 * 896 * 4864 + 2 * 896
    non_embedding = 24 * per_layer + 896
    assert non_embedding == 357_898_112  # the model card: "Non-Embedding: 0.36B"
    params = tp.dummy_parameters(shape)
    assert tp.flops_per_token(params, shape, 128) == 6 * non_embedding + 12 * 24 * 896 * 128 == 2_180_418_816


def test_an_untied_head_counts_and_the_input_embedding_does_not() -> None:
    shape = tm.shape_of_dummy(tm.get_dummy("dummy:qwen2.5-7b"))  # tie_word_embeddings: false
    params = tp.dummy_parameters(shape)
    head = shape.vocab_size * shape.hidden_size
    assert tp.non_embedding_parameters(params, shape) == params - head  # the LM head is still in it
    assert tp.non_embedding_parameters(params, shape) > 6.5e9  # "Non-Embedding: 6.53B" + its LM head


@pytest.mark.parametrize("name", ["dummy:smollm2-135m", "dummy:qwen2.5-0.5b"])
def test_the_parameter_count_is_the_real_models(name: str) -> None:
    dummy = tm.get_dummy(name)
    assert tp.dummy_parameters(tm.shape_of_dummy(dummy)) == tm.count_params_on_meta(tm.hf_config_of(dummy))


def _device(**kw: object) -> DeviceInfo:
    base = DeviceInfo(
        type="cuda",
        torch_device="cuda:0",
        vendor="nvidia",
        name="NVIDIA H200",
        build="cuda 12.8",
        torch_version="2.8.0",
        total_memory_bytes=141 * 10**9,
        free_memory_bytes=140 * 10**9,
        memory_source="torch.cuda.mem_get_info",
        bf16_supported=True,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def test_peak_flops_come_from_the_catalog_at_the_runs_dtype() -> None:
    peak, source = tp.peak_flops(_device(), "bf16")
    assert peak == pytest.approx(989e12)  # the H200's dense FP16/BF16 tensor figure
    assert "NVIDIA H200" in source and "989" in source


@pytest.mark.parametrize(
    ("device", "dtype", "reason"),
    [
        (
            {"type": "cpu", "torch_device": "cpu", "vendor": "cpu", "name": "AMD EPYC"},
            "fp32",
            "no peak FLOP/s for AMD EPYC",
        ),
        ({"name": "NVIDIA Unreleased X9"}, "bf16", "no peak FLOP/s for NVIDIA Unreleased X9"),
        ({}, "fp32", "no peak FLOP/s for NVIDIA H200 at fp32"),
    ],
)
def test_without_a_peak_the_reason_names_the_device(
    device: dict[str, object], dtype: str, reason: str
) -> None:
    peak, why = tp.peak_flops(_device(**device), dtype)
    assert peak is None and why.startswith(reason)
