"""The ``Facts`` model: everything the collectors read about a machine, judged by nobody yet.

Sizes are bytes, durations seconds. A value that could not be read is ``None`` and, where it matters,
a neighbouring field says why (``error``, ``reason``, a :class:`CommandFact`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gpuledger.facts.image_stack import ImageStackFacts
from gpuledger.facts.runner import CommandResult

Vendor = Literal["nvidia", "amd", "intel", "other"]
TorchBuild = Literal["cuda", "rocm", "cpu", "unknown"]
SmiFormat = Literal["xml", "q", "table", "L", "csv"]
SmiStatus = Literal[
    "ok",
    "not_found",
    "cannot_communicate",
    "version_mismatch",
    "no_devices",
    "no_permission",
    "nvml_error",
    "timeout",
    "failed",
    "unparsed",
    "not_run",
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CommandFact(_Model):
    """How one command ended, with the first lines it printed (the evidence)."""

    command: str
    status: Literal["ok", "not_found", "timeout", "error", "failed"]
    rc: int | None = None
    summary: str
    output: list[str] = Field(default_factory=list)
    duration_s: float | None = None

    @classmethod
    def from_result(cls, result: CommandResult, *, lines: int = 6) -> CommandFact:
        if result.not_found:
            status: Literal["ok", "not_found", "timeout", "error", "failed"] = "not_found"
        elif result.timed_out:
            status = "timeout"
        elif result.error is not None:
            status = "error"
        elif result.rc == 0:
            status = "ok"
        else:
            status = "failed"
        return cls(
            command=result.command,
            status=status,
            rc=result.rc,
            summary=result.summary(),
            output=[] if status == "ok" else result.output_lines(lines),
            duration_s=None if result.not_found or result.error else round(result.duration_s, 3),
        )

    def evidence(self) -> list[str]:
        return [self.summary, *self.output]


class PciDevice(_Model):
    """A display-class device on the PCI bus (``/sys/bus/pci/devices/*``)."""

    address: str
    vendor_id: int
    device_id: int
    class_code: int
    subsystem_vendor_id: int | None = None
    subsystem_device_id: int | None = None
    vendor: Vendor
    driver: str | None = None
    name: str
    name_source: str

    @property
    def pci_id(self) -> str:
        return f"{self.vendor_id:04x}:{self.device_id:04x}"


class PciFacts(_Model):
    readable: bool = False
    error: str | None = None
    gpus: list[PciDevice] = Field(default_factory=list)


class KernelFacts(_Model):
    release: str | None = None
    proc_version: str | None = None
    modules_source: Literal["proc", "lsmod", "sysfs", "unknown"] = "unknown"
    modules_error: str | None = None
    gpu_modules: list[str] = Field(default_factory=list)
    nvidia_loaded: bool | None = None
    nouveau_loaded: bool | None = None
    amdgpu_loaded: bool | None = None
    nvidia_module_version: str | None = None
    nvidia_proc_version: str | None = None
    installed_kernels: list[str] = Field(default_factory=list)
    nvidia_module_kernels: list[str] = Field(default_factory=list)
    nvidia_module_for_running_kernel: bool | None = None
    dkms_nvidia: list[str] = Field(default_factory=list)
    secure_boot: bool | None = None
    secure_boot_evidence: str | None = None
    nouveau_blacklisted: bool | None = None
    nouveau_blacklist_files: list[str] = Field(default_factory=list)
    dev_nvidia: list[str] = Field(default_factory=list)


class NvidiaGpu(_Model):
    index: int
    name: str | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    pci_device_id: int | None = None
    vbios: str | None = None
    memory_total_bytes: int | None = None
    architecture: str | None = None
    name_truncated: bool = False
    mig_mode: str | None = None


class NvmlFacts(_Model):
    consulted: bool = False
    reason: str | None = None
    ok: bool = False
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    error_class: str | None = None
    error_message: str | None = None
    devices: list[NvidiaGpu] = Field(default_factory=list)


class NvidiaFacts(_Model):
    smi_found: bool = False
    smi_status: SmiStatus = "not_run"
    smi_format: SmiFormat | None = None
    smi_command: CommandFact | None = None
    smi_error_lines: list[str] = Field(default_factory=list)
    nvml_library_version: str | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    gpus: list[NvidiaGpu] = Field(default_factory=list)
    nvml: NvmlFacts = Field(default_factory=NvmlFacts)


class AmdGpu(_Model):
    index: int | None = None
    name: str | None = None
    name_source: str | None = None
    pci_bus_id: str | None = None
    device_id: int | None = None
    gfx_target: str | None = None
    gfx_source: str | None = None
    vbios: str | None = None
    memory_total_bytes: int | None = None
    uuid: str | None = None
    sources: list[str] = Field(default_factory=list)


class KfdNode(_Model):
    node: int
    gfx_target_version: int
    gfx_target: str | None = None
    vendor_id: int | None = None
    device_id: int | None = None
    location_id: int | None = None
    domain: int | None = None
    drm_render_minor: int | None = None

    @property
    def pci_bus_id(self) -> str | None:
        if self.location_id is None:
            return None
        bus, dev, fn = self.location_id >> 8, (self.location_id >> 3) & 0x1F, self.location_id & 0x7
        return f"{self.domain or 0:04x}:{bus:02x}:{dev:02x}.{fn}"


class DeviceNode(_Model):
    """A device file such as ``/dev/kfd`` and whether this user may open it read-write."""

    path: str
    exists: bool = False
    mode: str | None = None
    owner_uid: int | None = None
    group_gid: int | None = None
    group: str | None = None
    accessible: bool | None = None
    error: str | None = None


class AmdFacts(_Model):
    rocm_version: str | None = None
    rocm_version_source: str | None = None
    rocm_dirs: list[str] = Field(default_factory=list)
    amd_smi: CommandFact | None = None
    rocm_smi: CommandFact | None = None
    rocminfo: CommandFact | None = None
    rocminfo_status: str | None = None
    parse_errors: list[str] = Field(default_factory=list)
    driver_version: str | None = None
    gpus: list[AmdGpu] = Field(default_factory=list)
    kfd_nodes: list[KfdNode] = Field(default_factory=list)
    dev_kfd: DeviceNode = Field(default_factory=lambda: DeviceNode(path="/dev/kfd"))
    render_nodes: list[DeviceNode] = Field(default_factory=list)
    hsa_overrides: dict[str, str] = Field(default_factory=dict)

    @property
    def any_tool_found(self) -> bool:
        return any(
            c is not None and c.status != "not_found" for c in (self.amd_smi, self.rocm_smi, self.rocminfo)
        )


class Identity(_Model):
    uid: int | None = None
    user: str | None = None
    gids: list[int] = Field(default_factory=list)
    groups: list[str] = Field(default_factory=list)
    source: Literal["id", "process", "unknown"] = "unknown"


class TorchDevice(_Model):
    index: int
    name: str | None = None
    total_memory_bytes: int | None = None
    capability: str | None = None


class DeepResult(_Model):
    """One ``--deep`` measurement on one device (matmul TFLOPS and copy GB/s), with the method."""

    device: str
    device_name: str | None = None
    dtype: str
    matmul_n: int
    matmul_iterations: int
    matmul_tflops: float | None = None
    copy_bytes: int
    copy_iterations: int
    copy_gb_s: float | None = None
    error: str | None = None


class TrainProbeResult(_Model):
    """The ``--deep`` training probe on one device (``facts/train_probe.py``): a few steps of a small network,
    the loss of each (None: not a finite number), the last gradient norm and how far the weights moved."""

    device: str = Field(max_length=64)
    device_name: str | None = Field(default=None, max_length=200)
    dtype: str = Field(max_length=32)
    steps: int = Field(ge=0, le=1000)
    learning_rate: float | None = None
    losses: list[float | None] = Field(default_factory=list, max_length=1000)
    grad_norm: float | None = None
    param_change: float | None = None
    nonfinite: bool = False
    error: str | None = Field(default=None, max_length=2000)


class TorchProbe(_Model):
    ran: bool = False
    ok: bool = False
    python: str | None = None
    version: str | None = None
    cuda: str | None = None
    hip: str | None = None
    is_available: bool | None = None
    device_count: int | None = None
    devices: list[TorchDevice] = Field(default_factory=list)
    error: str | None = None
    timed_out: bool = False
    duration_s: float | None = None
    stderr: list[str] = Field(default_factory=list)
    deep: list[DeepResult] = Field(default_factory=list)
    train: list[TrainProbeResult] = Field(default_factory=list)
    train_error: str | None = None


class TorchFacts(_Model):
    installed: bool = False
    version: str | None = None
    build: TorchBuild | None = None
    cuda: str | None = None
    hip: str | None = None
    location: str | None = None
    source: str | None = None
    error: str | None = None
    probe: TorchProbe | None = None


class EngineVersion(_Model):
    version: str | None = None
    source: str


class FrameworkFacts(_Model):
    python_version: str | None = None
    python_executable: str | None = None
    torch: TorchFacts = Field(default_factory=TorchFacts)
    engines: dict[str, EngineVersion] = Field(default_factory=dict)
    image: ImageStackFacts = Field(default_factory=ImageStackFacts)


class NvidiaContainerDevice(_Model):
    index: int | None = None
    model: str | None = None
    uuid: str | None = None
    bus_location: str | None = None
    architecture: str | None = None


class NvidiaContainerInfo(_Model):
    nvrm_version: str | None = None
    cuda_version: str | None = None
    devices: list[NvidiaContainerDevice] = Field(default_factory=list)


class ContainerFacts(_Model):
    docker_found: bool = False
    docker_info: CommandFact | None = None
    docker_runtimes: list[str] | None = None
    docker_error: str | None = None
    daemon_json_runtimes: list[str] | None = None
    daemon_json_default_runtime: str | None = None
    daemon_json_error: str | None = None
    nvidia_container_cli_found: bool = False
    nvidia_container_cli: CommandFact | None = None
    nvidia_container_info: NvidiaContainerInfo | None = None
    nvidia_ctk_found: bool = False


class WslFacts(_Model):
    is_wsl: bool = False
    evidence: list[str] = Field(default_factory=list)
    dev_dxg: bool = False
    wsl_lib_dir: bool = False
    libcuda: list[str] = Field(default_factory=list)
    wsl_nvidia_smi: bool = False
    linux_driver_evidence: list[str] = Field(default_factory=list)


class OllamaModel(_Model):
    name: str
    size_bytes: int | None = None
    size_vram_bytes: int | None = None
    context_length: int | None = None

    @property
    def gpu_fraction(self) -> float | None:
        if self.size_bytes is None or self.size_vram_bytes is None or self.size_bytes <= 0:
            return None
        return min(1.0, self.size_vram_bytes / self.size_bytes)


class OllamaFacts(_Model):
    url: str = ""
    checked: bool = False
    explicit: bool = False
    reachable: bool = False
    version: str | None = None
    models: list[OllamaModel] = Field(default_factory=list)
    error: str | None = None


class SystemFacts(_Model):
    hostname: str | None = None
    os_name: str | None = None
    kernel_release: str | None = None
    arch: str | None = None
    cpu_model: str | None = None
    cpu_count: int | None = None
    memory_total_bytes: int | None = None
    identity: Identity = Field(default_factory=Identity)
    env: dict[str, str] = Field(default_factory=dict)


class CollectorError(_Model):
    collector: str
    error: str


class GpuSummary(_Model):
    """One GPU as the rest of gpuledger sees it, whichever tool named it."""

    vendor: Vendor
    index: int | None = None
    name: str
    pci_bus_id: str | None = None
    uuid: str | None = None
    memory_total_bytes: int | None = None
    gfx_target: str | None = None
    vbios: str | None = None
    source: str


class Facts(_Model):
    schema_version: int = 1
    collected_at: datetime
    root: str
    duration_s: float = 0.0
    deep: bool = False
    system: SystemFacts = Field(default_factory=SystemFacts)
    pci: PciFacts = Field(default_factory=PciFacts)
    kernel: KernelFacts = Field(default_factory=KernelFacts)
    nvidia: NvidiaFacts = Field(default_factory=NvidiaFacts)
    amd: AmdFacts = Field(default_factory=AmdFacts)
    frameworks: FrameworkFacts = Field(default_factory=FrameworkFacts)
    containers: ContainerFacts = Field(default_factory=ContainerFacts)
    wsl: WslFacts = Field(default_factory=WslFacts)
    ollama: OllamaFacts = Field(default_factory=OllamaFacts)
    gpus: list[GpuSummary] = Field(default_factory=list)
    collector_errors: list[CollectorError] = Field(default_factory=list)

    def gpus_of(self, vendor: Vendor) -> list[GpuSummary]:
        return [g for g in self.gpus if g.vendor == vendor]
