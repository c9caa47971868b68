"""The CPU this process runs on: its model name (``/proc/cpuinfo``) and how many logical CPUs it may use.

One reading for everything that names or counts the CPU: the system facts (doctor, lock), the CPU
telemetry device, the in-process engine and the bench's client-usage figure.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

import psutil

# /proc/cpuinfo keys that carry the model: x86 ("model name"), ARM boards ("Model"), MIPS ("cpu model").
_MODEL_KEYS = ("model name", "Model", "cpu model")


def cpu_model_from_cpuinfo(text: str) -> str | None:
    """The first model line of a ``/proc/cpuinfo`` text (``AMD EPYC 9474F 48-Core Processor``), or None."""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in _MODEL_KEYS and value.strip():
            return value.strip()
    return None


def cpu_model_name(root: Path = Path("/")) -> str:
    """The CPU's name from ``<root>/proc/cpuinfo``, else what Python knows of the platform."""
    try:
        text = (root / "proc" / "cpuinfo").read_text(errors="replace")
    except OSError:
        text = ""
    return cpu_model_from_cpuinfo(text) or platform.processor() or platform.machine() or "CPU"


def usable_cpus() -> int:
    """Logical CPUs this process may run on (a container's or taskset's CPU set, not the host's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return psutil.cpu_count(logical=True) or 1
