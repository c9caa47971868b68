"""Layers 5 and 6: containers (Docker with the NVIDIA Container Toolkit, the device flags ROCm containers
need) and WSL2 (the paravirtualised GPU, the Windows driver's libraries, Windows-side guidance)."""

from __future__ import annotations

from gpuledger.catalog.versions import version_tuple
from gpuledger.doctor.context import Context, rocm_version
from gpuledger.doctor.findings import Finding, make


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
    rocm = rocm_version(ctx.facts)
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
