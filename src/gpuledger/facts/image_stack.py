"""Image-generation stack facts: which of diffusers, accelerate, xformers, Pillow and ComfyUI's pip packages
are installed in this interpreter, the torch version xformers was built for (its ``Requires-Dist`` pin), and
the CUDA-only wheels present (``nvidia-*-cu*``: the CUDA runtime a CUDA build of torch, xformers or a custom
node pulls in). Read from the installed distributions' metadata only: nothing is imported."""

from __future__ import annotations

import importlib.metadata
import re
from collections.abc import Callable, Iterable

from pydantic import BaseModel, ConfigDict, Field

PACKAGES = (
    "diffusers",
    "accelerate",
    "xformers",
    "Pillow",
    "comfyui-frontend-package",
    "comfyui-workflow-templates",
    "transformers",
    "safetensors",
)
_CUDA_WHEEL = re.compile(r"^nvidia-[a-z0-9-]+-cu\d+$")
_TORCH_PIN = re.compile(r"^torch\s*(?:\(\s*)?(==|>=|<=|~=|<|>)\s*([0-9][^,;\s)]*)")


class ImageStackFacts(BaseModel):
    """Versions by distribution name (lower-case), xformers' torch requirement, the CUDA-only wheels."""

    model_config = ConfigDict(extra="forbid")

    checked: bool = False
    packages: dict[str, str] = Field(default_factory=dict)
    xformers_torch_requirement: str | None = None
    cuda_wheels: list[str] = Field(default_factory=list)
    source: str = "importlib.metadata (installed distributions)"


Distributions = Callable[[], Iterable[importlib.metadata.Distribution]]


def collect_image_stack(distributions: Distributions = importlib.metadata.distributions) -> ImageStackFacts:
    wanted = {p.lower() for p in PACKAGES}
    out = ImageStackFacts(checked=True)
    cuda: set[str] = set()
    for dist in distributions():
        name = str(dist.name or "").strip().lower()
        if not name:
            continue
        if name in wanted and name not in out.packages:
            out.packages[name] = str(dist.version)
            if name == "xformers":
                for req in dist.requires or []:
                    m = _TORCH_PIN.match(req.strip())
                    if m and "extra ==" not in req:
                        out.xformers_torch_requirement = f"{m.group(1)}{m.group(2)}"
                        break
        if _CUDA_WHEEL.match(name):
            cuda.add(name)
    out.cuda_wheels = sorted(cuda)
    return out
