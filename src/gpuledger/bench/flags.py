"""The spec of a bench run from the command line's values (``gpuledger bench``, ``gpuledger gate --run``): the
values make the task's options model once (``bench.options.options_of``: each kind's ``options`` facet), the
model makes the spec's document (``flags_document``), which is validated into the spec (``spec_of``) — after
``bench --like`` filled in the stored workload, when it is a repeat: an option given alone
(``--dataset-path``) is then checked together with the stored values it goes with (``require`` checks what
the spec still needs once it is whole).

``FLAG_FIELDS`` says which spec fields each option sets, by spec class (each kind's options facet says it for
its specs): what ``bench --like`` copies from a stored run when the option is not given, and compares when it
is; ``REPEAT_NEEDS`` what a stored spec must record to be repeated.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any

from gpuledger.bench.options import TaskOptions, options_of, spec_of
from gpuledger.engines import EngineKind
from gpuledger.errors import UsageError
from gpuledger.records import BenchSpec
from gpuledger.records.kinds import load_facet


def _facets() -> list[ModuleType]:
    return load_facet("options")


FLAG_FIELDS: dict[type[BenchSpec], dict[str, tuple[str, ...]]] = {
    spec: fields for module in _facets() for spec, fields in module.FLAG_FIELDS.items()
}
REPEAT_NEEDS: dict[type[BenchSpec], tuple[str, ...]] = {
    spec: needs for module in _facets() for spec, needs in module.REPEAT_NEEDS.items()
}


def flags_document(kind: EngineKind, values: Mapping[str, Any]) -> dict[str, Any]:
    """The spec document the command line's ``values`` ask for, for an engine of ``kind``
    (``values["given"]``: the options given on the command line; not validated yet: ``spec_of``). Values a
    repeat may still supply (``--like``: the in-process engine's model) can be missing here: ``require``
    checks them once the spec is whole."""
    return options_of(kind, values, values.get("given") or ()).document(kind)


def require(spec: BenchSpec) -> None:
    """``UsageError`` when the spec still lacks what the run needs (after ``--like`` filled it in), or has a
    server URL that is not one (``--base-url 127.0.0.1:8000``: no scheme) — a bad value, not the engine's
    error, refused before anything is opened."""
    for module in _facets():
        problem = module.require(spec)
        if problem:
            raise UsageError(problem)


__all__ = ["FLAG_FIELDS", "REPEAT_NEEDS", "TaskOptions", "flags_document", "options_of", "require", "spec_of"]
