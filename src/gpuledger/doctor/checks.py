"""Checks: pure functions from :class:`Facts` to findings, one per layer, bottom up.

A layer is only judged for a vendor when the layers below hold for it: when the kernel driver layer
has an error for NVIDIA, the NVIDIA management/runtime/container/application checks are replaced by a
single ``layer.not_judged`` finding naming the error to fix first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpuledger.catalog.amd import AmdReference, amd_reference, gfx_from_override
from gpuledger.catalog.versions import version_tuple
from gpuledger.doctor.findings import Finding, make, sort_findings
from gpuledger.doctor.knowledge import KnowledgeBase, Layer, Severity, knowledge_base
from gpuledger.facts.model import CommandFact, Facts, GpuSummary, TorchProbe

if TYPE_CHECKING:
    from gpuledger.catalog import GpuSpec

GIB = 1024**3
VFIO_DRIVERS = ("vfio-pci", "pci-stub")  # a GPU handed to a virtual machine, not to this host


def _gib(value: int | None) -> str:
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


def _fill_values(ctx: Context) -> None:
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
    rocm = _rocm_version(f)
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


def _rocm_version(f: Facts) -> str | None:
    """The installed ROCm (/opt/rocm), else the one bundled in PyTorch's ROCm build (torch.version.hip)."""
    if f.amd.rocm_version:
        return f.amd.rocm_version
    hip = f.frameworks.torch.hip
    if hip:
        parts = version_tuple(hip)
        return ".".join(str(p) for p in parts[:2]) if len(parts) >= 2 else None
    return None


# ----------------------------------------------------------------------------------------- hardware
def check_hardware(ctx: Context) -> list[Finding]:
    f = ctx.facts
    out: list[Finding] = []
    for err in f.collector_errors:
        out.append(make("facts.collector_failed", [f"collector {err.collector}: {err.error}"]))
    if not f.pci.readable:
        out.append(make("hardware.pci_unreadable", [f.pci.error or "sysfs PCI bus not readable"]))
    passthrough = [d for d in f.pci.gpus if d.vendor in ("nvidia", "amd") and d.driver in VFIO_DRIVERS]
    if passthrough:
        out.append(
            make(
                "gpu.passthrough",
                [f"PCI {d.address} [{d.pci_id}] {d.name}: bound to {d.driver}" for d in passthrough],
            )
        )
    nv_pci = [d for d in f.pci.gpus if d.vendor == "nvidia" and d not in passthrough]
    amd_pci = [d for d in f.pci.gpus if d.vendor == "amd" and d not in passthrough]
    host_ids = {d.address for d in passthrough}
    nv_tools = [g for g in f.gpus_of("nvidia") if g.pci_bus_id not in host_ids]
    amd_tools = [g for g in f.gpus_of("amd") if g.pci_bus_id not in host_ids]
    ctx.nvidia_present = bool(nv_pci or nv_tools) or (f.wsl.is_wsl and bool(f.wsl.libcuda))
    ctx.amd_present = bool(amd_pci or amd_tools)
    if ctx.gpu_present:
        evidence = [_gpu_line(g) for g in f.gpus if g.vendor in ("nvidia", "amd")]
        evidence += [
            f"PCI {d.address} [{d.pci_id}] class 0x{d.class_code:06x} driver={d.driver or 'none'}"
            for d in nv_pci + amd_pci
        ]
        if f.wsl.is_wsl and not evidence:
            evidence.append(
                "WSL2: GPU paravirtualised through /dev/dxg; the Windows NVIDIA driver's libraries are in "
                f"/usr/lib/wsl/lib ({', '.join(f.wsl.libcuda)})"
            )
        out.append(
            make(
                "gpu.detected",
                evidence,
                title=f"{len(f.gpus_of('nvidia'))} NVIDIA, {len(f.gpus_of('amd'))} AMD GPU(s) found",
            )
        )
        return out
    evidence = []
    if f.pci.readable:
        evidence.append("sysfs PCI bus: no display-class device from NVIDIA (0x10de) or AMD (0x1002)")
    evidence.append(f.nvidia.smi_command.summary if f.nvidia.smi_command else "nvidia-smi: not run")
    for cmd in (f.amd.amd_smi, f.amd.rocminfo):
        if cmd is not None:
            evidence.append(cmd.summary)
    evidence.append("/dev/dxg (WSL2): " + ("present" if f.wsl.dev_dxg else "absent"))
    out.append(make("gpu.none_found", evidence))
    out.append(make("cpu.path", _cpu_lines(f)))
    return out


def _gpu_line(g: GpuSummary) -> str:
    parts = [f"{g.vendor.upper()} {g.name}"]
    if g.pci_bus_id:
        parts.append(f"PCI {g.pci_bus_id}")
    if g.memory_total_bytes:
        parts.append(_gib(g.memory_total_bytes))
    if g.gfx_target:
        parts.append(g.gfx_target)
    return ", ".join(parts) + f" (from {g.source})"


