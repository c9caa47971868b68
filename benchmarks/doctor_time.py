"""How long `gpuledger doctor` takes on this machine (target: < 2 s wall without --deep).

Prints, for N runs each:
- the whole CLI (`gpuledger doctor --json --no-store`) as a subprocess: wall seconds;
- in-process phases: importing the CLI, collect_facts(), diagnose();
- the PyTorch child-process probe alone (the slow part, only run when a GPU is present or the torch
  build is a GPU build): wall seconds, so its cost is visible even on a CPU-only machine.

Usage: .venv/bin/python benchmarks/doctor_time.py [--runs 5] [--skip-probe]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def stats(values: list[float]) -> str:
    return (
        f"median {statistics.median(values):.3f} s, min {min(values):.3f} s, max {max(values):.3f} s "
        f"(n={len(values)})"
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--skip-probe", action="store_true", help="do not time the torch child-process probe")
    args = parser.parse_args()
    exe = Path(sys.executable).with_name("gpuledger")
    cmd = (
        [str(exe), "doctor", "--json", "--no-store"]
        if exe.exists()
        else [sys.executable, "-m", "gpuledger.cli.main", "doctor", "--json", "--no-store"]
    )

    walls: list[float] = []
    cpus: list[float] = []
    codes: set[int] = set()
    for _ in range(args.runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, timeout=120, env={**os.environ}, check=False)
        walls.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
        codes.add(proc.returncode)
    load = os.getloadavg()
    print(
        f"machine: {os.cpu_count()} CPUs, load average "
        f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1/5/15 min)"
    )
    print(
        f"gpuledger doctor --json --no-store (CLI, subprocess) wall: {stats(walls)}; "
        f"exit codes {sorted(codes)}"
    )
    print(f"  CPU time (user+sys, incl. its child processes; independent of other load): {stats(cpus)}")

    t0 = time.perf_counter()
    import gpuledger.cli.main  # noqa: F401

    print(f"import gpuledger.cli.main (in-process, first import): {time.perf_counter() - t0:.3f} s")

    from gpuledger.doctor import diagnose
    from gpuledger.facts import collect_facts

    collects: list[float] = []
    diags: list[float] = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        facts = collect_facts()
        collects.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        diagnose(facts)
        diags.append(time.perf_counter() - t0)
    print(f"collect_facts() (collectors run concurrently): {stats(collects)}")
    print(f"diagnose(facts): {stats(diags)}")
    probe = facts.frameworks.torch.probe
    print(f"torch child-process probe in those runs: {'ran' if probe else 'not run (no GPU, CPU build)'}")

    if not args.skip_probe and facts.frameworks.torch.installed:
        from gpuledger.facts.frameworks import probe_torch
        from gpuledger.facts.runner import SubprocessRunner

        result = probe_torch(SubprocessRunner(), sys.executable, deep=False)
        print(
            f"torch child-process probe alone (import torch + cuda.is_available()): {result.duration_s} s "
            f"(is_available={result.is_available}, error={result.error})"
        )
    ok = statistics.median(walls) < 2.0
    print(
        f"target < 2 s wall for `gpuledger doctor`: {'met' if ok else 'NOT met'} (median wall); "
        f"CPU time median {statistics.median(cpus):.2f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
