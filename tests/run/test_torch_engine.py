"""The in-process PyTorch engine: device choice, memory refusal, loading, measuring and storing through the
bench's run lifecycle (window, telemetry, writer, interruption, failure)."""

from __future__ import annotations

import functools
import os
import signal
import sys
import threading
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuledger.bench import choice as ch
from gpuledger.bench.runner import Hooks, run_bench
from gpuledger.engines.torch import device as td
from gpuledger.engines.torch import imports as ti
from gpuledger.engines.torch import models as tm
from gpuledger.errors import (
    EngineError,
    InvalidInputError,
    MissingDependencyError,
    ResourceError,
    UsageError,
)
from gpuledger.kinds.text.options import torch_spec
from gpuledger.kinds.text.spec import TorchSpec
from gpuledger.kinds.text.summary import TextGenerationSummary
from gpuledger.records import RunInfo
from gpuledger.records.torchspec import GIB
from gpuledger.store import Store, open_store

torch = pytest.importorskip("torch", reason="the torch engine tests need torch (pip install '.[torch]')")
FakeTorch = Callable[[str], types.ModuleType]
GPU_HERE = bool(torch.cuda.is_available())


@pytest.fixture
def gpu_scenario(fake_torch: FakeTorch) -> FakeTorch:
    """Fake torch builds for device selection; transformers and the configs are loaded with the real
    torch first (transformers must never import the stand-in)."""
    ti.import_transformers()
    for m in tm.dummy_models().values():
        tm.hf_config_of(m)
    return fake_torch


def bench(store: Store, model: str, *, on_phase: Callable[[str], None] | None = None,
          on_progress: Callable[[int, int | None], None] | None = None, **spec: Any) -> RunInfo:
    """``gpuledger bench --engine torch`` as the library runs it: the spec, through the bench runner."""
    hooks = Hooks(on_phase=on_phase, on_progress=on_progress)
    return run_bench(torch_spec(model, **spec), store, hooks=hooks)


# ------------------------------------------------------------------------------------------ devices
@pytest.mark.skipif(GPU_HERE, reason="this machine has a GPU: auto picks it")
def test_auto_falls_back_to_the_cpu_on_a_cpu_build_and_says_why() -> None:
    dev = td.select_device("auto")
    assert dev.type == "cpu" and dev.torch_device == "cpu" and dev.vendor == "cpu"
    assert dev.build == "cpu"
    assert dev.fallback_reason is not None and "CPU-only build" in dev.fallback_reason
    assert dev.free_memory_bytes and dev.memory_source == "psutil.virtual_memory().available"
    assert td.resolve_dtype("auto", dev) == "fp32"


@pytest.mark.skipif(GPU_HERE, reason="this machine has a GPU")
def test_asking_for_cuda_without_a_gpu_is_a_resource_error() -> None:
    with pytest.raises(ResourceError) as err:
        td.select_device("cuda")
    assert err.value.exit_code == 8
    assert "--device cuda" in err.value.message


def test_a_cuda_build_without_a_driver_falls_back_to_the_cpu_with_torchs_own_reason(
    gpu_scenario: FakeTorch,
) -> None:
    gpu_scenario("cuda-build-no-driver")
    dev = td.select_device("auto")
    assert dev.type == "cpu" and dev.build == "cuda 12.8"
    assert dev.fallback_reason is not None and "Found no NVIDIA driver" in dev.fallback_reason
    with pytest.raises(ResourceError, match="Found no NVIDIA driver"):
        td.select_device("cuda")


def test_an_h200_is_chosen_with_bf16_and_its_free_memory(gpu_scenario: FakeTorch) -> None:
    gpu_scenario("h200-cuda")
    dev = td.select_device("auto")
    assert (dev.type, dev.torch_device, dev.vendor, dev.name) == ("cuda", "cuda:0", "nvidia", "NVIDIA H200")
    assert dev.build == "cuda 12.8" and dev.arch == "sm_90"
    assert dev.free_memory_bytes == 142000 * 1024**2 and dev.memory_source == "torch.cuda.mem_get_info"
    assert td.resolve_dtype("auto", dev) == "bf16"
    assert dev.text() == "NVIDIA H200 (cuda:0, torch 2.8.0+cu128)"  # the build said once: +cu128 is CUDA 12.8


def test_rocm_is_reported_as_an_amd_device_with_its_gfx_target(gpu_scenario: FakeTorch) -> None:
    gpu_scenario("mi300x-rocm")
    dev = td.select_device("auto")
    assert dev.type == "cuda" and dev.vendor == "amd"
    assert dev.build == "rocm 6.4.43482"
    assert dev.arch == "gfx942:sramecc+:xnack-"


