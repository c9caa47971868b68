"""Layer 7: applications (Ollama: reachable, and whether its loaded models run on the GPU, partly or on
the CPU)."""

from __future__ import annotations

from gpuledger.doctor.context import Context
from gpuledger.doctor.findings import Finding, make


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
