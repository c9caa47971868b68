"""Every benchmark script the README's "Measured" table quotes still runs against today's code.

The scripts are not tests of speed (their targets are checked by running them: benchmarks/README.md); they
build runs, specs and summaries through the library, so a change there can break a script nobody runs in
the suite (report_scale.py once built a run config of a format the store no longer takes, and crashed).
Each runs here at a size that takes seconds. Its exit code says whether its target was met at that size,
which at this size means nothing: 0 or 1 both pass, a traceback or any other code fails. The figure line
each prints must be there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"

SMALL: dict[str, tuple[list[str], str]] = {
    "report_scale.py": (["--requests", "200", "--repeat", "1"], "target: build_report"),
    "doctor_time.py": (["--runs", "1", "--skip-probe"], "target < 2 s wall"),
    "startup_time.py": (["--rounds", "1"], "start-up targets:"),
    "sampler_overhead.py": (["--seconds", "1"], "sampler overhead:"),
    "timing_accuracy.py": (["--num-requests", "8", "--output-len", "8"], "difference TTFT"),
    "loadgen_ceiling.py": (
        ["--clients", "gpuledger,bare", "--rounds", "1", "--num-requests", "20", "--output-len", "16",
         "--no-pin"],
        "gpuledger counted exactly",
    ),
    "first_request.py": (["--loopback", "--rounds", "1"], "target: <= 2 s for 2000 requests"),
    "torch_engine_overhead.py": (
        ["--rounds", "5", "--requests", "4", "--batch", "2", "--input-tokens", "8", "--output-tokens", "4"],
        "median output tok/s",
    ),
    "train_overhead.py": (
        ["--rounds", "5", "--steps", "1", "--seq-len", "16", "--batch", "1"], "engine median"
    ),
    "diffusers_overhead.py": (["--rounds", "1", "--images", "1", "--steps", "1", "--size", "32"], "median:"),
    "serve_load.py": (["--runs", "300", "--clients", "4", "--requests", "8"], "serve load:"),
}
NEEDS_TORCH = {"torch_engine_overhead.py", "train_overhead.py", "diffusers_overhead.py"}


def test_every_benchmark_script_is_exercised_here() -> None:
    scripts = {p.name for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_")}
    assert scripts == set(SMALL), "add the new script to SMALL (or remove the old one from it)"


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(SMALL))
def test_the_benchmark_runs_at_a_small_size(script: str, tmp_path: Path) -> None:
    if script in NEEDS_TORCH:
        pytest.importorskip("torch", reason=f"{script} needs torch (pip install '.[torch]')")
    if script == "diffusers_overhead.py":
        pytest.importorskip("diffusers", reason=f"{script} needs diffusers (pip install '.[image]')")
    args, figure = SMALL[script]
    db = f"sqlite:///{tmp_path / 's.sqlite'}"
    env = {**os.environ, "GPULEDGER_DATA_DIR": str(tmp_path), "GPULEDGER_DB": db}
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True, text=True, timeout=300, env=env, cwd=BENCHMARKS.parent,
    )
    output = done.stdout + done.stderr
    assert "Traceback" not in output, output[-3000:]
    assert done.returncode in (0, 1), output[-3000:]
    assert figure in output, output[-3000:]
