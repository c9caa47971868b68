"""Version lock (seed §8.1): snapshot the GPU software stack, check the live stack against it, diff two
snapshots, and the fast ``fingerprint()`` every bench run stores in ``RunInfo.environment``.

A lock file is JSON: ``{"format": "gpuledger.lock", "version": 1, "created_at", "machine", "hash",
"stack": {...}}``. ``hash`` is ``sha256:`` over the canonical JSON of ``stack``. A file from a newer
format version is refused with InvalidInputError (exit 4).

Drift classes: a change *matters* when it can change results or break the stack (driver major, CUDA /
ROCm / HIP minor, torch version or build, Python minor, engine versions, GPUs, a kernel without a
rebuilt nvidia module); the rest is *cosmetic* (driver minor/patch, CUDA/ROCm patch, VBIOS, OS name,
kernel with a rebuilt module, container toolkit).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuledger.boundeddoc import load_json
from gpuledger.boundedio import read_text
from gpuledger.errors import InvalidInputError, NotFoundError
from gpuledger.facts import Facts, collect_facts, machine_name
from gpuledger.facts.runner import Runner

LOCK_FORMAT = "gpuledger.lock"
LOCK_VERSION = 1
MAX_LOCK_BYTES = 16 * 1024**2  # a lock file is a few KB
DEFAULT_LOCK_FILE = "gpuledger.lock.json"
# Keys derived from others (shown, hashed, but not diffed separately).
DERIVED = frozenset({"driver", "gpu_count"})
META = frozenset({"hash", "format", "version", "created_at", "machine", "cpu"})


def _version_parts(value: Any) -> tuple[int, ...]:
    parts: list[int] = []
    for piece in str(value).replace("-", ".").replace("+", ".").split("."):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts)


def stack_from_facts(facts: Facts) -> dict[str, Any]:
    """The pinned view of a machine's stack (stable values only: nothing that changes between runs)."""
    nv, amd, k, t = facts.nvidia, facts.amd, facts.kernel, facts.frameworks.torch
    gpus = sorted(
        (
            {
                "vendor": g.vendor,
                "name": g.name,
                "memory_total_bytes": g.memory_total_bytes,
                "vbios": g.vbios,
                "gfx_target": g.gfx_target,
            }
            for g in facts.gpus
            if g.vendor in ("nvidia", "amd")
        ),
        key=lambda g: (str(g["vendor"]), str(g["name"])),
    )
    nvidia_driver = nv.driver_version or nv.nvml.driver_version or k.nvidia_module_version
    has_nvidia = any(g["vendor"] == "nvidia" for g in gpus)
    c = facts.containers
    return {
        "os": facts.system.os_name,
        "kernel": facts.system.kernel_release,
        "arch": facts.system.arch,
        "gpus": gpus,
        "gpu_count": len(gpus),
        "driver": nvidia_driver or amd.driver_version,
        "nvidia_driver": nvidia_driver,
        "amdgpu_driver": amd.driver_version,
        "nvidia_module_for_kernel": k.nvidia_module_for_running_kernel if has_nvidia else None,
        "cuda": nv.cuda_version or nv.nvml.cuda_driver_version,
        "cuda_runtime": t.cuda,
        "rocm": amd.rocm_version,
        "hip": t.hip,
        "container_toolkit": {
            "nvidia_container_cli": c.nvidia_container_cli_found,
            "nvidia_ctk": c.nvidia_ctk_found,
            "docker_runtimes": sorted(set(c.docker_runtimes or []) | set(c.daemon_json_runtimes or []))
            or None,
        },
        "python": facts.frameworks.python_version,
        "torch": t.version,
        "torch_build": t.build,
        "engines": {name: e.version for name, e in sorted(facts.frameworks.engines.items())},
    }