def _cpu_lines(f: Facts) -> list[str]:
    s, t = f.system, f.frameworks.torch
    lines = [
        f"CPU: {s.cpu_model or 'unknown model'}, {s.cpu_count or '?'} logical CPUs, "
        f"{_gib(s.memory_total_bytes)} RAM"
    ]
    if t.installed:
        lines.append(f"PyTorch {t.version or '?'} ({t.build or 'unknown'} build, {t.source})")
    else:
        lines.append("PyTorch: not installed (the torch engine needs it: pip install torch)")
    for d in f.pci.gpus:
        if d.vendor in ("intel", "other"):
            lines.append(f"other display device: {d.name} at PCI {d.address} (not used by CUDA/ROCm)")
    lines.append(
        "Power on the CPU path: RAPL when the machine exposes it, else a stated estimate (gpuledger sample)"
    )
    return lines


# ----------------------------------------------------------------------------------------- kernel
def check_kernel(ctx: Context) -> list[Finding]:
    f, k = ctx.facts, ctx.facts.kernel
    out: list[Finding] = []
    if f.wsl.is_wsl or not ctx.gpu_present:
        return out
    if k.modules_source == "unknown":
        out.append(make("kernel.modules_unknown", [k.modules_error or "no module list"]))
        return out
    mods = f"loaded GPU modules ({k.modules_source}): {', '.join(k.gpu_modules) or 'none'}"
    if ctx.nvidia_present:
        out += _kernel_nvidia(ctx, mods)
    if ctx.amd_present:
        out += _kernel_amd(ctx, mods)
    return out


def _smi_symptom(f: Facts) -> list[str]:
    if f.nvidia.smi_status in ("cannot_communicate", "version_mismatch") and f.nvidia.smi_error_lines:
        return [f"nvidia-smi: {line}" for line in f.nvidia.smi_error_lines[:2]]
    return []


def _kernel_nvidia(ctx: Context, mods: str) -> list[Finding]:
    f, k, v = ctx.facts, ctx.facts.kernel, ctx.values
    bound = [
        f"PCI {d.address} bound to driver: {d.driver or 'none'}" for d in f.pci.gpus if d.vendor == "nvidia"
    ]
    if k.nouveau_loaded:
        ctx.block("nvidia", "nvidia.nouveau_loaded")
        blacklist = (
            "nouveau blacklisted in: " + ", ".join(k.nouveau_blacklist_files)
            if k.nouveau_blacklist_files
            else "no 'blacklist nouveau' line in /etc/modprobe.d"
        )
        return [make("nvidia.nouveau_loaded", [mods, *bound, blacklist, *_smi_symptom(f)], values=v)]
    mismatch = (
        f.nvidia.smi_status == "version_mismatch"
        or f.nvidia.nvml.error_class == "NVMLError_LibRmVersionMismatch"
    )
    if mismatch:
        ctx.block("nvidia", "nvidia.driver_library_mismatch")
        evidence = _smi_symptom(f)
        if f.nvidia.nvml.error_class == "NVMLError_LibRmVersionMismatch":
            evidence.append(f"NVML: {f.nvidia.nvml.error_message}")
        if k.nvidia_module_version:
            evidence.append(f"loaded kernel module: {k.nvidia_module_version} (/proc/driver/nvidia/version)")
        if f.nvidia.nvml_library_version:
            evidence.append(f"user-space NVML library: {f.nvidia.nvml_library_version}")
        return [make("nvidia.driver_library_mismatch", evidence, values=v)]
    if k.nvidia_loaded is False:
        symptom = _smi_symptom(f)
        built = (
            f"nvidia.ko built for: {', '.join(k.nvidia_module_kernels)}"
            if k.nvidia_module_kernels
            else "no nvidia.ko under /lib/modules/*"
        )
        dkms = f"DKMS: {', '.join(k.dkms_nvidia)}" if k.dkms_nvidia else ""
        running = f"running kernel: {k.release or 'unknown'}"
        if k.secure_boot:
            rule = "nvidia.secure_boot_blocks_module"
            evidence = [k.secure_boot_evidence or "Secure Boot: enabled", mods, *symptom, built]
        elif k.nvidia_module_kernels and k.nvidia_module_for_running_kernel is False:
            rule = "nvidia.module_not_built_for_kernel"
            evidence = [running, built, dkms, mods, *symptom]
        elif k.installed_kernels and not k.nvidia_module_kernels and not k.dkms_nvidia:
            rule = "nvidia.driver_not_installed"
            evidence = [*bound, mods, built, running, *symptom]
        else:
            rule = "nvidia.module_not_loaded"
            evidence = [mods, *bound, running, built, dkms, *symptom]
            if k.secure_boot is False:
                evidence.append(k.secure_boot_evidence or "Secure Boot: disabled")
        ctx.block("nvidia", rule)
        return [make(rule, evidence, values=v)]
    if k.nvidia_loaded:
        line = f"nvidia module {k.nvidia_module_version or '(version unknown)'} loaded"
        return [
            make(
                "nvidia.kernel_ok", [line, mods] + ([k.nvidia_proc_version] if k.nvidia_proc_version else [])
            )
        ]
    return []


