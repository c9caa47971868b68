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
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from gpuledger.boundeddoc import load_json
from gpuledger.boundedio import read_text
from gpuledger.errors import InvalidInputError, NotFoundError
from gpuledger.facts import Facts, collect_facts, machine_name
from gpuledger.facts.model import TorchBuild
from gpuledger.facts.runner import Runner

LOCK_FORMAT: Literal["gpuledger.lock"] = "gpuledger.lock"
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


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LockedGpu(_Doc):
    """One GPU as the lock pins it (its identity and VBIOS)."""

    vendor: Literal["nvidia", "amd"]
    name: str | None
    memory_total_bytes: int | None
    vbios: str | None
    gfx_target: str | None


class ContainerToolkit(_Doc):
    """What containers would see of the GPUs: NVIDIA's container CLI and toolkit, Docker's runtimes."""

    nvidia_container_cli: bool
    nvidia_ctk: bool
    docker_runtimes: list[str] | None


class Stack(_Doc):
    """The pinned view of a machine's stack (stable values only: nothing that changes between runs); None:
    not found on the machine. Its dump is the lock file's ``stack`` and what ``fingerprint`` stores."""

    os: str | None
    kernel: str | None
    arch: str | None
    gpus: list[LockedGpu]
    gpu_count: int
    driver: str | None
    nvidia_driver: str | None
    amdgpu_driver: str | None
    nvidia_module_for_kernel: bool | None
    cuda: str | None
    cuda_runtime: str | None
    rocm: str | None
    hip: str | None
    container_toolkit: ContainerToolkit
    python: str | None
    torch: str | None
    torch_build: TorchBuild | None
    engines: dict[str, str | None]


def stack_from_facts(facts: Facts) -> Stack:
    """The pinned view of a machine's stack."""
    nv, amd, k, t = facts.nvidia, facts.amd, facts.kernel, facts.frameworks.torch
    gpus = sorted(
        (
            LockedGpu(
                vendor=g.vendor,
                name=g.name,
                memory_total_bytes=g.memory_total_bytes,
                vbios=g.vbios,
                gfx_target=g.gfx_target,
            )
            for g in facts.gpus
            if g.vendor == "nvidia" or g.vendor == "amd"
        ),
        key=lambda g: (str(g.vendor), str(g.name)),
    )
    nvidia_driver = nv.driver_version or nv.nvml.driver_version or k.nvidia_module_version
    has_nvidia = any(g.vendor == "nvidia" for g in gpus)
    c = facts.containers
    return Stack(
        os=facts.system.os_name,
        kernel=facts.system.kernel_release,
        arch=facts.system.arch,
        gpus=gpus,
        gpu_count=len(gpus),
        driver=nvidia_driver or amd.driver_version,
        nvidia_driver=nvidia_driver,
        amdgpu_driver=amd.driver_version,
        nvidia_module_for_kernel=k.nvidia_module_for_running_kernel if has_nvidia else None,
        cuda=nv.cuda_version or nv.nvml.cuda_driver_version,
        cuda_runtime=t.cuda,
        rocm=amd.rocm_version,
        hip=t.hip,
        container_toolkit=ContainerToolkit(
            nvidia_container_cli=c.nvidia_container_cli_found,
            nvidia_ctk=c.nvidia_ctk_found,
            docker_runtimes=sorted(set(c.docker_runtimes or []) | set(c.daemon_json_runtimes or [])) or None,
        ),
        python=facts.frameworks.python_version,
        torch=t.version,
        torch_build=t.build,
        engines={name: e.version for name, e in sorted(facts.frameworks.engines.items())},
    )


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
    stack = stack_from_facts(facts).model_dump(mode="json")
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


class LockDocument(_Doc):
    """A lock file: ``gpuledger lock``'s snapshot of this machine, and its ``--json`` document."""

    format: Literal["gpuledger.lock"] = LOCK_FORMAT
    version: int = LOCK_VERSION
    created_at: str  # ISO 8601, UTC, to the second
    machine: str
    hash: str  # stack_hash of ``stack``
    stack: Stack


def snapshot(facts: Facts) -> LockDocument:
    """A lock document for ``facts``."""
    stack = stack_from_facts(facts)
    return LockDocument(
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        machine=machine_name(facts),
        hash=stack_hash(stack.model_dump(mode="json")),
        stack=stack,
    )


def lock_text(doc: LockDocument) -> str:
    """A lock document as the text of a lock file."""
    return json.dumps(doc.model_dump(mode="json"), indent=2, sort_keys=False) + "\n"


