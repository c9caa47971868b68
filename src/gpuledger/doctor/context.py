"""What the doctor's checks share: the :class:`Context` of one diagnosis (facts, knowledge base, AMD
reference data, which vendors are present and which are blocked) and the values the fix templates use."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuledger.catalog.amd import AmdReference
from gpuledger.catalog.versions import version_tuple
from gpuledger.doctor.knowledge import KnowledgeBase
from gpuledger.facts.model import Facts

GIB = 1024**3


def gib_text(value: int | None) -> str:
    return "memory unknown" if value is None else f"{value / GIB:.1f} GiB"


def _major(version: str | None) -> str | None:
    if not version:
        return None
    head = version.split(".", 1)[0]
    return head if head.isdigit() else None


@dataclass
class Context:
    """What the checks share: the facts, the knowledge base, the AMD reference data, which vendors are
    present and which vendor paths are blocked (and by which finding)."""

    facts: Facts
    kb: KnowledgeBase
    amd_ref: AmdReference
    nvidia_present: bool = False
    amd_present: bool = False
    blocked: dict[str, str] = field(default_factory=dict)  # vendor -> finding id
    values: dict[str, str] = field(default_factory=dict)

    @property
    def gpu_present(self) -> bool:
        return self.nvidia_present or self.amd_present

    def ok(self, vendor: str) -> bool:
        present = self.nvidia_present if vendor == "nvidia" else self.amd_present
        return present and vendor not in self.blocked

    def block(self, vendor: str, finding_id: str) -> None:
        self.blocked.setdefault(vendor, finding_id)


def fill_values(ctx: Context) -> None:
    f, kb = ctx.facts, ctx.kb
    major = (
        _major(f.nvidia.driver_version)
        or _major(f.kernel.nvidia_module_version)
        or _major(f.nvidia.nvml.driver_version)
        or next((_major(d) for d in f.kernel.dkms_nvidia if _major(d)), None)
    )
    if major:
        ctx.values["driver_major"] = major
    cuda = f.nvidia.cuda_version or f.nvidia.nvml.cuda_driver_version
    if cuda:
        # The newest wheel not newer than the driver's CUDA; else one of the same major version
        # (CUDA minor version compatibility: a cu118 wheel runs on an 11.7 driver).
        fits = [c for c in kb.pytorch_indexes.cuda if version_tuple(c) <= version_tuple(cuda)]
        same_major = [c for c in kb.pytorch_indexes.cuda if version_tuple(c)[:1] == version_tuple(cuda)[:1]]
        if fits:
            ctx.values["torch_index"] = "cu" + max(fits, key=version_tuple).replace(".", "")
        elif same_major:
            ctx.values["torch_index"] = "cu" + min(same_major, key=version_tuple).replace(".", "")
    rocm = rocm_version(f)
    if rocm:
        fits = [r for r in kb.pytorch_indexes.rocm if version_tuple(r) <= version_tuple(rocm)]
        if fits:
            ctx.values["rocm_index"] = "rocm" + max(fits, key=version_tuple)
    if ctx.amd_present and not ctx.nvidia_present:
        ctx.values["torch_index"] = ctx.values.get("rocm_index", kb.defaults["rocm_index"])
    for gpu in f.gpus_of("amd"):
        family = ctx.amd_ref.override_family(gpu.gfx_target or "")
        if family is not None:
            ctx.values["hsa_value"] = family.value
            break
    ctx.values["ollama_url"] = f.ollama.url


def rocm_version(f: Facts) -> str | None:
    """The installed ROCm (/opt/rocm), else the one bundled in PyTorch's ROCm build (torch.version.hip)."""
    if f.amd.rocm_version:
        return f.amd.rocm_version
    hip = f.frameworks.torch.hip
    if hip:
        parts = version_tuple(hip)
        return ".".join(str(p) for p in parts[:2]) if len(parts) >= 2 else None
    return None
