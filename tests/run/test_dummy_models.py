"""Built-in architectures (`--model dummy:NAME`) are the published models, by parameter count."""

from __future__ import annotations

import pytest

from gpuledger.engines.torch import models as te
from gpuledger.errors import NotFoundError

NAMES = ["smollm2-135m", "qwen2.5-0.5b", "qwen2.5-7b", "llama-3.1-8b"]


def test_the_four_published_models_are_built_in() -> None:
    assert set(NAMES) <= set(te.dummy_models())


@pytest.mark.parametrize("name", NAMES)
def test_parameter_count_from_config_arithmetic_is_within_2_percent_of_published(name: str) -> None:
    model = te.get_dummy(name)
    counted = te.param_count(te.shape_of_dummy(model))
    assert abs(counted / model.published_params - 1) < 0.02, (counted, model.published_params)


@pytest.mark.parametrize("name", NAMES)
def test_parameter_count_of_the_model_built_on_the_meta_device_matches_published(name: str) -> None:
    model = te.get_dummy(name)
    on_meta = te.count_params_on_meta(te.hf_config_of(model))
    assert abs(on_meta / model.published_params - 1) < 0.02, (on_meta, model.published_params)
    # the arithmetic used for memory estimates is exact for these architectures
    assert on_meta == te.param_count(te.shape_of_dummy(model))


def test_exact_counts_match_the_published_safetensors_totals() -> None:
    # Totals the Hub shows for these checkpoints' safetensors: the configs are the real architectures.
    assert te.param_count(te.shape_of_dummy(te.get_dummy("smollm2-135m"))) == 134_515_008
    assert te.param_count(te.shape_of_dummy(te.get_dummy("qwen2.5-0.5b"))) == 494_032_768
    assert te.param_count(te.shape_of_dummy(te.get_dummy("qwen2.5-7b"))) == 7_615_616_512
    assert te.param_count(te.shape_of_dummy(te.get_dummy("llama-3.1-8b"))) == 8_030_261_248


@pytest.mark.parametrize("name", NAMES)
def test_every_builtin_states_where_its_config_and_count_come_from(name: str) -> None:
    model = te.get_dummy(name)
    assert model.config_source.startswith("https://huggingface.co/") and model.config_source.endswith(
        "config.json"
    )
    assert model.params_source.startswith("https://huggingface.co/")
    assert model.params_text
    cfg = model.config
    assert cfg.num_attention_heads % cfg.num_key_value_heads == 0


def test_the_transformers_config_carries_the_published_fields() -> None:
    cfg = te.hf_config_of(te.get_dummy("llama-3.1-8b"))
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_key_value_heads) == (32, 4096, 8)
    assert cfg.rope_parameters["rope_type"] == "llama3"
    assert cfg.rope_parameters["rope_theta"] == 500000.0
    qwen = te.hf_config_of(te.get_dummy("qwen2.5-7b"))
    assert qwen.model_type == "qwen2" and qwen.tie_word_embeddings is False


def test_dummy_names_are_case_insensitive_and_take_the_prefix() -> None:
    assert te.get_dummy("dummy:Qwen2.5-0.5B").name == "qwen2.5-0.5b"


def test_an_unknown_dummy_model_is_not_found_and_lists_the_builtins() -> None:
    with pytest.raises(NotFoundError) as err:
        te.get_dummy("dummy:gpt-5")
    assert err.value.exit_code == 3
    assert "dummy:qwen2.5-7b" in err.value.message


def test_kv_cache_bytes_per_token_follow_the_config() -> None:
    shape = te.shape_of_dummy(te.get_dummy("qwen2.5-7b"))
    # 2 (K,V) x 28 layers x 4 KV heads x 128 dims x 2 bytes
    assert shape.kv_bytes_per_token("bf16") == 2 * 28 * 4 * 128 * 2 == 57_344
