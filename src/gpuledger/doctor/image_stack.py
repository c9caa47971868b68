"""Layer 7, image generation: diffusers and torch versions, the attention backend diffusers (and ComfyUI,
on the same torch) would use — PyTorch's SDPA with torch >= 2.0, xformers when installed and built for this
torch — and the seed's §6 row on ComfyUI compatibility errors on AMD GPUs, judged from the packages: CUDA-only
wheels beside a ROCm build of torch."""

from __future__ import annotations

import re

from gpuledger.doctor.context import Context
from gpuledger.doctor.findings import Finding, make

_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?")


def _release(version: str | None) -> tuple[int, int, int] | None:
    m = _VERSION.match((version or "").strip())
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)) if m else None


def _pin_matches(requirement: str, torch_version: str) -> bool:
    """``==2.5.1`` against ``2.5.1+cu124``: the release parts compared (the local build is the index's)."""
    op = re.match(r"^(==|>=|<=|~=|<|>)", requirement)
    want, have = _release(requirement.lstrip("=<>~")), _release(torch_version)
    if op is None or want is None or have is None:
        return True
    return {
        "==": have == want,
        ">=": have >= want,
        "<=": have <= want,
        ">": have > want,
        "<": have < want,
        "~=": have[:2] == want[:2] and have >= want,
    }[op.group(1)]


def check_image_stack(ctx: Context) -> list[Finding]:
    img = ctx.facts.frameworks.image
    torch = ctx.facts.frameworks.torch
    if not img.checked or not (
        torch.installed or img.packages.get("diffusers") or img.packages.get("xformers")
    ):
        return []
    out: list[Finding] = []
    pk = img.packages
    build = f"ROCm {torch.hip}" if torch.hip else f"CUDA {torch.cuda}" if torch.cuda else "CPU build"
    torch_line = f"torch {torch.version} ({build})" if torch.installed else "torch: not installed"
    release = _release(torch.version)
    sdpa = release is not None and release >= (2, 0, 0)
    xf = pk.get("xformers")
    attention = [
        "attention: PyTorch SDPA (diffusers' AttnProcessor2_0, torch >= 2.0)"
        if sdpa
        else "attention: classic (torch < 2.0 has no SDPA)"
    ]
    if xf:
        attention.append(
            f"xformers {xf} installed (used when enabled: diffusers' "
            "enable_xformers_memory_efficient_attention(); ComfyUI picks it when it imports)"
        )
    if not pk.get("diffusers"):
        out.append(make("image.diffusers_missing", [torch_line, img.source]))
    if torch.installed and release is not None and not sdpa:
        out.append(make("image.sdpa_unavailable", [torch_line], values=ctx.values))
    req = img.xformers_torch_requirement
    if xf and req and torch.version and not _pin_matches(req, torch.version):
        out.append(
            make(
                "image.xformers_torch_mismatch",
                [f"xformers {xf} requires torch{req}", torch_line],
                values=ctx.values,
            )
        )
    cuda_only = ([f"xformers {xf} (PyPI wheels are CUDA builds)"] if xf else []) + img.cuda_wheels[:8]
    if torch.hip and cuda_only:
        out.append(
            make(
                "image.cuda_packages_on_rocm",
                [
                    torch_line,
                    "CUDA-only packages: " + ", ".join(cuda_only),
                    *(
                        [f"AMD GPU(s): {', '.join(g.name or '?' for g in ctx.facts.gpus_of('amd'))}"]
                        if ctx.amd_present
                        else []
                    ),
                ],
                values=ctx.values,
            )
        )
    if pk.get("diffusers"):
        libs = ", ".join(
            f"{k} {v}" for k, v in sorted(pk.items()) if k in ("accelerate", "transformers", "pillow")
        )
        out.append(
            make(
                "image.stack",
                [f"diffusers {pk['diffusers']}", torch_line, *attention, *([libs] if libs else [])],
            )
        )
    return out
