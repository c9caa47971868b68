"""Framework facts: PyTorch's build read from its ``torch/version.py`` without importing it (fast),
the real import probed in a CHILD process with a timeout (device names, ``is_available``, and with
``--deep`` a matmul and a copy on each device), and inference engine versions."""

from __future__ import annotations

import ast
import importlib.metadata
import os
import platform
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from gpuledger.facts.image_stack import collect_image_stack
from gpuledger.facts.model import (
    DeepResult,
    EngineVersion,
    FrameworkFacts,
    TorchBuild,
    TorchDevice,
    TorchFacts,
    TorchProbe,
)
from gpuledger.facts.runner import CommandResult, Runner
from gpuledger.facts.tool_output import ToolOutputError, load_json
from gpuledger.facts.train_probe import TRAIN_PROBE_SCRIPT, parse_train

PROBE_TIMEOUT_S = 60.0
DEEP_TIMEOUT_S = 300.0
PROBE_MARKER = "GPULEDGER_TORCH_PROBE "

# Runs in a child process: `python -c PROBE_SCRIPT [deep]`. Prints one marker line with JSON.
PROBE_SCRIPT = r"""
import json, sys, time
out = {"error": None}
def emit():
    sys.stdout.write("GPULEDGER_TORCH_PROBE " + json.dumps(out) + "\n")
    sys.stdout.flush()
try:
    import torch
except Exception as exc:
    out["error"] = "import torch failed: %s: %s" % (type(exc).__name__, exc)
    emit()
    sys.exit(0)
out["version"] = str(getattr(torch, "__version__", None))
ver = getattr(torch, "version", None)
out["cuda"] = getattr(ver, "cuda", None)
out["hip"] = getattr(ver, "hip", None)
try:
    out["is_available"] = bool(torch.cuda.is_available())
    out["device_count"] = int(torch.cuda.device_count()) if out["is_available"] else 0
except Exception as exc:
    out["error"] = "torch.cuda failed: %s: %s" % (type(exc).__name__, exc)
    emit()
    sys.exit(0)
devices = []
for i in range(out["device_count"]):
    d = {"index": i}
    try:
        p = torch.cuda.get_device_properties(i)
        d["name"] = p.name
        d["total_memory_bytes"] = int(p.total_memory)
        d["capability"] = "%d.%d" % (p.major, p.minor)
    except Exception as exc:
        d["name"] = None
        d["error"] = str(exc)
    devices.append(d)
out["devices"] = devices
if "deep" in sys.argv[1:]:
    results = []
    targets = ["cuda:%d" % i for i in range(out["device_count"])] or ["cpu"]
    for dev in targets:
        gpu = dev != "cpu"
        dtype = torch.float16 if gpu else torch.float32
        n = 8192 if gpu else 1024
        iters = 20 if gpu else 3
        nbytes = (1 << 30) if gpu else (1 << 27)
        copies = 20 if gpu else 3
        r = {"device": dev, "dtype": str(dtype).replace("torch.", ""), "matmul_n": n,
             "matmul_iterations": iters, "copy_bytes": nbytes, "copy_iterations": copies, "error": None,
             "device_name": torch.cuda.get_device_name(dev) if gpu else "cpu"}
        try:
            sync = (lambda: torch.cuda.synchronize(dev)) if gpu else (lambda: None)
            a = torch.randn(n, n, device=dev, dtype=dtype)
            b = torch.randn(n, n, device=dev, dtype=dtype)
            for _ in range(2):
                a @ b
            sync()
            t0 = time.perf_counter()
            for _ in range(iters):
                a @ b
            sync()
            dt = time.perf_counter() - t0
            r["matmul_tflops"] = 2.0 * n ** 3 * iters / dt / 1e12
            del a, b
            src = torch.empty(nbytes // 4, device=dev, dtype=torch.float32)
            dst = torch.empty_like(src)
            dst.copy_(src)
            sync()
            t0 = time.perf_counter()
            for _ in range(copies):
                dst.copy_(src)
            sync()
            dt = time.perf_counter() - t0
            r["copy_gb_s"] = 2.0 * nbytes * copies / dt / 1e9
            del src, dst
        except Exception as exc:
            r["error"] = "%s: %s" % (type(exc).__name__, exc)
        results.append(r)
    out["deep"] = results
"""
PROBE_SCRIPT += TRAIN_PROBE_SCRIPT + "emit()\n"  # --deep: a few training steps on each device


