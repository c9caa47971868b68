"""gpuledger: what a token of your workload costs on your GPU stack, and why."""

from __future__ import annotations

__version__ = "0.1.0"