def write_lock(doc: LockDocument, path: Path) -> None:
    try:
        path.write_text(lock_text(doc), encoding="utf-8")
    except OSError as exc:
        raise InvalidInputError(f"cannot write lock file {path}: {exc.strerror or exc}") from exc


@dataclass(frozen=True, slots=True)
class LockFile:
    """A lock file as read (``doc``: as written, perhaps by hand: it is compared as written), the hash it
    says (None: none, or not text) and whether that is its stack's."""

    path: str
    doc: dict[str, Any]
    hash: str | None
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
    written = doc.get("hash")
    return LockFile(path=str(path), doc=doc, hash=written if isinstance(written, str) else None,
                    hash_ok=written == stack_hash(doc["stack"]))


class Drift(_Doc):
    """One difference between two stacks: both values, whether it matters (``class``), and why."""

    model_config = ConfigDict(extra="forbid", frozen=True, serialize_by_alias=True, validate_by_name=True)

    key: str
    locked: JsonValue
    live: JsonValue
    class_: Literal["matters", "cosmetic"] = Field(alias="class")
    reason: str

    @property
    def matters(self) -> bool:
        return self.class_ == "matters"


def _drift(key: str, locked: Any, live: Any, matters: bool, reason: str) -> Drift:
    cls: Literal["matters", "cosmetic"] = "matters" if matters else "cosmetic"
    return Drift(key=key, locked=locked, live=live, class_=cls, reason=reason)


class LockCheck(_Doc):
    """``gpuledger lock --check FILE --json``: the live stack against a lock file."""

    lock: str
    same: bool
    locked_hash: str | None
    live_hash: str
    drift: list[Drift]


class LockDiff(_Doc):
    """``gpuledger lock --diff A B --json``: two lock files compared."""

    a: str
    b: str
    same: bool
    hash_a: str | None
    hash_b: str | None
    drift: list[Drift]


def _version_drift(key: str, a: Any, b: Any, depth: int, what: str) -> Drift:
    pa, pb = _version_parts(a), _version_parts(b)
    if a is None or b is None:
        return _drift(key, a, b, True, f"{what} {'appeared' if a is None else 'disappeared'}")
    matters = pa[:depth] != pb[:depth] or not pa or not pb
    level = {1: "major", 2: "minor"}[depth]
    return _drift(
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
        out.append(_drift("gpus", _gpu_names(a), _gpu_names(b), True, "GPU models or count changed"))
        return out
    va, vb = sorted(str(g.get("vbios")) for g in a), sorted(str(g.get("vbios")) for g in b)
    if va != vb:
        out.append(_drift("gpus.vbios", va, vb, False, "VBIOS changed"))
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
            out.append(_drift(key, a, b, True, f"{key.replace('_', ' ')} changed"))
        elif key == "kernel":
            rebuilt = live.get("nvidia_module_for_kernel")
            if rebuilt is False:
                out.append(
                    _drift(key, a, b, True, "kernel changed and the nvidia module was not rebuilt for it")
                )
            else:
                why = "kernel changed; the nvidia module exists for it" if rebuilt else "kernel changed"
                out.append(_drift(key, a, b, False, why))
        elif key == "nvidia_module_for_kernel":
            out.append(
                _drift(
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
                    out.append(_drift(f"engines.{name}", ea[name], eb[name], True, f"{name} version changed"))
                else:
                    out.append(
                        _drift(
                            f"engines.{name}",
                            ea.get(name),
                            eb.get(name),
                            False,
                            f"{name} {'installed' if name in eb else 'removed'}",
                        )
                    )
        else:
            out.append(_drift(key, a, b, False, f"{key.replace('_', ' ')} changed"))
    return out


def check(lock: LockFile, live: LockDocument) -> LockCheck:
    """The live stack (a snapshot of this machine) against ``lock``."""
    drift = diff_stacks(lock.stack, live.stack.model_dump(mode="json"))
    return LockCheck(lock=lock.path, same=not drift, locked_hash=lock.hash, live_hash=live.hash, drift=drift)


def diff_locks(a: LockFile, b: LockFile) -> LockDiff:
    """Two lock files compared (before/after an upgrade)."""
    drift = diff_stacks(a.stack, b.stack)
    return LockDiff(a=a.path, b=b.path, same=not drift, hash_a=a.hash, hash_b=b.hash, drift=drift)
