"""How long a command takes to start, against a bare `python -c "import typer, rich.console"`.

Targets (issue "Every unit of work all the way to the surface"): `gpuledger --version` and `gpuledger --help`
at most 3x the bare import, `gpuledger runs` (which opens the store: SQLAlchemy) at most 6x, and each
command's own `--help` (`bench`, `run`, `cost`, `report`: their options are declared from light modules, the
bench's from the kinds' descriptors; tests/cli/test_lazy_commands.py holds what each imports) reported beside
them. Each round runs the bare import and every command once, in
turn, in this one invocation, so the machine's load weighs on both alike; the ratio is of the medians.

The commands run as a user runs them: the console script beside this interpreter, the bytecode cache warm (one
unmeasured run of each first; PYTHONDONTWRITEBYTECODE is taken out of the children's environment), an empty
store in a temporary data directory.

Usage: .venv/bin/python benchmarks/startup_time.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGETS: dict[str, float | None] = {
    "--version": 3.0,
    "--help": 3.0,
    "runs": 6.0,
    "bench --help": None,
    "run --help": None,
    "cost --help": None,
    "report --help": None,
}
BARE = [sys.executable, "-c", "import typer, rich.console"]


def timed(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, timeout=120, env=env, check=False)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr.decode()[-400:]}")
    return wall


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    exe = Path(sys.executable).with_name("gpuledger")
    base = [str(exe)] if exe.exists() else [sys.executable, "-m", "gpuledger.cli.main"]
    with tempfile.TemporaryDirectory() as data:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["GPULEDGER_DATA_DIR"] = data
        env["GPULEDGER_DB"] = f"sqlite:///{Path(data) / 'store.sqlite'}"
        env["COLUMNS"] = "100"
        commands = {name: base + name.split() for name in TARGETS}
        for cmd in [BARE, *commands.values()]:  # warm the bytecode cache and the store
            timed(cmd, env)
        walls: dict[str, list[float]] = {name: [] for name in ["bare", *commands]}
        for _ in range(args.rounds):
            walls["bare"].append(timed(BARE, env))
            for name, cmd in commands.items():
                walls[name].append(timed(cmd, env))
    load = os.getloadavg()
    print(f"machine: {os.cpu_count()} CPUs, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} "
          f"(1/5/15 min); {args.rounds} rounds, medians")
    bare = statistics.median(walls["bare"])
    print(f"bare `python -c \"import typer, rich.console\"`: {bare:.3f} s")
    met = True
    for name, target in TARGETS.items():
        wall = statistics.median(walls[name])
        ratio = wall / bare
        verdict = ""
        if target is not None:
            ok = ratio <= target
            met = met and ok
            verdict = f" (target <= {target:g}x: {'met' if ok else 'NOT met'})"
        print(f"gpuledger {name}: {wall:.3f} s = {ratio:.2f}x bare{verdict}")
    print(f"start-up targets: {'all met' if met else 'NOT all met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