def _node_line(node_path: str, mode: str | None, group: str | None, gid: int | None) -> str:
    return f"{node_path}: {mode or '?'} group {group or '?'} (gid {gid if gid is not None else '?'})"


def _kernel_amd(ctx: Context, mods: str) -> list[Finding]:
    f, k, a = ctx.facts, ctx.facts.kernel, ctx.facts.amd
    bound = [
        f"PCI {d.address} bound to driver: {d.driver or 'none'}" for d in f.pci.gpus if d.vendor == "amd"
    ]
    if k.amdgpu_loaded is False:
        ctx.block("amd", "amd.amdgpu_not_loaded")
        return [make("amd.amdgpu_not_loaded", [mods, *bound, f"running kernel: {k.release or 'unknown'}"])]
    if not a.dev_kfd.exists:
        ctx.block("amd", "amd.kfd_missing")
        evidence = ["/dev/kfd does not exist", mods]
        if a.rocminfo_status == "rock_not_loaded":
            evidence.append("rocminfo: ROCk module is NOT loaded")
        return [make("amd.kfd_missing", evidence)]
    ident = f.system.identity
    denied = [n for n in [a.dev_kfd, *a.render_nodes] if n.accessible is False]
    if denied:
        ctx.block("amd", "amd.kfd_permission")
        who = (
            f"user {ident.user or '?'} (uid {ident.uid}) groups: {', '.join(ident.groups) or 'none'} "
            f"(from {ident.source})"
        )
        evidence = [_node_line(n.path, n.mode, n.group, n.group_gid) + " — not accessible" for n in denied]
        evidence.append(who)
        missing = sorted({n.group for n in denied if n.group and n.group not in ident.groups})
        if missing:
            evidence.append(f"not a member of: {', '.join(missing)}")
        return [make("amd.kfd_permission", evidence)]
    evidence = [mods, _node_line("/dev/kfd", a.dev_kfd.mode, a.dev_kfd.group, a.dev_kfd.group_gid)]
    evidence += [_node_line(n.path, n.mode, n.group, n.group_gid) for n in a.render_nodes]
    return [make("amd.kernel_ok", evidence)]


# ----------------------------------------------------------------------------------------- management
def check_management(ctx: Context) -> list[Finding]:
    out: list[Finding] = []
    if ctx.ok("nvidia"):
        out += _management_nvidia(ctx)
    if ctx.ok("amd"):
        out += _management_amd(ctx)
    return out


def _cmd_evidence(cmd: CommandFact | None) -> list[str]:
    return cmd.evidence() if cmd is not None else []


def _management_nvidia(ctx: Context) -> list[Finding]:
    f, nv, v = ctx.facts, ctx.facts.nvidia, ctx.values
    out: list[Finding] = []
    status = nv.smi_status
    if status == "not_found":
        extra = (
            ["export PATH=$PATH:/usr/lib/wsl/lib   # WSL2: nvidia-smi comes with the Windows driver"]
            if f.wsl.wsl_nvidia_smi
            else []
        )
        out.append(make("nvidia.smi_missing", ["nvidia-smi: not found on PATH"], values=v, extra_fix=extra))
    elif status == "cannot_communicate":
        ctx.block("nvidia", "nvidia.smi_cannot_communicate")
        k = f.kernel
        evidence = [*_cmd_evidence(nv.smi_command)]
        evidence.append(
            f"nvidia module loaded: {_yes_no(k.nvidia_loaded)}; nouveau loaded: {_yes_no(k.nouveau_loaded)}"
        )
        evidence.append(
            "device nodes: " + (", ".join(f"/dev/{n}" for n in k.dev_nvidia) or "no /dev/nvidia*")
        )
        if k.secure_boot is not None:
            evidence.append(k.secure_boot_evidence or f"Secure Boot: {_yes_no(k.secure_boot)}")
        out.append(make("nvidia.smi_cannot_communicate", evidence, values=v))
    elif status == "version_mismatch":
        pass  # reported by the kernel layer (nvidia.driver_library_mismatch)
    elif status == "ok":
        names = ", ".join(f"{g.name}" for g in nv.gpus) or "no GPU listed"
        out.append(
            make(
                "nvidia.management_ok",
                [
                    f"nvidia-smi ({nv.smi_format}): driver {nv.driver_version or '?'}, "
                    f"CUDA {nv.cuda_version or '?'}",
                    f"{len(nv.gpus)} GPU(s): {names}",
                ],
            )
        )
        nv_pci = [d for d in f.pci.gpus if d.vendor == "nvidia"]
        if len(nv_pci) > len(nv.gpus):
            seen = {g.pci_bus_id and g.pci_bus_id.lower()[-12:] for g in nv.gpus}
            lost = [d.address for d in nv_pci if d.address[-12:] not in seen]
            out.append(
                make(
                    "nvidia.gpu_missing_from_driver",
                    [
                        f"PCI bus: {len(nv_pci)} NVIDIA GPU(s); nvidia-smi: {len(nv.gpus)}",
                        *(f"not seen by the driver: PCI {a}" for a in lost),
                    ],
                )
            )
    else:
        severity: Severity = "warning" if status == "unparsed" else "error"
        evidence = [*_cmd_evidence(nv.smi_command), *nv.smi_error_lines]
        title = {
            "timeout": "nvidia-smi hung (killed after its timeout)",
            "no_devices": "nvidia-smi: No devices were found",
            "no_permission": "nvidia-smi: insufficient permissions",
            "unparsed": "nvidia-smi output could not be read",
            "nvml_error": "nvidia-smi: Failed to initialize NVML",
        }.get(status)
        out.append(make("nvidia.smi_failed", evidence, severity=severity, title=title, values=v))
        if status in ("timeout", "no_devices", "nvml_error"):
            ctx.block("nvidia", "nvidia.smi_failed")
    out += _nvml_findings(ctx)
    return out


