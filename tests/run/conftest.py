"""Fixtures for the torch engine tests: a real tiny model on disk, fake torch builds (import boundary)."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from support.tiny_model import make_tiny_llama


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A saved tiny Llama (random weights, real tokenizer): loads through from_pretrained offline."""
    return make_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


def _fake_torch(
    *,
    version: str,
    cuda: str | None,
    hip: str | None,
    gpus: list[dict[str, Any]],
    probe_warning: str | None = None,
) -> types.ModuleType:
    """A stand-in for the ``torch`` module with only what device selection reads."""
    import warnings

    mod = types.ModuleType("torch")
    mod.__version__ = version  # type: ignore[attr-defined]
    mod.version = types.SimpleNamespace(cuda=cuda, hip=hip)  # type: ignore[attr-defined]
    mod.get_num_threads = lambda: 16  # type: ignore[attr-defined]

    def is_available() -> bool:
        if probe_warning:
            warnings.warn(probe_warning, UserWarning, stacklevel=1)
        return bool(gpus)

    def props(i: int) -> types.SimpleNamespace:
        g = gpus[i]
        return types.SimpleNamespace(
            name=g["name"], total_memory=g["total"], major=g.get("major", 0), minor=g.get("minor", 0),
            gcnArchName=g.get("gcn"),
        )

    mod.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        is_available=is_available,
        device_count=lambda: len(gpus),
        get_device_properties=props,
        get_device_name=lambda i: gpus[i]["name"],
        mem_get_info=lambda i: (gpus[i]["free"], gpus[i]["total"]),
        is_bf16_supported=lambda: all(g.get("bf16", True) for g in gpus),
    )
    return mod


# Named scenarios: what PyTorch reports on real machines of these kinds.
TORCH_SCENARIOS: dict[str, dict[str, Any]] = {
    # an H200 node with a CUDA 12.8 wheel: 143771 MiB total as nvidia-smi shows it, most of it free
    "h200-cuda": dict(
        version="2.8.0+cu128", cuda="12.8", hip=None,
        gpus=[dict(name="NVIDIA H200", total=143771 * 1024**2, free=142000 * 1024**2, major=9, minor=0)],
    ),
    # a 12 GB consumer card: room for qwen2.5-0.5b, not for a 7B model in bf16
    "rtx3060-cuda": dict(
        version="2.8.0+cu128", cuda="12.8", hip=None,
        gpus=[dict(name="NVIDIA GeForce RTX 3060", total=12 * 1024**3, free=11 * 1024**3, major=8, minor=6)],
    ),
    # an AMD Instinct with the ROCm wheel: PyTorch calls it "cuda" too
    "mi300x-rocm": dict(
        version="2.8.0+rocm6.4", cuda=None, hip="6.4.43482",
        gpus=[dict(name="AMD Instinct MI300X", total=192 * 1024**3, free=190 * 1024**3,
                   gcn="gfx942:sramecc+:xnack-")],
    ),
    # a Turing card: no bf16
    "t4-cuda": dict(
        version="2.8.0+cu128", cuda="12.8", hip=None,
        gpus=[dict(name="Tesla T4", total=15 * 1024**3, free=14 * 1024**3, major=7, minor=5, bf16=False)],
    ),
    # a CUDA wheel on a machine whose driver is not loaded
    "cuda-build-no-driver": dict(
        version="2.8.0+cu128", cuda="12.8", hip=None, gpus=[],
        probe_warning="CUDA initialization: Found no NVIDIA driver on your system. Please check that you "
        "have an NVIDIA GPU and installed a driver from http://www.nvidia.com/Download/index.aspx",
    ),
}


@pytest.fixture
def fake_torch(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], types.ModuleType]:
    """Install the named fake torch build as ``sys.modules['torch']`` for this test."""

    def install(scenario: str) -> types.ModuleType:
        mod = _fake_torch(**TORCH_SCENARIOS[scenario])
        monkeypatch.setitem(sys.modules, "torch", mod)
        return mod

    return install