def stack_hash(stack: Mapping[str, Any]) -> str:
    body = {k: v for k, v in stack.items() if k not in META}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def fingerprint(
    root: Path = Path("/"),
    *,
    runner: Runner | None = None,
    env: Mapping[str, str] | None = None,
    use_nvml: bool | None = None,
) -> dict[str, Any]:
    """The stack of this machine plus ``hash`` (no deep probes, no network, NVML before nvidia-smi,
    no rocminfo when sysfs knows the gfx targets: well under 2 s). Keys: os, kernel, arch, gpus,
    gpu_count, driver, nvidia_driver, amdgpu_driver, nvidia_module_for_kernel, cuda, cuda_runtime,
    rocm, hip, container_toolkit, python, torch, torch_build, engines, hash — plus ``machine`` (the name
    the doctor's setup-labour ledger uses) and ``cpu`` (model, logical CPUs, RAM), which identify the host
    but are not part of the stack hash: two identical stacks on two hosts hash the same."""
    facts = collect_facts(
        root, runner=runner, env=env, check_ollama=False, probe_torch=False, fast=True, use_nvml=use_nvml
    )
    stack = stack_from_facts(facts)
    system = facts.system
    host = {
        "machine": machine_name(facts),
        "cpu": {
            "model": system.cpu_model,
            "logical_cpus": system.cpu_count,
            "memory_total_bytes": system.memory_total_bytes,
        },
    }
    return {**stack, **host, "hash": stack_hash(stack)}


def snapshot(facts: Facts) -> dict[str, Any]:
    """A lock document for ``facts``."""
    stack = stack_from_facts(facts)
    return {
        "format": LOCK_FORMAT,
        "version": LOCK_VERSION,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine_name(facts),
        "hash": stack_hash(stack),
        "stack": stack,
    }


def lock_text(doc: Mapping[str, Any]) -> str:
    """A lock document as the text of a lock file."""
    return json.dumps(doc, indent=2, sort_keys=False) + "\n"


def write_lock(doc: Mapping[str, Any], path: Path) -> None:
    try:
        path.write_text(lock_text(doc), encoding="utf-8")
    except OSError as exc:
        raise InvalidInputError(f"cannot write lock file {path}: {exc.strerror or exc}") from exc


@dataclass(frozen=True, slots=True)
class LockFile:
    path: str
    doc: dict[str, Any]
    hash_ok: bool

    @property
    def stack(self) -> dict[str, Any]:
        stack: dict[str, Any] = self.doc["stack"]
        return stack


def read_lock(path: Path) -> LockFile:
    """Read and validate a lock file. NotFoundError if missing; InvalidInputError if malformed or from
    a newer format version."""
    try:
        text = read_text(path, MAX_LOCK_BYTES, what=f"lock file {path}")  # /dev/zero, a FIFO: bounded too
    except FileNotFoundError:
        raise NotFoundError(
            f"lock file {path} does not exist", hint="create one with: gpuledger lock -o FILE"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"cannot read lock file {path}: {exc}") from exc
    doc = load_json(text, str(path))  # nesting bounded (boundeddoc): InvalidInputError "… is not JSON (…)"
    if not isinstance(doc, dict) or doc.get("format") != LOCK_FORMAT:
        raise InvalidInputError(f'{path} is not a gpuledger lock file (no "format": "{LOCK_FORMAT}")')
    version = doc.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise InvalidInputError(f'{path}: "version" must be a positive integer (got {version!r})')
    if version > LOCK_VERSION:
        raise InvalidInputError(
            f"{path} uses lock format version {version}; this gpuledger reads up to version {LOCK_VERSION}",
            hint="upgrade gpuledger to read it",
        )
    if not isinstance(doc.get("stack"), dict):
        raise InvalidInputError(f'{path}: "stack" must be an object')
    return LockFile(path=str(path), doc=doc, hash_ok=doc.get("hash") == stack_hash(doc["stack"]))


@dataclass(frozen=True, slots=True)
class Drift:
    key: str
    locked: Any
    live: Any
    matters: bool
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "locked": self.locked,
            "live": self.live,
            "class": "matters" if self.matters else "cosmetic",
            "reason": self.reason,
        }


