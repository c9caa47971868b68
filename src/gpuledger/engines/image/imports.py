"""The one module of gpuledger that imports ``diffusers`` (lazily, through ``importlib``, like torch in
``engines/torch/imports.py``): importing this module costs nothing; asking for diffusers without it raises
``MissingDependencyError`` with the install line (exit 7). Pillow, which diffusers brings, is imported by
``engines/image/thumbs.py`` only."""

from __future__ import annotations

import importlib
import logging
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from gpuledger.engines.torch.imports import import_torch, import_transformers
from gpuledger.errors import MissingDependencyError

INSTALL_HINT = (
    "pip install 'gpuledger[image]' (diffusers, accelerate, Pillow; install torch for your GPU first)"
)

__all__ = [
    "INSTALL_HINT",
    "diffusers_version",
    "import_diffusers",
    "import_tokenizers",
    "import_torch",
    "import_transformers",
]


def import_diffusers() -> Any:
    """``diffusers`` (its progress bars and warnings quietened), or ``MissingDependencyError`` (exit 7)."""
    import_torch()
    import_transformers()
    try:
        diffusers = importlib.import_module("diffusers")
        dlog = importlib.import_module("diffusers.utils.logging")
    except ImportError as exc:
        raise MissingDependencyError(f"diffusers not installed: {INSTALL_HINT}") from exc
    dlog.set_verbosity_error()
    dlog.disable_progress_bar()
    logging.getLogger("diffusers").setLevel(logging.ERROR)
    return diffusers


def import_tokenizers() -> Any:
    """Hugging Face ``tokenizers`` (transformers' own dependency): the dummy pipelines' T5 tokenizer."""
    import_transformers()
    try:
        return importlib.import_module("tokenizers")
    except ImportError as exc:
        raise MissingDependencyError(f"tokenizers not installed: {INSTALL_HINT}") from exc


def diffusers_version() -> str | None:
    """The installed diffusers' version without importing it (None: not installed)."""
    try:
        return version("diffusers")
    except PackageNotFoundError:
        return None
