"""A package's names imported when first used (PEP 562), so that importing one of its modules does not import
the whole package: ``gpuledger runs`` reads ``gpuledger.report.kinds`` without building the report machinery,
``gpuledger bench --help`` imports nothing of the runner.

A package lists each name it exports with the module that defines it, and imports them under ``TYPE_CHECKING``
for the type checker::

    if TYPE_CHECKING:
        from gpuledger.report.build import build_report
    __getattr__, __dir__ = exports(__name__, {"build_report": "gpuledger.report.build"})

tests/test_lazy_packages.py holds the table and the ``TYPE_CHECKING`` imports equal."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def exports(package: str, names: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``names`` maps each exported name to its module."""
    table = dict(names)

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    def __dir__() -> list[str]:
        return sorted(table)

    return __getattr__, __dir__
