"""Issue 33, item 8: a decode step has a floor. The kernels of one step run one after the other and none takes
less than the GPU's minimum time per kernel (docs/advise.md "The roofline": 10 kernels per decoder layer and
4 per step, an assumption; 70 µs for 80 kernels replayed as a CUDA graph, CUDA.jl's measurement). A model so
small that its bytes take less than that is not bandwidth-bound: the roofline's figure is the floor, and it
says so. Before, SmolLM2-135M got a 0.094 ms TPOT with no floor and no word."""

from __future__ import annotations

import json

import pytest
from cost_runs import MakeRun
from typer.testing import CliRunner

from gpuledger.catalog import Catalog
from gpuledger.cli.main import app
from gpuledger.cost import CostProfile, estimate_run
from gpuledger.cost.estimate.estimate_model import estimate_model
from gpuledger.cost.estimate.roofline_estimate import Workload, default_efficiency, roofline_point
from gpuledger.cost.pricing.modelarch import find_known

SMOLLM = find_known("dummy:smollm2-135m")  # 30 layers
QWEN = find_known("dummy:qwen2.5-7b")  # 28 layers
FLOOR_S = (30 * 10 + 4) * 70e-6 / 80  # 304 kernels x 0.875 µs


def test_a_tiny_models_decode_step_is_the_per_step_floor_not_its_bandwidth_bound(catalog: Catalog) -> None:
    assert SMOLLM is not None and SMOLLM.layers == 30
    p = roofline_point(SMOLLM, catalog.get("b200"), 1, Workload(128, 128, 1), "bf16", default_efficiency())
    # the bytes of one step (0.27 GB of weights at MBU 50 % of 8 TB/s) take far less than the floor
    assert p.memory_bound_s < FLOOR_S / 3
    assert p.step_s == pytest.approx(FLOOR_S) and p.step_bound == "per-step overhead floor"
    assert p.tpot_ms == pytest.approx(FLOOR_S * 1000)  # one sequence: no other prefills between its steps
    assert p.tokens_per_s_per_user == pytest.approx(1 / FLOOR_S)
    doc = p.document()
    step = doc.decode_step
    assert step.bound == "per-step overhead floor" and step.floor is not None and step.floor.kernels == 304
    assert "cuda.juliagpu.org" in step.floor.source and step.floor.origin == "estimate"
    assert step.warning is not None
    assert "per-step overhead floor" in step.warning and "not memory bandwidth" in step.warning
    assert "per-step overhead floor" in doc.tpot_ms.how
    assert doc.e2e_ms.value == pytest.approx(p.ttft_ms + p.tpot_ms * 127)


def test_a_model_whose_bytes_take_longer_is_bandwidth_bound_and_says_nothing_of_the_floor(
    catalog: Catalog,
) -> None:
    assert QWEN is not None
    p = roofline_point(QWEN, catalog.get("b200"), 1, Workload(128, 128, 1), "bf16", default_efficiency())
    assert p.step_bound == "memory bandwidth" and p.step_s == pytest.approx(p.memory_bound_s)
    assert p.floor is not None and p.floor.seconds < p.step_s and p.floor_warning() is None
    assert p.document().decode_step.warning is None


def test_the_no_run_estimate_warns_on_the_figure_and_its_terminal_lines_say_bounds(catalog: Catalog) -> None:
    assert SMOLLM is not None
    est = estimate_model(SMOLLM, catalog.get("b200"), Workload(128, 128, 1),
                         profile=CostProfile(rental_per_gpu_hour=2.0))
    assert any("per-step overhead floor" in w for w in est.warnings)
    args = ["estimate", "--model", "dummy:smollm2-135m", "--gpu", "B200", "--input-len", "128",
            "--output-len", "128"]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    per_user = next(x for x in lines if x.strip().startswith("tok/s per user:"))
    assert "an upper bound" in per_user and "the per-step floor: a lower bound" in per_user
    assert any(x.strip().startswith("why: decode step") and "per-step overhead floor" in x for x in lines)
    assert any(x.startswith("warning: the decode step is at the per-step overhead floor") for x in lines)
    doc = json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)
    assert doc["roofline"]["decode_step"]["bound"] == "per-step overhead floor"
    assert any("per-step overhead floor" in w for w in doc["warnings"])


def test_a_measured_tiny_model_scaled_below_the_floor_is_warned_about(
    make_run: MakeRun, catalog: Catalog
) -> None:
    # SmolLM2-135M on an H200 at 0.3 ms per output token; the bandwidth ratio to a B200 (8 / 4.8) would make
    # it 0.18 ms, below its 0.266 ms floor
    run = make_run(gpu="NVIDIA H200", model="dummy:smollm2-135m", ttft_ms=20.0, e2e_ms=20.0 + 999 * 0.3)
    est = estimate_run(run, "b200", CostProfile(rental_per_gpu_hour=4.0), catalog=catalog)
    warning = next(w for w in est.warnings if "per-step overhead floor" in w)
    assert f"TPOT {0.3 * 4.8 / 8:.3g} ms" in warning and f"({FLOOR_S * 1e3:.3g} ms" in warning
    # the same run on a slower GPU stays above the floor: nothing said
    slow = estimate_run(run, "l40s", CostProfile(rental_per_gpu_hour=1.0), catalog=catalog)
    assert not any("per-step overhead floor" in w for w in slow.warnings)