def test_a_gpu_without_bf16_gets_fp16_and_refuses_an_explicit_bf16(gpu_scenario: FakeTorch) -> None:
    gpu_scenario("t4-cuda")
    dev = td.select_device("auto")
    assert td.resolve_dtype("auto", dev) == "fp16"
    with pytest.raises(ResourceError, match="bf16"):
        td.resolve_dtype("bf16", dev)


def test_unknown_device_and_dtype_values_are_usage_errors() -> None:
    with pytest.raises(UsageError):
        td.select_device("tpu")
    with pytest.raises(UsageError):
        td.resolve_dtype("int3", td.select_device("cpu"))
    assert td.resolve_dtype("bfloat16", td.select_device("cpu")) == "bf16"


# ------------------------------------------------------------------------------- default model choice
def test_run_picks_qwen25_7b_on_a_gpu_with_room_for_it(gpu_scenario: FakeTorch) -> None:
    gpu_scenario("h200-cuda")
    choice = ch.choose_run("auto")
    assert choice.plan.name == "dummy:qwen2.5-7b"
    assert choice.dtype == "bf16" and choice.skipped == []
    assert choice.workload == ch.RUN_WORKLOADS[("cuda", False)]


def test_run_steps_down_to_qwen25_05b_on_a_gpu_too_small_for_7b(gpu_scenario: FakeTorch) -> None:
    gpu_scenario("rtx3060-cuda")
    choice = ch.choose_run("auto")
    assert choice.plan.name == "dummy:qwen2.5-0.5b"
    assert len(choice.skipped) == 1 and choice.skipped[0].startswith("dummy:qwen2.5-7b: needs ~")


def test_run_on_a_cpu_with_little_memory_takes_smollm2_and_refuses_when_nothing_fits() -> None:
    choice = ch.choose_run("cpu", memory_budget_bytes=1 * GIB)
    assert choice.plan.name == "dummy:smollm2-135m"
    assert choice.skipped and choice.skipped[0].startswith("dummy:qwen2.5-0.5b")
    with pytest.raises(ResourceError) as err:
        ch.choose_run("cpu", memory_budget_bytes=100 * 1024**2)
    assert err.value.exit_code == 8 and "none of the default models fits" in err.value.message


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs Linux CPU affinity")
def test_on_a_small_cpu_the_default_is_smollm2_and_says_why_not_qwen() -> None:
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})  # this thread may now use one logical CPU, as in a small VM
    try:
        choice = ch.choose_run("cpu")
    finally:
        os.sched_setaffinity(0, before)
    assert choice.plan.name == "dummy:smollm2-135m"
    assert choice.workload == ch.RUN_WORKLOADS[("cpu", False)]
    assert "8 or more logical CPUs (this one has 1)" in choice.skipped[0]


def test_quick_on_a_cpu_is_smollm2_with_the_shortest_workload() -> None:
    choice = ch.choose_run("cpu", quick=True)
    assert choice.plan.name == "dummy:smollm2-135m"
    assert choice.workload == ch.RUN_WORKLOADS[("cpu", True)]


# ----------------------------------------------------------------------------------- memory estimate
def test_memory_estimate_adds_weights_kv_cache_activations_and_overhead() -> None:
    plan = tm.plan_model("dummy:qwen2.5-7b")
    dev = td.select_device("cpu")
    est = td.estimate_memory(plan.params, plan.shape, "bf16", batch_size=8, input_tokens=512,
                             output_tokens=256, device=dev)
    assert est.weights_bytes == plan.params * 2
    assert est.kv_cache_bytes == 8 * (512 + 256) * 57_344
    parts = est.weights_bytes + est.kv_cache_bytes + est.activation_bytes + est.overhead_bytes
    assert est.total_bytes == parts
    assert est.available_bytes == dev.free_memory_bytes


def test_a_model_that_cannot_fit_is_refused_before_loading_with_the_numbers(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 's.sqlite'}")
    try:
        with pytest.raises(ResourceError) as err:
            bench(store, "dummy:llama-3.1-8b", device="cpu", memory_budget_bytes=4 * GIB)
        assert store.list_runs() == []  # refused before anything was built or stored
    finally:
        store.close()
    msg = err.value.message
    assert err.value.exit_code == 8
    assert "dummy:llama-3.1-8b (8.03B params, fp32) does not fit in the RAM" in msg
    assert "needs ~" in msg and "weights 29.9 GiB" in msg
    assert "available 4.0 GiB (memory budget given (--memory-budget))" in msg