def _yes_no(value: bool | None) -> str:
    return "unknown" if value is None else ("yes" if value else "no")


def _nvml_findings(ctx: Context) -> list[Finding]:
    nvml, v = ctx.facts.nvidia.nvml, ctx.values
    if not nvml.consulted or nvml.ok or nvml.error_class is None:
        return []
    evidence = [f"pynvml.nvmlInit(): {nvml.error_message or nvml.error_class}"]
    mapping = {
        "NVMLError_LibraryNotFound": "nvidia.nvml_library_not_found",
        "NVMLError_DriverNotLoaded": "nvidia.nvml_driver_not_loaded",
        "NVMLError_NoPermission": "nvidia.nvml_no_permission",
        "NVMLError_LibRmVersionMismatch": "nvidia.driver_library_mismatch",
    }
    rule = mapping.get(nvml.error_class, "nvidia.nvml_error")
    if rule == "nvidia.driver_library_mismatch":
        return []  # judged in the kernel layer
    if rule == "nvidia.nvml_library_not_found" and ctx.facts.nvidia.smi_status == "ok":
        evidence.append(
            "nvidia-smi works, so the library exists for it: this Python cannot load libnvidia-ml.so.1 "
            "(LD_LIBRARY_PATH, a container without the NVIDIA runtime, or a 32/64-bit mismatch)"
        )
    return [make(rule, evidence, values=v)]


def _management_amd(ctx: Context) -> list[Finding]:
    f, a = ctx.facts, ctx.facts.amd
    out: list[Finding] = []
    installed = a.any_tool_found or a.rocm_version is not None or bool(a.rocm_dirs)
    if not installed:
        out.append(
            make(
                "amd.rocm_not_installed",
                [
                    "amd-smi, rocm-smi, rocminfo: not found on PATH",
                    "/opt/rocm: absent",
                    *(
                        [
                            "an NVIDIA GPU is present too: this AMD GPU may only drive the display "
                            "(Mesa is enough)"
                        ]
                        if ctx.nvidia_present
                        else []
                    ),
                    *(
                        [
                            "PyTorch's ROCm build bundles its own runtime: torch.version.hip = "
                            + f.frameworks.torch.hip
                        ]
                        if f.frameworks.torch.hip
                        else []
                    ),
                ],
                severity="info" if ctx.nvidia_present else None,
            )
        )
    for label, cmd in (("amd-smi", a.amd_smi), ("rocm-smi", a.rocm_smi), ("rocminfo", a.rocminfo)):
        if cmd is not None and cmd.status in ("timeout", "error", "failed"):
            if label == "rocm-smi" and cmd.status == "failed" and a.gpus:
                continue
            out.append(make("amd.tool_failed", cmd.evidence(), title=f"{label} failed"))
    if a.rocminfo_status in ("rock_not_loaded", "hsa_error", "unparsed") and not any(
        o.title == "rocminfo failed" for o in out
    ):
        out.append(
            make(
                "amd.tool_failed",
                [*_cmd_evidence(a.rocminfo), f"rocminfo status: {a.rocminfo_status}"],
                title="rocminfo cannot reach the GPU",
            )
        )
    for err in a.parse_errors:
        out.append(make("amd.tool_failed", [err], title="ROCm tool output could not be read"))
    rocm = _rocm_version(f)
    release = ctx.amd_ref.rocm_release_for(rocm)
    gfx_findings: list[Finding] = []
    for gpu in f.gpus_of("amd"):
        gfx_findings += _gfx_findings(ctx, gpu, rocm)
    out += gfx_findings
    blocker = next((x.id for x in gfx_findings if x.severity == "error"), None)
    if blocker is not None:
        ctx.block("amd", blocker)
    if not any(x.severity in ("warning", "error") for x in out) and release is not None:
        targets = ", ".join(sorted({g.gfx_target for g in f.gpus_of("amd") if g.gfx_target})) or "unknown"
        where = a.rocm_version_source or ("torch.version.hip" if rocm else "not found")
        out.append(
            make(
                "amd.management_ok",
                [
                    f"ROCm {rocm or 'version unknown'} ({where})",
                    f"gfx targets: {targets}; "
                    f"support list used: ROCm {release.version} ({release.confidence})",
                    *(cmd.summary for cmd in (a.amd_smi, a.rocm_smi, a.rocminfo) if cmd),
                ],
            )
        )
    return out