def _assigned_strings(source: str) -> dict[str, str | None]:
    """Top-level ``NAME = 'literal'`` / ``NAME: T = None`` assignments of a module, without running it."""
    values: dict[str, str | None] = {}
    tree = ast.parse(source)
    for node in tree.body:
        target: ast.expr | None = None
        value: ast.expr | None = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        if (
            isinstance(target, ast.Name)
            and isinstance(value, ast.Constant)
            and (isinstance(value.value, str) or value.value is None)
        ):
            values[target.id] = value.value
    return values


_SYS_PATH_SCRIPT = "import json, sys; print(json.dumps(sys.path))"


def search_path(env: Mapping[str, str], python: str | None = None, runner: Runner | None = None) -> list[str]:
    """Where ``python`` (default: this interpreter) started with ``env`` looks for packages.

    For this interpreter that is PYTHONPATH then our own ``sys.path``; another interpreter (the
    workload's virtual environment, ``--python``) is asked once (a ~20 ms child process)."""
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if python is None or runner is None or Path(python) == Path(sys.executable):
        return extra + [p for p in sys.path if p]
    result = runner([python, "-c", _SYS_PATH_SCRIPT], timeout_s=15.0)
    try:
        paths = load_json(result.stdout, python) if result.ok else None
    except ToolOutputError:
        paths = None
    if not isinstance(paths, list):
        raise ValueError(f"cannot ask {python} for its sys.path: {result.summary()}")
    return [p for p in paths if isinstance(p, str) and p]


def find_torch(
    env: Mapping[str, str], python: str | None = None, runner: Runner | None = None
) -> Path | None:
    for entry in search_path(env, python, runner):
        candidate = Path(entry) / "torch" / "version.py"
        if candidate.is_file():
            return candidate.parent
    return None


def build_of(cuda: str | None, hip: str | None) -> TorchBuild:
    if hip:
        return "rocm"
    if cuda:
        return "cuda"
    return "cpu"


def torch_from_files(
    env: Mapping[str, str], python: str | None = None, runner: Runner | None = None
) -> TorchFacts:
    """Version and build from ``torch/version.py`` (no import: importing torch takes seconds)."""
    location = find_torch(env, python, runner)
    if location is None:
        return TorchFacts(installed=False, source="search path", error="no torch package on the Python path")
    facts = TorchFacts(installed=True, location=str(location), source="torch/version.py")
    try:
        values = _assigned_strings((location / "version.py").read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError) as exc:
        facts.build = "unknown"
        facts.error = f"cannot read {location / 'version.py'}: {exc}"
        return facts
    facts.version = values.get("__version__")
    facts.cuda, facts.hip = values.get("cuda"), values.get("hip")
    facts.build = build_of(facts.cuda, facts.hip)
    return facts


