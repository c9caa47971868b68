"""MBU and MFU against a hand count (issue 19): bytes per decode step = the weights a step multiplies with +
the KV cache of every sequence in flight at its mean context; decode steps per second from the TPOT alone
(not prefill time). Two architectures (Qwen2.5-7B: grouped-query attention, untied LM head, q/k/v biases;
SmolLM2-135M: tied embeddings) at two concurrencies, each counted here from the published config.json
numbers, not with gpuledger's arithmetic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cost_runs import MakeRun
from stream_server import Scenario, StreamServer

from gpuledger.catalog import Catalog
from gpuledger.cli.main import main
from gpuledger.cost.pricing.efficiency import run_efficiency
from gpuledger.cost.pricing.modelarch import find_known

# The published config.json of each model (huggingface.co/<id>/blob/main/config.json).
QWEN_7B = dict(L=28, H=3584, n=28, k=4, d=128, inter=18944, V=152064, tied=False, bias=True)
SMOLLM_135M = dict(L=30, H=576, n=9, k=3, d=64, inter=1536, V=49152, tied=True, bias=False)


def hand_params(L: int, H: int, n: int, k: int, d: int, inter: int, V: int, tied: bool, bias: bool) -> int:
    attention = H * n * d + 2 * H * k * d + n * d * H + ((n * d + 2 * k * d) if bias else 0)
    per_layer = attention + 3 * H * inter + 2 * H
    return V * H * (1 if tied else 2) + L * per_layer + H


def hand_mbu(cfg: dict, concurrency: int, context: float, steps_per_s: float, bandwidth_tb_s: float) -> float:
    """(every weight but the embedding table, read once per step, + the KV of every sequence) x steps/s."""
    weights = (hand_params(**cfg) - cfg["V"] * cfg["H"]) * 2  # 16-bit: the run records no dtype
    if cfg["tied"]:
        weights += cfg["V"] * cfg["H"] * 2  # the one matrix is the LM head, read whole every step
    kv_per_sequence = 2 * cfg["L"] * cfg["k"] * cfg["d"] * 2 * context
    return (weights + concurrency * kv_per_sequence) * steps_per_s / (bandwidth_tb_s * 1e12)


@pytest.mark.parametrize(("model", "cfg"), [("Qwen/Qwen2.5-7B-Instruct", QWEN_7B),
                                            ("HuggingFaceTB/SmolLM2-135M", SMOLLM_135M)])
@pytest.mark.parametrize("concurrency", [1, 64])
def test_mbu_counts_weights_and_the_kv_cache_over_decode_time(
    make_run: MakeRun, catalog: Catalog, model: str, cfg: dict, concurrency: int
) -> None:
    # 100 requests of 500 prompt and 1000 output tokens; first token at 200 ms, then one every 20 ms.
    tpot_ms = 20.0
    e2e_ms = 200.0 + 999 * tpot_ms
    load = {"kind": "concurrency", "stages": [{"stage": f"c={concurrency}", "concurrency": concurrency}]}
    run = make_run(output_tps=1000, input_tps=500, window_s=100.0, num_ok=100, ttft_ms=200.0, e2e_ms=e2e_ms,
                   model=model, config={"load": load}, gpu="NVIDIA H100 80GB HBM3")
    eff = run_efficiency(run, catalog=catalog)
    context = 500 + 1000 / 2  # a sequence's mean context while it decodes
    expected = hand_mbu(cfg, concurrency, context, 1000.0 / tpot_ms, 3.35)
    assert eff.mbu == pytest.approx(expected, rel=1e-9)
    assert eff.origin == "measured" and eff.basis["decode_steps_per_s"] == pytest.approx(50.0)
    # The old figure (weights only, output tok/s / concurrency as steps/s, prefill time included) is not it.
    weights_only = (hand_params(**cfg) * 2) * (1000 / concurrency) / 3.35e12
    assert eff.mbu != pytest.approx(weights_only, rel=0.05)


@pytest.mark.parametrize(("model", "cfg"), [("qwen2.5-7b", QWEN_7B), ("dummy:smollm2-135m", SMOLLM_135M)])
def test_mfu_is_every_tokens_forward_flops_over_the_window(
    make_run: MakeRun, catalog: Catalog, model: str, cfg: dict
) -> None:
    run = make_run(output_tps=1000, input_tps=500, window_s=100.0, num_ok=100, ttft_ms=200.0,
                   e2e_ms=20180.0, model=model, gpu="NVIDIA H100 80GB HBM3")
    eff = run_efficiency(run, catalog=catalog)
    matmul = hand_params(**cfg) - cfg["V"] * cfg["H"] + (cfg["V"] * cfg["H"] if cfg["tied"] else 0)
    attention = 2 * cfg["L"] * cfg["n"] * 2 * cfg["d"]  # QK^T and AV per position of context
    prefill_per_token = 2 * matmul + attention * 500 / 2  # a prompt token sees half the prompt on average
    decode_per_token = 2 * matmul + attention * (500 + 1000 / 2)
    flops = 500 * prefill_per_token + 1000 * decode_per_token
    assert eff.mfu == pytest.approx(flops / 989e12, rel=1e-9)


def test_the_architecture_arithmetic_gives_the_published_parameter_counts() -> None:
    for name, published, non_embedding in (("dummy:qwen2.5-7b", 7.61e9, 6.53e9),
                                           ("dummy:qwen2.5-0.5b", 0.49e9, 0.36e9),
                                           ("dummy:llama-3.1-8b", 8.03e9, None),
                                           ("deepseek-r1", 671e9, None)):
        arch = find_known(name)
        assert arch is not None
        assert arch.params == pytest.approx(published, rel=0.02), name
        if non_embedding is not None:  # the model cards' "Non-Embedding" figure
            assert arch.non_embedding_params == pytest.approx(non_embedding, rel=0.01), name
    r1 = find_known("DeepSeek R1")
    assert r1 is not None and r1.active_params == pytest.approx(37e9, rel=0.02)
    # MLA caches a 512-wide latent and a 64-wide RoPE key per layer, not 2 x 128 heads x 128
    assert r1.kv_elements_per_token == 61 * (512 + 64)


def test_a_mixture_of_experts_step_reads_only_the_experts_its_tokens_use() -> None:
    r1 = find_known("deepseek-r1")
    assert r1 is not None and r1.moe is not None
    one = r1.read_params_per_step(1)
    assert one == pytest.approx(r1.active_matmul_params)  # one token: its 8 experts of 256
    # 8 tokens: 256 x (1 - (1 - 8/256)^8) distinct experts expected per layer
    touched = 256 * (1 - (1 - 8 / 256) ** 8)
    m = r1.moe
    expected = r1.matmul_params - m.routed_params + touched * m.expert_params * m.moe_layers
    assert r1.read_params_per_step(8) == pytest.approx(expected)
    assert r1.read_params_per_step(10_000) == pytest.approx(r1.matmul_params, rel=1e-6)  # all of them


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"model": "test-model"}, "no known config"),
        ({"gpu": None, "devices": [{"device": "cpu", "vendor": "cpu", "name": "AMD EPYC"}]}, "a CPU run"),
        ({"gpu": "NVIDIA Tesla T4"}, "not in the GPU catalog"),
        ({"ttft_ms": None, "e2e_ms": 2000.0}, "no request had a TPOT"),
    ],
)
def test_not_computable_is_a_reason_never_a_zero(
    make_run: MakeRun, catalog: Catalog, kwargs: dict, reason: str
) -> None:
    eff = run_efficiency(make_run(**kwargs), catalog=catalog)
    assert eff.mbu is None and reason in eff.reasons["mbu"]
    assert eff.text().startswith("n/a — ") or "MBU n/a" in eff.text()
    assert "0 %" not in eff.text()


def test_an_mbu_over_100_percent_is_called_out(make_run: MakeRun, catalog: Catalog) -> None:
    # 1000 tokens per request in 1.8 s: 555 decode steps/s of a 15 GB model is 8 TB/s on a 3.35 TB/s part
    eff = run_efficiency(make_run(model="qwen2.5-7b"), catalog=catalog)
    assert eff.mbu is not None and eff.mbu > 1
    assert any("over 100 %" in a for a in eff.assumptions)


LLAMA_8B_CONFIG = {  # meta-llama/Llama-3.1-8B config.json (its architecture fields)
    "model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 14336, "vocab_size": 128256,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "max_position_embeddings": 131072,
}


def test_a_server_run_of_an_unknown_name_gets_its_mbu_from_bench_model_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "llama" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps(LLAMA_8B_CONFIG))
    with StreamServer(Scenario(ttft_s=0.01, itl_s=0.002)) as srv:
        # a server measured from another machine: no telemetry of the GPUs that served it
        args = ["bench", "--base-url", srv.url, "--input-len", "16", "--output-len", "8",
                "--concurrency", "2", "--num-requests", "6", "--no-telemetry", "--json"]
        assert main([*args, "--model-config", str(config.parent)]) == 0
        run_id = json.loads(capsys.readouterr().out)["id"]
        assert main(args) == 0
        plain = json.loads(capsys.readouterr().out)["id"]
    assert main(["show", run_id, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["config"]["model_architecture"]["path"] == str(config.resolve())
    assert "records no GPU" in shown["efficiency"]["reasons"]["mbu"]
    # priced as served by an H200 (cost --gpu): the MBU of test-model with the config's architecture
    on_h200 = ["--gpu", "h200", "--gpus", "1", "--profile", "h200-rent", "--no-save", "--json"]
    assert main(["cost", run_id, *on_h200]) == 0
    eff = json.loads(capsys.readouterr().out)["efficiency"]
    assert eff["origin"] == "measured" and eff["mbu"] is not None and eff["model"] == "test-model"
    assert eff["dtype"] == "bf16" and "bench --model-config" in eff["basis"]["model"]
    llama = find_known("dummy:llama-3.1-8b")
    assert llama is not None
    assert eff["basis"]["weight_bytes_per_step"] == (llama.params - 128256 * 4096) * 2
    assert main(["cost", plain, *on_h200]) == 0
    assert "no known config" in json.loads(capsys.readouterr().out)["efficiency"]["reasons"]["mbu"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--engine", "torch", "--model", "dummy:smollm2-135m"], "--engine torch records the model"),
        (["--task", "image"], "--model-config: for --task text"),
    ],
)
def test_model_config_is_for_server_runs(
    tmp_path: Path, extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA_8B_CONFIG))
    assert main(["bench", *extra, "--model-config", str(config)]) == 2
    assert message in capsys.readouterr().err


def test_a_model_config_that_is_not_one_is_refused_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "config.json"
    bad.write_text("[1, 2]")
    assert main(["bench", "--base-url", "http://127.0.0.1:9", "--model-config", str(bad)]) == 2
    assert "not a JSON object" in capsys.readouterr().err
    assert main(["bench", "--base-url", "http://127.0.0.1:9", "--model-config", str(tmp_path / "no")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_cost_show_and_report_show_mbu_and_mfu_of_a_gpu_run(
    make_run: MakeRun, catalog: Catalog, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import dataclasses

    from gpuledger.cost.pricing.efficiency import pct_text
    from gpuledger.store import open_store

    run = make_run(model="Qwen/Qwen2.5-7B-Instruct", e2e_ms=20180.0)
    store = open_store(None)
    try:
        empty = dataclasses.replace(run, status="running", summary=None, telemetry_summary=[])
        run_id = store.create_run(empty)
        store.update_run(run_id, status="complete", summary=run.summary,
                         telemetry_summary=run.telemetry_summary)
    finally:
        store.close()
    eff = run_efficiency(run, catalog=catalog)
    line = f"MBU / MFU: MBU {pct_text(eff.mbu)}, MFU {pct_text(eff.mfu)} (measured)"
    monkeypatch.setenv("COLUMNS", "120")
    for args in (["show", run_id], ["cost", run_id, "--no-save"], ["report", run_id]):
        assert main(args) == 0
        assert line in capsys.readouterr().out, args
    assert main(["report", run_id, "--json"]) == 0
    numbers = json.loads(capsys.readouterr().out)["numbers"]
    assert numbers["runs"][0]["cost"]["efficiency"]["mbu"] == pytest.approx(eff.mbu)