def _override_for(ctx: Context, gpu: GpuSummary) -> tuple[str, str] | None:
    env = ctx.facts.amd.hsa_overrides
    if gpu.index is not None and f"HSA_OVERRIDE_GFX_VERSION_{gpu.index}" in env:
        name = f"HSA_OVERRIDE_GFX_VERSION_{gpu.index}"
        return name, env[name]
    if "HSA_OVERRIDE_GFX_VERSION" in env:
        return "HSA_OVERRIDE_GFX_VERSION", env["HSA_OVERRIDE_GFX_VERSION"]
    return None


def _gfx_findings(ctx: Context, gpu: GpuSummary, rocm: str | None) -> list[Finding]:
    gfx = gpu.gfx_target
    label = f"{gpu.name} (PCI {gpu.pci_bus_id or '?'})"
    if gfx is None:
        return [
            make(
                "amd.gfx_unknown",
                [f"{label}: no gfx target from amd-smi, rocm-smi, rocminfo, KFD or the PCI id"],
            )
        ]
    release = ctx.amd_ref.rocm_release_for(rocm)
    family = ctx.amd_ref.override_family(gfx)
    values = {**ctx.values, **({"hsa_value": family.value} if family else {})}
    if release is None:
        return [
            make(
                "amd.gfx_unsupported",
                [f"{label}: {gfx}", f"ROCm {rocm} is older than every release in the AMD reference data"],
                values=values,
            )
        ]
    source_line = (
        f"ROCm {rocm or 'version unknown (no /opt/rocm/.info/version): compared with the newest list'}; "
        f"support list of ROCm {release.version} ({release.confidence}: {release.source}): "
        f"{', '.join(release.targets)}"
    )
    supported = gfx in release.targets
    override = _override_for(ctx, gpu)
    if override is not None:
        name, value = override
        ovr_gfx = gfx_from_override(value)
        if ovr_gfx is None:
            return [
                make(
                    "amd.hsa_override_malformed",
                    [f"{name}={value!r} is not MAJOR.MINOR.STEPPING", f"{label}: {gfx}"],
                    values=values,
                )
            ]
        allowed = {gfx} | ({family.base} if family else set())
        if ovr_gfx not in allowed:
            expected = (
                f"expected {family.value} ({family.family}, runs as {family.base})"
                if family
                else ("this target needs no override")
            )
            return [
                make(
                    "amd.hsa_override_mismatch",
                    [
                        f"{name}={value} makes the runtime treat the GPU as {ovr_gfx}",
                        f"{label} is {gfx}: {expected}",
                    ],
                    values=values,
                )
            ]
        if supported:
            return [
                make(
                    "amd.hsa_override_unneeded",
                    [f"{name}={value}", f"{label}: {gfx} is supported", source_line],
                )
            ]
        if ovr_gfx in release.targets:
            return [
                make("amd.hsa_override_active", [f"{name}={value}: {gfx} runs as {ovr_gfx}", source_line])
            ]
        return [
            make(
                "amd.gfx_unsupported",
                [f"{label}: {gfx}; the override's {ovr_gfx} is not supported either", source_line],
                values=values,
            )
        ]
    if supported:
        return []
    first = ctx.amd_ref.first_release_supporting(gfx)
    evidence = [f"{label}: {gfx} (from {gpu.source})", source_line]
    if first is not None:
        evidence.append(f"{gfx} is listed from ROCm {first.version} on")
    out = [make("amd.gfx_unsupported", evidence, values=values)]
    if family is not None and family.base in release.targets:
        out.append(
            make(
                "amd.hsa_override_suggested",
                [
                    f"{label}: {gfx} is {family.family}; "
                    f"ROCm {release.version} supports its sibling {family.base}",
                    f"HSA_OVERRIDE_GFX_VERSION={family.value} makes the runtime load {family.base} kernels",
                ],
                values=values,
            )
        )
    return out