def _version_drift(key: str, a: Any, b: Any, depth: int, what: str) -> Drift:
    pa, pb = _version_parts(a), _version_parts(b)
    if a is None or b is None:
        return Drift(key, a, b, True, f"{what} {'appeared' if a is None else 'disappeared'}")
    matters = pa[:depth] != pb[:depth] or not pa or not pb
    level = {1: "major", 2: "minor"}[depth]
    return Drift(
        key,
        a,
        b,
        matters,
        f"{what} {level} version changed" if matters else f"{what} changed below the {level} version",
    )


def _gpu_names(gpus: list[Any]) -> list[str]:
    return [f"{g.get('vendor')}: {g.get('name')}" for g in gpus]


def _gpu_drifts(a: list[Any], b: list[Any]) -> list[Drift]:
    def ident(g: Any) -> tuple[str, str, Any, Any]:
        return (str(g.get("vendor")), str(g.get("name")), g.get("memory_total_bytes"), g.get("gfx_target"))

    out: list[Drift] = []
    if sorted(map(ident, a)) != sorted(map(ident, b)):
        out.append(Drift("gpus", _gpu_names(a), _gpu_names(b), True, "GPU models or count changed"))
        return out
    va, vb = sorted(str(g.get("vbios")) for g in a), sorted(str(g.get("vbios")) for g in b)
    if va != vb:
        out.append(Drift("gpus.vbios", va, vb, False, "VBIOS changed"))
    return out


def diff_stacks(locked: Mapping[str, Any], live: Mapping[str, Any]) -> list[Drift]:
    """Every difference between two stacks (lock ``stack`` dicts or ``fingerprint()`` dicts)."""
    out: list[Drift] = []
    keys = [k for k in dict.fromkeys([*locked, *live]) if k not in META and k not in DERIVED]
    for key in keys:
        a, b = locked.get(key), live.get(key)
        if a == b:
            continue
        if key == "gpus":
            out += _gpu_drifts(a if isinstance(a, list) else [], b if isinstance(b, list) else [])
        elif key in ("nvidia_driver", "amdgpu_driver"):
            out.append(_version_drift(key, a, b, 1, "driver"))
        elif key in ("cuda", "cuda_runtime", "rocm", "hip", "python"):
            what = {
                "cuda": "CUDA (driver)",
                "cuda_runtime": "CUDA (torch build)",
                "rocm": "ROCm",
                "hip": "HIP (torch build)",
                "python": "Python",
            }[key]
            out.append(_version_drift(key, a, b, 2, what))
        elif key in ("torch", "torch_build", "arch"):
            out.append(Drift(key, a, b, True, f"{key.replace('_', ' ')} changed"))
        elif key == "kernel":
            rebuilt = live.get("nvidia_module_for_kernel")
            if rebuilt is False:
                out.append(
                    Drift(key, a, b, True, "kernel changed and the nvidia module was not rebuilt for it")
                )
            else:
                why = "kernel changed; the nvidia module exists for it" if rebuilt else "kernel changed"
                out.append(Drift(key, a, b, False, why))
        elif key == "nvidia_module_for_kernel":
            out.append(
                Drift(
                    key,
                    a,
                    b,
                    b is False,
                    "nvidia module missing for the running kernel"
                    if b is False
                    else "nvidia module state changed",
                )
            )
        elif key == "engines":
            ea = a if isinstance(a, dict) else {}
            eb = b if isinstance(b, dict) else {}
            for name in dict.fromkeys([*ea, *eb]):
                if ea.get(name) == eb.get(name):
                    continue
                if name in ea and name in eb:
                    out.append(Drift(f"engines.{name}", ea[name], eb[name], True, f"{name} version changed"))
                else:
                    out.append(
                        Drift(
                            f"engines.{name}",
                            ea.get(name),
                            eb.get(name),
                            False,
                            f"{name} {'installed' if name in eb else 'removed'}",
                        )
                    )
        else:
            out.append(Drift(key, a, b, False, f"{key.replace('_', ' ')} changed"))
    return out


def check(lock: LockFile, live: Mapping[str, Any]) -> list[Drift]:
    return diff_stacks(lock.stack, live)
