"""doctor's image-stack layer: versions and the attention backend, xformers built for another torch, and the
seed's §6 row on ComfyUI compatibility errors on AMD judged from the installed packages (CUDA-only wheels
beside a ROCm torch). Distributions are real ``.dist-info`` folders on disk, read by importlib.metadata."""

from __future__ import annotations

import importlib.metadata
from datetime import UTC, datetime
from pathlib import Path

from gpuledger.doctor.checks import diagnose
from gpuledger.facts.image_stack import ImageStackFacts, collect_image_stack
from gpuledger.facts.model import Facts, FrameworkFacts, TorchFacts


def _site(tmp: Path, dists: dict[str, tuple[str, list[str]]]) -> ImageStackFacts:
    for name, (version, requires) in dists.items():
        info = tmp / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
        lines += [f"Requires-Dist: {r}" for r in requires]
        (info / "METADATA").write_text("\n".join(lines) + "\n")
    return collect_image_stack(lambda: importlib.metadata.distributions(path=[str(tmp)]))


def _facts(
    image: ImageStackFacts, torch_version: str, hip: str | None = None, cuda: str | None = None
) -> Facts:
    torch = TorchFacts(installed=True, version=torch_version, hip=hip, cuda=cuda, source="torch/version.py")
    return Facts(
        collected_at=datetime.now(UTC), root="/", frameworks=FrameworkFacts(torch=torch, image=image)
    )


def _ids(facts: Facts) -> dict[str, list[str]]:
    return {f.id: f.evidence for f in diagnose(facts) if f.id.startswith("image.")}


def test_versions_and_the_sdpa_backend(tmp_path: Path) -> None:
    image = _site(tmp_path, {"diffusers": ("0.42.1", []), "accelerate": ("1.15.0", [])})
    assert image.packages == {"diffusers": "0.42.1", "accelerate": "1.15.0"}
    found = _ids(_facts(image, "2.8.0+cu128", cuda="12.8"))
    assert list(found) == ["image.stack"]
    assert found["image.stack"][:3] == [
        "diffusers 0.42.1",
        "torch 2.8.0+cu128 (CUDA 12.8)",
        "attention: PyTorch SDPA (diffusers' AttnProcessor2_0, torch >= 2.0)",
    ]


def test_xformers_built_for_another_torch_is_a_warning(tmp_path: Path) -> None:
    image = _site(
        tmp_path, {"diffusers": ("0.42.1", []), "xformers": ("0.0.28.post3", ["numpy", "torch==2.5.1"])}
    )
    assert image.xformers_torch_requirement == "==2.5.1"
    found = _ids(_facts(image, "2.6.0+cu124", cuda="12.4"))
    assert found["image.xformers_torch_mismatch"] == [
        "xformers 0.0.28.post3 requires torch==2.5.1",
        "torch 2.6.0+cu124 (CUDA 12.4)",
    ]
    assert "image.xformers_torch_mismatch" not in _ids(_facts(image, "2.5.1+cu124", cuda="12.4"))


def test_cuda_only_packages_beside_a_rocm_torch_is_the_comfyui_amd_row(tmp_path: Path) -> None:
    image = _site(
        tmp_path,
        {
            "xformers": ("0.0.29", ["torch==2.6.0"]),
            "nvidia-cublas-cu12": ("12.4.5.8", []),
            "nvidia-cudnn-cu12": ("9.1.0.70", []),
        },
    )
    assert image.cuda_wheels == ["nvidia-cublas-cu12", "nvidia-cudnn-cu12"]
    findings = {f.id: f for f in diagnose(_facts(image, "2.6.0+rocm6.2.4", hip="6.2.41134"))}
    row = findings["image.cuda_packages_on_rocm"]
    assert row.severity == "warning"
    assert (
        "CUDA-only packages: xformers 0.0.29 (PyPI wheels are CUDA builds), nvidia-cublas-cu12"
        in row.evidence[1]
    )
    assert any("--use-pytorch-cross-attention" in line for line in row.fix)
    assert any("whl/rocm" in line for line in row.fix)
    assert "seed §6 row 6" in row.docs
    assert "image.diffusers_missing" in findings  # diffusers is not among these packages
    # the same packages on a CUDA torch are not this problem
    assert "image.cuda_packages_on_rocm" not in _ids(_facts(image, "2.6.0+cu124", cuda="12.4"))


def test_an_old_torch_has_no_sdpa(tmp_path: Path) -> None:
    image = _site(tmp_path, {"diffusers": ("0.25.0", [])})
    found = _ids(_facts(image, "1.13.1+cu117", cuda="11.7"))
    assert "image.sdpa_unavailable" in found
    assert "attention: classic (torch < 2.0 has no SDPA)" in found["image.stack"]


def test_nothing_is_said_without_an_image_stack(tmp_path: Path) -> None:
    image = _site(tmp_path, {})
    facts = _facts(image, "2.8.0")
    facts.frameworks.torch.installed = False
    assert _ids(facts) == {}