# ----------------------------------------------------------------------------------------- runtime
def check_runtime(ctx: Context) -> list[Finding]:
    f, t, v = ctx.facts, ctx.facts.frameworks.torch, ctx.values
    out: list[Finding] = []
    nv_ok, amd_ok = ctx.ok("nvidia"), ctx.ok("amd")
    if not (nv_ok or amd_ok):
        if not ctx.gpu_present and t.probe is not None and t.probe.deep:
            return _deep_findings(ctx)  # --deep on the CPU path: the CPU's own matmul and copy
        return out
    if not t.installed:
        return [make("torch.not_installed", [t.error or "no torch package on the Python path"], values=v)]
    build = t.build
    probe = t.probe
    head = (
        f"PyTorch {t.version or '?'}: {build} build "
        f"(torch.version.cuda={t.cuda}, torch.version.hip={t.hip}; {t.source})"
    )
    if build == "cpu":
        vendor_line = (
            ("NVIDIA GPU ready (driver " + (f.nvidia.driver_version or "?") + ")")
            if nv_ok
            else ("AMD GPU ready (ROCm " + (_rocm_version(f) or "?") + ")")
        )
        return [make("torch.cpu_build_on_gpu_host", [head, vendor_line, *_probe_lines(probe)], values=v)]
    if build == "cuda" and amd_ok and not ctx.nvidia_present:
        return [make("torch.cuda_build_on_amd_host", [head, *_probe_lines(probe)], values=v)]
    if build == "rocm" and nv_ok and not ctx.amd_present:
        return [make("torch.rocm_build_on_nvidia_host", [head, *_probe_lines(probe)], values=v)]
    available = probe.is_available if probe is not None and probe.ok else None
    if build == "cuda" and nv_ok and t.cuda:
        driver_cuda = f.nvidia.cuda_version or f.nvidia.nvml.cuda_driver_version
        if driver_cuda and version_tuple(t.cuda)[:2] > version_tuple(driver_cuda)[:2]:
            major_newer = version_tuple(t.cuda)[:1] > version_tuple(driver_cuda)[:1]
            if major_newer or available is False:
                out.append(
                    make(
                        "torch.cuda_newer_than_driver",
                        [head, f"driver supports CUDA {driver_cuda} (nvidia-smi)", *_probe_lines(probe)],
                        values=v,
                    )
                )
                return out
    if probe is None:
        return out
    if probe.timed_out:
        return [make("torch.probe_timeout", [head, *_probe_lines(probe)])]
    if not probe.ok:
        return [make("torch.probe_failed", [head, *_probe_lines(probe)])]
    if not probe.is_available:
        out.append(make("torch.gpu_not_available", [head, *_probe_lines(probe)], values=v))
        return out
    out.append(make("torch.ok", [head, *_probe_lines(probe)]))
    if probe.deep:
        out += _deep_findings(ctx)
    return out


def _probe_lines(probe: TorchProbe | None) -> list[str]:
    if probe is None:
        return []
    if not probe.ran:
        return [f"probe: {probe.error}"] if probe.error else []
    lines = [f"child-process probe ({probe.duration_s} s): torch.cuda.is_available() = {probe.is_available}"]
    if probe.error:
        lines.append(f"probe error: {probe.error}")
    for dev in probe.devices:
        lines.append(
            f"device {dev.index}: {dev.name} ({_gib(dev.total_memory_bytes)}, capability {dev.capability})"
        )
    lines += [f"stderr: {line}" for line in probe.stderr[-3:]]
    return lines


def _spec_by_index(ctx: Context, device: str) -> GpuSpec | None:
    """The catalog entry of ``cuda:N`` through the PCI id of the N-th GPU the tools listed."""
    from gpuledger.facts.naming import catalog_spec_for_pci

    index = int(device.split(":")[-1]) if device.split(":")[-1].isdigit() else None
    gpus = [g for g in ctx.facts.gpus if g.vendor in ("nvidia", "amd")]
    if index is None or index >= len(gpus) or gpus[index].pci_bus_id is None:
        return None
    pci = next((d for d in ctx.facts.pci.gpus if d.address == gpus[index].pci_bus_id), None)
    return None if pci is None else catalog_spec_for_pci(pci.vendor_id, pci.device_id)


def _deep_findings(ctx: Context) -> list[Finding]:
    from gpuledger.catalog import peak_bandwidth, peak_compute
    from gpuledger.facts.naming import catalog_spec_for_name

    probe = ctx.facts.frameworks.torch.probe
    out: list[Finding] = []
    if probe is None:
        return out
    for r in probe.deep:
        if r.error:
            out.append(make("torch.deep_failed", [f"{r.device} ({r.device_name}): {r.error}"]))
            continue
        spec = catalog_spec_for_name(r.device_name) if r.device != "cpu" else None
        if spec is None and r.device != "cpu":
            spec = _spec_by_index(ctx, r.device)
        lines = []
        if r.matmul_tflops is None:
            tflops = "n/a"
        elif r.matmul_tflops >= 1:
            tflops = f"{r.matmul_tflops:.1f} TFLOPS"
        else:
            tflops = f"{r.matmul_tflops * 1000:.1f} GFLOPS"
        gbs = f"{r.copy_gb_s:.1f} GB/s" if r.copy_gb_s is not None else "n/a"
        label = r.device if r.device_name in (None, r.device) else f"{r.device} {r.device_name}"
        lines.append(
            f"{label}: matmul {r.dtype} {r.matmul_n}x{r.matmul_n} x{r.matmul_iterations}: "
            f"{tflops} achieved (2*n^3 FLOP per matmul / wall time after 2 warm-up runs)"
        )
        lines.append(
            f"{r.device}: device copy of {r.copy_bytes / GIB:.2f} GiB x{r.copy_iterations}: {gbs} "
            "(bytes read + written / wall time)"
        )
        if spec is None:
            lines.append(
                "cpu: no catalog peak for CPUs: productive compute % not available"
                if r.device == "cpu"
                else f"no catalog entry for {r.device_name!r}: productive compute % not available"
            )
        else:
            peak, note = peak_compute(spec, r.dtype)
            bw = peak_bandwidth(spec)
            if peak.value and r.matmul_tflops is not None:
                lines.append(
                    f"productive compute: {100 * r.matmul_tflops / peak.value:.0f}% of {peak.value:g} TFLOPS "
                    f"({note}; catalog: {peak.provenance()})"
                )
            if bw.value and r.copy_gb_s is not None:
                lines.append(
                    f"memory bandwidth: {100 * r.copy_gb_s / (bw.value * 1000):.0f}% "
                    f"of {bw.value * 1000:g} GB/s "
                    f"(catalog: {bw.provenance()})"
                )
        out.append(make("torch.deep_benchmark", lines))
    return out


