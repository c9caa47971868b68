"""The typed environment of a run: the stack fingerprint ``gpuledger.lock.fingerprint()`` takes at the start
of every bench (OS, kernel, GPUs, driver, CUDA/ROCm/HIP, container toolkit, Python, torch, engines, the
stack's hash) plus the host it ran on (``machine``, ``cpu``). ``error`` says why a fingerprint could not
be taken.

Stored as the model's set fields (``dump_environment``); ``load_environment`` reads it back, upgrading
the few older spellings a hand-made or older document may use (``hostname`` for ``machine``, a top-level
``logical_cpus`` / ``cpu_count`` for ``cpu.logical_cpus``). Anything else unknown is refused: a value
nobody reads is not kept silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field, ValidationError

from gpuledger.records.summary import Strict


class GpuEntry(Strict):
    vendor: str | None = None
    name: str | None = None
    memory_total_bytes: int | None = Field(default=None, ge=0)
    vbios: str | None = None
    gfx_target: str | None = None


class ContainerToolkit(Strict):
    nvidia_container_cli: bool | None = None
    nvidia_ctk: bool | None = None
    docker_runtimes: list[str] | None = None


class HostCpu(Strict):
    model: str | None = None
    logical_cpus: int | None = Field(default=None, ge=1)
    memory_total_bytes: int | None = Field(default=None, ge=0)


class Environment(Strict):
    """See the module docstring. Every field is optional: a machine without a GPU has no driver."""

    os: str | None = None
    kernel: str | None = None
    arch: str | None = None
    gpus: list[GpuEntry] = Field(default_factory=list)
    gpu_count: int | None = Field(default=None, ge=0)
    driver: str | None = None
    nvidia_driver: str | None = None
    amdgpu_driver: str | None = None
    nvidia_module_for_kernel: bool | None = None
    cuda: str | None = None
    cuda_runtime: str | None = None
    rocm: str | None = None
    hip: str | None = None
    container_toolkit: ContainerToolkit | None = None
    python: str | None = None
    torch: str | None = None
    torch_build: str | None = None
    engines: dict[str, str | None] = Field(default_factory=dict)
    hash: str | None = Field(default=None, max_length=256)
    machine: str | None = None
    cpu: HostCpu | None = None
    error: str | None = None

    @property
    def empty(self) -> bool:
        return not self.model_fields_set

    @property
    def logical_cpus(self) -> int | None:
        return self.cpu.logical_cpus if self.cpu is not None else None

    def to_dict(self) -> dict[str, Any]:
        return dump_environment(self)


class EnvironmentRecordError(ValueError):
    """A stored environment that cannot be read (the store reports it as an unreadable value)."""


_CPU_ALIASES = ("logical_cpus", "cpu_count", "cpu_threads", "cpus", "threads")
_HOST_ALIASES = ("hostname", "host", "node")


def upgrade(doc: Mapping[str, Any]) -> dict[str, Any]:
    """Older spellings → today's fields (see the module docstring)."""
    data = dict(doc)
    for key in _HOST_ALIASES:
        if key in data:
            value = data.pop(key)
            if isinstance(value, str) and value and "machine" not in data:
                data["machine"] = value
    cpus = next((data.pop(k) for k in _CPU_ALIASES if k in data), None)
    if isinstance(cpus, int) and not isinstance(cpus, bool) and cpus >= 1:
        cpu = dict(data.get("cpu") or {})
        cpu.setdefault("logical_cpus", cpus)
        data["cpu"] = cpu
    return data


def load_environment(doc: Mapping[str, Any] | Environment | None) -> Environment:
    """A stored (or given) environment document → the model; ``EnvironmentRecordError`` naming the field."""
    if isinstance(doc, Environment):
        return doc
    if not doc:
        return Environment()
    try:
        return Environment.model_validate(upgrade(doc))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "environment"
        raise EnvironmentRecordError(f"environment: {where}: {first['msg']}") from exc


def dump_environment(env: Environment) -> dict[str, Any]:
    """The environment as JSON types: the fields that were set (absent stays absent)."""
    return env.model_dump(mode="json", exclude_unset=True)
