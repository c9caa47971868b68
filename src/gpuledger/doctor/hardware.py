"""Layers 1 and 2: the hardware (PCI bus: which GPUs are there, and the CPU path when none is) and the
kernel driver (nouveau, the nvidia module, Secure Boot, amdgpu, /dev/kfd permissions)."""

from __future__ import annotations

from gpuledger.doctor.context import Context, gib_text
from gpuledger.doctor.findings import Finding, make
from gpuledger.facts.model import Facts, GpuSummary

VFIO_DRIVERS = ("vfio-pci", "pci-stub")  # a GPU handed to a virtual machine, not to this host


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
        parts.append(gib_text(g.memory_total_bytes))
    if g.gfx_target:
        parts.append(g.gfx_target)
    return ", ".join(parts) + f" (from {g.source})"


def _cpu_lines(f: Facts) -> list[str]:
    s, t = f.system, f.frameworks.torch
    lines = [
        f"CPU: {s.cpu_model or 'unknown model'}, {s.cpu_count or '?'} logical CPUs, "
        f"{gib_text(s.memory_total_bytes)} RAM"
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