# ----------------------------------------------------------------------------------------- containers
def check_containers(ctx: Context) -> list[Finding]:
    c = ctx.facts.containers
    out: list[Finding] = []
    if not ctx.gpu_present:
        return out
    if not c.docker_found:
        return [make("container.docker_not_installed", ["docker: not found on PATH"])]
    if c.docker_runtimes is None:
        out.append(make("container.docker_unreachable", [f"docker info: {c.docker_error or 'no answer'}"]))
    runtimes = sorted(set(c.docker_runtimes or []) | set(c.daemon_json_runtimes or []))
    if ctx.ok("nvidia"):
        if (
            c.nvidia_container_cli_found
            and c.nvidia_container_cli is not None
            and c.nvidia_container_cli.status != "ok"
        ):
            out.append(make("container.nvidia_toolkit_broken", c.nvidia_container_cli.evidence()))
        elif "nvidia" not in runtimes and not c.nvidia_container_cli_found and not c.nvidia_ctk_found:
            out.append(
                make(
                    "container.nvidia_runtime_missing",
                    [
                        "docker runtimes: " + (", ".join(runtimes) or "unknown (daemon not reachable)"),
                        "nvidia-container-cli: not found on PATH",
                        "nvidia-ctk: not found on PATH",
                    ],
                )
            )
        else:
            info = c.nvidia_container_info
            lines = ["docker runtimes: " + (", ".join(runtimes) or "unknown")]
            if info is not None:
                lines.append(
                    f"nvidia-container-cli info: NVRM {info.nvrm_version}, CUDA {info.cuda_version}, "
                    f"{len(info.devices)} device(s): " + ", ".join(d.model or "?" for d in info.devices)
                )
            out.append(make("container.ok", lines, title="NVIDIA Container Toolkit present"))
    if ctx.ok("amd"):
        group_add = "--group-add video" + (
            " --group-add render"
            if any(n.group == "render" for n in [ctx.facts.amd.dev_kfd, *ctx.facts.amd.render_nodes])
            else ""
        )
        line = (
            "docker run --rm --device /dev/kfd --device /dev/dri --security-opt seccomp=unconfined "
            f"{group_add} "
            f"rocm/dev-ubuntu-22.04:{_rocm_tag(ctx)} rocminfo"
        )
        out.append(
            make(
                "container.amd_device_flags",
                ["ROCm containers need /dev/kfd and /dev/dri passed in"],
                fix=[line],
            )
        )
    return out


def _rocm_tag(ctx: Context) -> str:
    rocm = _rocm_version(ctx.facts)
    if rocm:
        parts = version_tuple(rocm)
        if len(parts) >= 2:
            return f"{parts[0]}.{parts[1]}"
    return "6.2"


# ----------------------------------------------------------------------------------------- WSL2
def check_wsl(ctx: Context) -> list[Finding]:
    w = ctx.facts.wsl
    if not w.is_wsl:
        return []
    out = [make("wsl.detected", list(w.evidence))]
    if not w.dev_dxg:
        out.append(make("wsl.no_gpu_device", ["/dev/dxg does not exist"]))
    elif not w.libcuda and not ctx.amd_present:
        out.append(
            make(
                "wsl.libcuda_missing",
                ["/usr/lib/wsl/lib: " + ("present, no libcuda.so*" if w.wsl_lib_dir else "missing")],
            )
        )
    if w.linux_driver_evidence:
        out.append(make("wsl.linux_driver_installed", list(w.linux_driver_evidence), values=ctx.values))
    for rule in (
        "windows.nvidia_installer_0xe6000000",
        "windows.nvidia_app_0x80070002",
        "wsl.ollama_amd_gpu",
    ):
        out.append(
            make(
                rule,
                ["WSL2 detected: Windows-side guidance from the seed essay's §6 table"],
                values=ctx.values,
            )
        )
    return out


