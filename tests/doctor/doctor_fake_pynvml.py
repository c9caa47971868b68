"""A fake ``pynvml`` for the doctor tests, injected at the import boundary with named scenarios.

Mirrors the real nvidia-ml-py API the inventory uses: ``NVMLError`` with one subclass per error code
named ``NVMLError_<Name>`` (as pynvml builds them), ``nvmlInit`` / ``nvmlShutdown``, system and device
queries. ``str(err)`` is NVML's own message (``nvmlErrorString``).
"""

from __future__ import annotations

import types
from typing import Any

MESSAGES = {
    "LibraryNotFound": "NVML Shared Library Not Found",
    "DriverNotLoaded": "Driver Not Loaded",
    "LibRmVersionMismatch": "RM has detected an NVML/RM version mismatch.",
    "NoPermission": "Insufficient Permissions",
    "Unknown": "Unknown Error",
}


class NVMLError(Exception):
    def __init__(self, value: int = 999) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return MESSAGES.get(type(self).__name__.removeprefix("NVMLError_"), "Unknown Error")


ERRORS = {name: type(f"NVMLError_{name}", (NVMLError,), {}) for name in MESSAGES}


def make(scenario: str) -> types.ModuleType:
    """``healthy_a100`` or ``init_<ErrorName>`` (e.g. ``init_NoPermission``)."""
    mod = types.ModuleType("pynvml")
    mod.NVMLError = NVMLError  # type: ignore[attr-defined]
    for cls in ERRORS.values():
        setattr(mod, cls.__name__, cls)
    state: dict[str, Any] = {"init": 0}

    def nvmlInit() -> None:
        if scenario.startswith("init_"):
            raise ERRORS[scenario.removeprefix("init_")]()
        state["init"] += 1

    def nvmlShutdown() -> None:
        state["init"] -= 1

    mod.nvmlInit = nvmlInit  # type: ignore[attr-defined]
    mod.nvmlShutdown = nvmlShutdown  # type: ignore[attr-defined]
    mod.nvmlSystemGetDriverVersion = lambda: "535.54.03"  # type: ignore[attr-defined]
    mod.nvmlSystemGetCudaDriverVersion = lambda: 12020  # type: ignore[attr-defined]
    mod.nvmlDeviceGetCount = lambda: 1  # type: ignore[attr-defined]
    mod.nvmlDeviceGetHandleByIndex = lambda i: ("handle", i)  # type: ignore[attr-defined]
    mod.nvmlDeviceGetName = lambda h: "NVIDIA A100-SXM4-80GB"  # type: ignore[attr-defined]
    mod.nvmlDeviceGetUUID = lambda h: "GPU-513536b6-7d19-9063-b049-1e69664bb298"  # type: ignore[attr-defined]
    mod.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(  # type: ignore[attr-defined]
        busId=b"00000000:01:00.0", pciDeviceId=0x20B210DE
    )
    mod.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(  # type: ignore[attr-defined]
        total=85899345920, used=0, free=85899345920
    )
    mod.nvmlDeviceGetVbiosVersion = lambda h: "92.00.36.00.02"  # type: ignore[attr-defined]
    return mod