def test_the_7b_model_fits_an_h200_in_bf16(gpu_scenario: FakeTorch) -> None:
    gpu_scenario("h200-cuda")
    dev = td.select_device("cuda")
    plan = tm.plan_model("dummy:qwen2.5-7b")
    est = td.estimate_memory(plan.params, plan.shape, "bf16", 8, 512, 256, dev)
    assert est.fits and est.total_bytes < 20 * GIB
    td.ensure_fits(plan.name, plan.params, est, dev)


def test_lengths_beyond_the_models_positions_are_invalid(tiny_llama_dir: Path, tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 's.sqlite'}")
    try:
        with pytest.raises(InvalidInputError, match="at most 2048 positions"):
            bench(store, str(tiny_llama_dir), device="cpu", input_tokens=2000, output_tokens=100)
    finally:
        store.close()


# --------------------------------------------------------------------------------- loading models
def test_real_weights_load_from_a_saved_model_folder(tiny_llama_dir: Path) -> None:
    from safetensors.torch import load_file

    plan = tm.plan_model(str(tiny_llama_dir))
    assert plan.kind == "pretrained" and plan.params_method == "meta-device instantiation"
    saved = load_file(str(tiny_llama_dir / "model.safetensors"))
    assert plan.params == sum(t.numel() for t in saved.values())  # tied LM head stored once
    loaded = tm.load_model(plan, td.select_device("cpu"), "fp32")
    state = loaded.model.state_dict()
    for name, tensor in saved.items():
        assert torch.equal(state[name], tensor), name
    assert loaded.model.lm_head.weight is loaded.model.model.embed_tokens.weight


def test_a_dummy_model_is_built_with_the_published_shape_tied_weights_and_sane_values() -> None:
    plan = tm.plan_model("dummy:smollm2-135m")
    loaded = tm.load_model(plan, td.select_device("cpu"), "bf16", seed=1)
    model = loaded.model
    assert sum(p.numel() for p in model.parameters()) == plan.params == 134_515_008
    assert next(model.parameters()).dtype == torch.bfloat16
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert torch.all(model.model.norm.weight == 1)
    q = model.model.layers[0].self_attn.q_proj.weight.float()
    assert torch.isfinite(q).all() and 0.015 < q.std().item() < 0.025
    assert loaded.eos_token_id == 0


# ------------------------------------------------------------------------------- measuring & storing
def test_a_bench_run_stores_one_request_per_sequence_with_per_token_timestamps(
    tiny_llama_dir: Path, tmp_path: Path
) -> None:
    store = open_store(f"sqlite:///{tmp_path / 's.sqlite'}")
    threads_before = torch.get_num_threads()
    phases: list[str] = []
    progress: list[tuple[int, int | None]] = []
    try:
        made = bench(
            store, str(tiny_llama_dir), device="cpu", batch_size=2, input_tokens=12, output_tokens=5,
            num_requests=3, label="spec", telemetry=False, on_phase=phases.append,
            on_progress=lambda a, b: progress.append((a, b)),
        )
        run = store.get_run(made.id)
        records = store.get_requests(run.id)
    finally:
        store.close()
    assert (run.engine, run.status, run.label, run.unit) == ("torch", "complete", "spec", "token")
    assert run.num_requests == 4 and progress[-1] == (4, 4)  # 3 requested -> two whole batches of 2
    spec = run.config
    assert isinstance(spec, TorchSpec)
    assert (spec.batch_size, spec.concurrency, spec.dtype, spec.device) == (2, 2, "fp32", "cpu")
    assert spec.model is not None and spec.num_parameters == spec.model.params == run.config.parameter_count()
    assert run.workload["dataset"] == "random-token-ids" and run.workload["fixed_output"] is True
    assert run.workload["input_tokens"] == 12 and run.workload["num_requests"] == 4
    assert run.server["kind"] == "torch" and run.server["version"] == torch.__version__
    assert run.server["details"]["peak_memory"]["source"] == "getrusage ru_maxrss"
    assert run.server["details"]["warmup_s"] > 0  # one unmeasured batch first
    assert run.server["cpu"]["logical_cpus"] >= 1
    assert run.client["in_process_engine"] is True and "warnings" not in run.client
    assert isinstance(run.summary, TextGenerationSummary)
    assert run.summary.output_len_mismatch.count == 0
    assert run.summary.token_source == {"engine": 4}
    assert any(p.startswith("loading ") for p in phases)
    assert torch.get_num_threads() == threads_before  # a busy-CPU thread change does not outlive the run
    assert spec.cpu_threads is not None and spec.cpu_threads >= 1
    for r in records:
        assert r.ok and r.token_source == "engine"
        assert r.input_tokens == 12 and r.output_tokens == r.requested_output_tokens == 5
        assert len(r.chunk_times) == 5 and r.chunk_tokens is None
        assert r.chunk_times == sorted(r.chunk_times) and len(set(r.chunk_times)) == 5
        assert r.t_first == r.chunk_times[0] and r.t_end == r.chunk_times[-1]
        assert 0 <= r.t_send < r.t_first
        assert r.server_timings is None  # nothing a server reported: the engine's own clock only
    # both sequences of a batch are sent together and get their tokens at the same steps
    assert records[0].t_send == records[1].t_send and records[2].t_send == records[3].t_send
    assert records[0].chunk_times == records[1].chunk_times
    assert records[2].t_send >= records[1].t_end