# ----------------------------------------------------------------------------------------- applications
def check_applications(ctx: Context) -> list[Finding]:
    o = ctx.facts.ollama
    if not o.checked:
        return []
    if not o.reachable:
        if o.explicit:
            return [make("ollama.unreachable", [f"{o.url}/api/version: {o.error}"], values=ctx.values)]
        return [make("ollama.not_running", [f"{o.url}: {o.error or 'no answer'}"])]
    if ctx.gpu_present and not (ctx.ok("nvidia") or ctx.ok("amd")):
        return []  # reported in layer.not_judged
    out: list[Finding] = []
    version = f"Ollama {o.version or '?'} at {o.url}"
    for m in o.models:
        frac = m.gpu_fraction
        size = f"{(m.size_bytes or 0) / 1e9:.1f} GB"
        if m.size_vram_bytes == 0:
            evidence = [version, f"{m.name}: size {size}, size_vram 0 (100% CPU)"]
            if not ctx.gpu_present:
                out.append(
                    make(
                        "ollama.running_on_cpu",
                        evidence + ["no GPU on this machine: the CPU is the only path"],
                        severity="info",
                        title=f"Ollama runs {m.name} on the CPU (no GPU here)",
                    )
                )
                continue
            out.append(
                make(
                    "ollama.running_on_cpu",
                    evidence + _ollama_causes(ctx),
                    title=f"Ollama runs {m.name} on the CPU",
                    extra_fix=_ollama_fixes(ctx),
                )
            )
        elif frac is not None and frac < 1.0:
            out.append(
                make(
                    "ollama.partial_offload",
                    [
                        version,
                        f"{m.name}: {(m.size_vram_bytes or 0) / 1e9:.1f} GB of {size} in GPU memory "
                        f"({100 * frac:.0f}% GPU, {100 * (1 - frac):.0f}% CPU)",
                        f"context length: {m.context_length}" if m.context_length else "",
                    ],
                    title=f"Ollama runs {100 * (1 - frac):.0f}% of {m.name} on the CPU",
                )
            )
    if not out:
        lines = [version] + (
            [f"{m.name}: {(m.size_bytes or 0) / 1e9:.1f} GB, 100% in GPU memory" for m in o.models]
            or ["no model loaded: load one (ollama run MODEL) to check GPU offload"]
        )
        out.append(make("ollama.ok", lines))
    return out


def _ollama_causes(ctx: Context) -> list[str]:
    lines = []
    if ctx.nvidia_present:
        lines.append(
            "NVIDIA: the lower layers hold now; if Ollama started before the driver worked, restart it"
        )
    if ctx.amd_present:
        for g in ctx.facts.gpus_of("amd"):
            family = ctx.amd_ref.override_family(g.gfx_target or "")
            if family is not None and g.gfx_target != family.base:
                lines.append(
                    f"AMD: {g.gfx_target} needs HSA_OVERRIDE_GFX_VERSION={family.value} "
                    "in the Ollama service environment"
                )
    if ctx.facts.wsl.is_wsl and ctx.amd_present:
        lines.append("WSL2 + AMD: ROCm for WSL2 must be installed in the distribution")
    return lines


def _ollama_fixes(ctx: Context) -> list[str]:
    fixes = []
    for g in ctx.facts.gpus_of("amd"):
        family = ctx.amd_ref.override_family(g.gfx_target or "")
        if family is not None and g.gfx_target != family.base:
            fixes.append(
                "sudo systemctl edit ollama   # [Service] "
                f'Environment="HSA_OVERRIDE_GFX_VERSION={family.value}"'
            )
            break
    return fixes


# ----------------------------------------------------------------------------------------- driver
LAYER_CHECKS: tuple[tuple[Layer, Callable[[Context], list[Finding]]], ...] = (
    ("hardware", check_hardware),
    ("kernel", check_kernel),
    ("management", check_management),
    ("runtime", check_runtime),
    ("containers", check_containers),
    ("wsl", check_wsl),
    ("applications", check_applications),
)
_NEXT_LAYER: dict[str, Layer] = {"kernel": "management", "management": "runtime"}


def diagnose(facts: Facts) -> list[Finding]:
    """Every finding for ``facts``, bottom layer first."""
    ctx = Context(facts=facts, kb=knowledge_base(), amd_ref=amd_reference())
    findings: list[Finding] = []
    announced: set[str] = set()
    for layer, check in LAYER_CHECKS:
        findings += check(ctx)
        if layer == "hardware":
            _fill_values(ctx)
        for vendor, rule in ctx.blocked.items():
            if vendor in announced:
                continue
            announced.add(vendor)
            blocker = next((x for x in findings if x.id == rule), None)
            above = _NEXT_LAYER.get(blocker.layer if blocker else "kernel", "runtime")
            skipped = ["management", "runtime", "containers", "applications"]
            skipped = skipped[skipped.index(above) :] if above in skipped else skipped
            findings.append(
                make(
                    "layer.not_judged",
                    [f"{vendor.upper()}: {', '.join(skipped)} not judged until {rule} is fixed"],
                    layer=above,
                    title=f"{vendor.upper()}: layers above not judged until {rule} is fixed",
                )
            )
    return sort_findings(findings)
