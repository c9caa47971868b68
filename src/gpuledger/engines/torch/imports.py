"""The one module of gpuledger that imports ``torch`` and ``transformers``, lazily: importing it costs
nothing, and without them every other command works; asking for them raises ``MissingDependencyError`` with
the install line (exit 7). They are imported through ``importlib`` and handled as ``Any``: none of their
types cross the engine's modules, and it keeps ``mypy --strict`` from type-checking all of torch and
transformers (minutes) whenever they are installed.
"""

from __future__ import annotations

import importlib
from typing import Any

from gpuledger.errors import MissingDependencyError

INSTALL_HINT = (
    "pip install 'gpuledger[torch]' — on a GPU machine install the torch build for your CUDA or ROCm "
    "first (README, 'Which PyTorch?')"
)


def import_torch() -> Any:
    """``torch``, or ``MissingDependencyError`` with the install line (exit 7)."""
    try:
        torch = importlib.import_module("torch")
    except ImportError as exc:
        raise MissingDependencyError(f"torch not installed: {INSTALL_HINT}") from exc
    except OSError as exc:  # a CUDA/ROCm build whose shared libraries cannot be loaded
        raise MissingDependencyError(
            f"torch is installed but cannot be imported: {exc}",
            hint="reinstall the torch build that matches this machine (README, 'Which PyTorch?')",
        ) from exc
    return torch


def import_transformers() -> Any:
    """``transformers`` (quietened: its warnings and progress bars would clutter the terminal)."""
    import_torch()
    try:
        transformers = importlib.import_module("transformers")
        hf_logging = importlib.import_module("transformers.utils.logging")
    except ImportError as exc:
        raise MissingDependencyError(f"transformers not installed: {INSTALL_HINT}") from exc
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    return transformers


def streamer_base() -> Any:
    """transformers' ``BaseStreamer`` (what ``generate`` calls once per decode step)."""
    import_transformers()
    return importlib.import_module("transformers.generation.streamers").BaseStreamer


def dtype_kwarg(transformers: Any, torch_dtype: Any) -> dict[str, Any]:
    """transformers >= 4.56 takes ``dtype=``; older releases (the extra allows >= 4.45) ``torch_dtype=``."""
    parts = str(transformers.__version__).split(".")
    major, minor = int(parts[0]), int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    return {"dtype": torch_dtype} if (major, minor) >= (4, 56) else {"torch_dtype": torch_dtype}


def no_init_weights(transformers: Any) -> Any:
    """transformers' context manager that skips weight initialisation (moved in transformers 5)."""
    try:
        return importlib.import_module("transformers.initialization").no_init_weights
    except (ImportError, AttributeError):
        return importlib.import_module("transformers.modeling_utils").no_init_weights


def torch_status() -> tuple[bool, str]:
    """(available, version or reason) without raising: for summaries and doctor-like lines."""
    try:
        torch = import_torch()
        import_transformers()
    except MissingDependencyError as exc:
        return False, exc.message
    return True, str(torch.__version__)