def test_ctrl_c_keeps_the_finished_batches_as_an_incomplete_run(tiny_llama_dir: Path, tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 's.sqlite'}")

    def interrupt_after_first_batch(done: int, total: int | None) -> None:
        if done == 2:
            os.kill(os.getpid(), signal.SIGINT)

    try:
        run = bench(store, str(tiny_llama_dir), device="cpu", batch_size=2, input_tokens=8, output_tokens=3,
                    num_requests=6, telemetry=False, on_progress=interrupt_after_first_batch)
        (stored,) = store.list_runs()
        records = store.get_requests(run.id)
    finally:
        store.close()
    assert run.status == stored.status == "incomplete" and len(records) == 2
    assert run.summary is not None and run.summary.interrupted is not None
    assert run.summary.interrupted.signal == "SIGINT" and run.summary.interrupted.finished_requests == 2


@pytest.mark.parametrize("error", [ValueError("boom at a step"), RuntimeError("boom at a step")])
def test_an_exception_in_the_model_mid_run_ends_the_run_with_its_reason_and_telemetry_closed(
    tiny_llama_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    """The model raises in the second batch (any exception, not only a gpuledger one): the run is stored
    with the finished batch and the reason, never left `running` with the telemetry thread open."""
    transformers = ti.import_transformers()
    original = transformers.LlamaForCausalLM.forward
    broken = threading.Event()

    @functools.wraps(original)
    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        if broken.is_set():
            raise error
        return original(self, *args, **kwargs)

    monkeypatch.setattr(transformers.LlamaForCausalLM, "forward", forward)

    def break_after_first_batch(done: int, total: int | None) -> None:
        if done == 2:
            broken.set()

    store = open_store(f"sqlite:///{tmp_path / 's.sqlite'}")
    try:
        with pytest.raises(EngineError, match=f"{type(error).__name__}: boom at a step"):
            bench(store, str(tiny_llama_dir), device="cpu", batch_size=2, input_tokens=8, output_tokens=3,
                  num_requests=6, telemetry=True, telemetry_interval_s=0.05,
                  on_progress=break_after_first_batch)
        (run,) = store.list_runs()
        records = store.get_requests(run.id)
    finally:
        store.close()
    assert run.status == "incomplete" and len(records) == 2
    assert run.summary is not None and run.summary.aborted is not None
    assert run.summary.aborted.startswith("the run stopped on an error: generation failed on ")
    assert "boom at a step" in run.summary.aborted
    assert not [t.name for t in threading.enumerate() if t.name.startswith(("gpuledger-telemetry",
                                                                             "gpuledger-torch"))]
    assert run.config.telemetry is not None and run.config.telemetry.sources  # telemetry was closed


def test_the_time_cap_stops_starting_batches_and_says_so(tiny_llama_dir: Path, tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 's.sqlite'}")
    try:
        run = bench(store, str(tiny_llama_dir), device="cpu", batch_size=1, input_tokens=8, output_tokens=3,
                    num_requests=3, telemetry=False, max_duration_s=1e-6)
    finally:
        store.close()
    assert run.status == "complete" and run.num_requests == 1
    capped = [w for w in run.server["warnings"] if w.startswith("time cap")]
    assert capped == ["time cap 1e-06 s reached: ran 1 of 3 planned requests"]
    assert isinstance(run.config, TorchSpec) and run.config.requests_planned == 3


def test_without_torch_the_engine_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(MissingDependencyError) as err:
        td.select_device("auto")
    assert err.value.exit_code == 7
    assert err.value.message.startswith("torch not installed: pip install 'gpuledger[torch]'")
    assert ti.torch_status()[0] is False
