"""Layer 3: management (nvidia-smi, NVML, the ROCm tools) and the AMD gfx target judged against the
installed ROCm's support list (with HSA_OVERRIDE_GFX_VERSION families)."""

from __future__ import annotations

from gpuledger.catalog.amd import gfx_from_override
from gpuledger.doctor.context import Context, rocm_version
from gpuledger.doctor.findings import Finding, make
from gpuledger.doctor.knowledge import Severity
from gpuledger.facts.model import CommandFact, GpuSummary


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
    rocm = rocm_version(f)
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