def parse_probe_output(result: CommandResult, python: str) -> TorchProbe:
    probe = TorchProbe(
        ran=result.ran,
        python=python,
        timed_out=result.timed_out,
        duration_s=round(result.duration_s, 3) if result.ran else None,
        stderr=[line for line in result.stderr.splitlines() if line.strip()][-6:],
    )
    if result.timed_out:
        probe.error = (
            result.summary() if result.note else f"the probe did not finish within {result.timeout_s:g} s"
        )
        return probe
    if not result.ran:
        probe.error = result.summary()
        return probe
    line = next((ln for ln in reversed(result.stdout.splitlines()) if ln.startswith(PROBE_MARKER)), None)
    if line is None:
        probe.error = f"no probe result ({result.summary()})"
        return probe
    try:
        data = load_json(line[len(PROBE_MARKER) :], "the probe's")
    except ToolOutputError as exc:
        probe.error = f"unreadable probe result: {exc}"
        return probe
    if not isinstance(data, dict):
        probe.error = "unreadable probe result: not an object"
        return probe
    probe.error = data.get("error")
    probe.version, probe.cuda, probe.hip = data.get("version"), data.get("cuda"), data.get("hip")
    probe.is_available = data.get("is_available")
    probe.device_count = data.get("device_count")
    for dev in data.get("devices") or []:
        if isinstance(dev, dict) and isinstance(dev.get("index"), int):
            probe.devices.append(
                TorchDevice(
                    index=dev["index"],
                    name=dev.get("name"),
                    total_memory_bytes=dev.get("total_memory_bytes"),
                    capability=dev.get("capability"),
                )
            )
    for item in data.get("deep") or []:
        if isinstance(item, dict):
            probe.deep.append(DeepResult.model_validate(item))
    probe.train, probe.train_error = parse_train(data.get("train"))
    probe.ok = probe.error is None
    return probe


def probe_torch(runner: Runner, python: str, *, deep: bool) -> TorchProbe:
    argv: list[str] = [python, "-c", PROBE_SCRIPT]
    if deep:
        argv.append("deep")
    result = runner(argv, timeout_s=DEEP_TIMEOUT_S if deep else PROBE_TIMEOUT_S)
    return parse_probe_output(result, python)


# `llama-server --version`: "version: 5394 (6c8b9150)" or, newer, "version: 0.4.0-dev (build 10822, ...)".
_LLAMA_BUILD = re.compile(r"\(build (\d+)")
_LLAMA_VERSION = re.compile(r"^version:\s*(\d+)\s*\(", re.MULTILINE)
# `ollama --version`: "ollama version is 0.32.2", "ollama version 0.1.20", "Warning: client version is 0.9.2".
_OLLAMA_VERSION = re.compile(r"version(?: is)?\s+(\d+\.\d+[\w.\-]*)")


def engine_versions(runner: Runner, which: Sequence[str] = ("vllm", "sglang")) -> dict[str, EngineVersion]:
    engines: dict[str, EngineVersion] = {}
    for dist in which:
        try:
            engines[dist] = EngineVersion(version=importlib.metadata.version(dist), source="python package")
        except importlib.metadata.PackageNotFoundError:
            continue
    for program in ("llama-server", "llama-cli"):
        result = runner([program, "--version"], timeout_s=5.0)
        if result.not_found:
            continue
        text = result.stdout + "\n" + result.stderr
        match = _LLAMA_BUILD.search(text) or _LLAMA_VERSION.search(text)
        engines["llama.cpp"] = EngineVersion(
            version=(f"b{match.group(1)}" if match else None), source=f"{program} --version"
        )
        break
    result = runner(["ollama", "--version"], timeout_s=5.0)
    if not result.not_found:
        match = _OLLAMA_VERSION.search(result.stdout + "\n" + result.stderr)
        engines["ollama"] = EngineVersion(
            version=match.group(1) if match else None, source="ollama --version"
        )
    return engines


def collect_frameworks(
    runner: Runner, env: Mapping[str, str], *, probe: bool, deep: bool, python: str | None = None
) -> FrameworkFacts:
    facts = FrameworkFacts(
        python_version=platform.python_version(), python_executable=python or sys.executable
    )
    facts.torch = torch_from_files(env, python, runner)
    if facts.torch.installed and (probe or deep):
        facts.torch.probe = probe_torch(runner, python or sys.executable, deep=deep)
    facts.engines = engine_versions(runner)
    facts.image = collect_image_stack()
    return facts
