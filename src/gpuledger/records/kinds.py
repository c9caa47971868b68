"""Workload kinds: each workload gpuledger measures is one package under ``gpuledger.kinds``.

The essay compares three workloads — LLM inference (``text``), PyTorch training (``train``) and image
generation (``image``) — and a fourth (embeddings, say) is a fourth package. A kind's package defines
``KIND``, a :class:`WorkloadKind`, in its ``__init__.py`` (which imports nothing but this module), and holds
its parts as *facets*: modules of fixed names, each at one layer of the design (docs/design.md), loaded
when a layer asks for it:

=========== ======== ====================================================================================
facet       layer    provides
=========== ======== ====================================================================================
``spec``    records  the ``BenchSpec`` subclasses its runs store (what the run was asked to do)
``summary`` records  the ``RunSummary`` subclasses its runs store, and the units they count
``checks``  bench    ``RULES``: its validity checks, with their wording (``bench.validity``)
``options`` bench    its ``bench`` options as one typed model, validated once, and the spec they make
``pricing`` cost     ``cost_extras``: what its runs add to a cost document (found by ``cost.runcost``)
``report``  report   its report sections and the key facts of its answer
``run``     kinds    its ``gpuledger run --task`` evaluation (doctor → bench → cost → report)
=========== ======== ====================================================================================

A facet imports only its own layer and those below (import-linter holds it: pyproject.toml, the ``kind-*``
contracts), and a layer imports only facets of its own layer or below, so the layers hold although the
registry sits at the bottom: it knows a kind by its package's name and loads a facet with ``importlib`` when
asked. The layers above ask the registry (``kind_of_summary``, ``kind_named``) and the facets' types, never
``isinstance`` against another kind's classes. docs/contracts.md ("Workload kinds") lists what a kind
provides and how a fourth is added.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import ModuleType

# Where kinds live; a kind is the subpackage of this package whose __init__ defines KIND.
KINDS_PACKAGE = "gpuledger.kinds"
FACETS = ("spec", "summary", "checks", "options", "pricing", "report", "run")


class UnknownKind(LookupError):
    """No registered kind has that name (the caller words it: a usage error, an unreadable stored run)."""


@dataclass(frozen=True, slots=True)
class EngineName:
    """What the command line says of one engine before anything of it is imported (``bench --help``): its
    name, one line about it, the ``KIND`` of the specs its runs store, its endpoints with the request shape
    each takes (``prompt`` or ``chat``, the default first) and its default server URL. The engine registry
    (``engines.registry``) adds how to make one; a test holds the two to the same names."""

    name: str
    about: str
    spec_kind: str
    endpoints: tuple[tuple[str, str], ...] = ()
    default_base_url: str | None = None


@dataclass(frozen=True, slots=True)
class WorkloadKind:
    """One workload. ``name`` is what ``--task`` takes; ``summary_kinds`` the ``KIND`` of every summary class
    its runs store, ``spec_kinds`` those of its specs; ``unit`` the unit its runs are stored in
    (``RunInfo.unit``: ``image``, ``training_token``; text generation's ``token``, what its runs always
    stored); ``order`` its place in lists (``--task``'s choices).

    What ``--task`` needs of it: ``engines`` (its engines, in the order ``--engine`` lists them),
    ``default_engine`` (run without ``--engine``), ``engine_aliases`` (what ``--engine NAME`` means under this
    task when NAME is another task's engine: ``--task train --engine torch`` is ``torch-train``) and ``flags``
    (the bench options that are its own: given to another task's engine they are refused with one line; an
    option several tasks take, ``--steps``, is listed by each).

    ``items``: what its runs' ``num_ok`` / ``num_failed`` count (requests, steps): the word ``runs`` and
    ``show`` print beside the count without loading the kind's report facet (whose ``KindReport.items``
    says the same, held equal by tests/test_kinds.py)."""

    name: str
    about: str
    package: str
    unit: str
    summary_kinds: tuple[str, ...] = ()
    spec_kinds: tuple[str, ...] = ()
    order: int = 100
    facets: frozenset[str] = field(default_factory=frozenset)
    engines: tuple[EngineName, ...] = ()
    default_engine: str = ""
    engine_aliases: Mapping[str, str] = field(default_factory=dict)
    flags: tuple[str, ...] = ()
    items: str = "items"

    def has(self, facet: str) -> bool:
        return facet in self.facets

    def facet(self, facet: str) -> ModuleType | None:
        """The kind's ``facet`` module (imported now, once), or None when the kind has none."""
        if facet not in FACETS:
            raise ValueError(f"{facet!r} is not a facet (one of {', '.join(FACETS)})")
        if facet not in self.facets:
            return None
        return importlib.import_module(f"{self.package}.{facet}")


_REGISTRY: dict[str, WorkloadKind] = {}


def _discover() -> dict[str, WorkloadKind]:
    if _REGISTRY:
        return _REGISTRY
    root = importlib.import_module(KINDS_PACKAGE)
    found: list[WorkloadKind] = []
    for info in pkgutil.iter_modules(root.__path__):
        if not info.ispkg:
            continue
        package = f"{KINDS_PACKAGE}.{info.name}"
        module = importlib.import_module(package)
        kind = getattr(module, "KIND", None)
        if not isinstance(kind, WorkloadKind):
            raise TypeError(f"{package} defines no KIND = WorkloadKind(...)")
        path = getattr(module, "__path__", None) or []
        facets = frozenset(m.name for m in pkgutil.iter_modules(path) if m.name in FACETS)
        found.append(replace(kind, package=package, facets=facets))
    for kind in sorted(found, key=lambda k: (k.order, k.name)):
        _REGISTRY[kind.name] = kind
    return _REGISTRY


def kinds() -> tuple[WorkloadKind, ...]:
    """Every registered kind, in their order."""
    return tuple(_discover().values())


def kind_named(name: str) -> WorkloadKind:
    kind = _discover().get(name)
    if kind is None:
        raise UnknownKind(name)
    return kind


def kind_of_summary(summary_kind: str) -> WorkloadKind | None:
    """The kind whose runs store summaries of ``summary_kind`` (None: no kind registered one)."""
    return next((k for k in kinds() if summary_kind in k.summary_kinds), None)


def kind_of_spec(spec_kind: str) -> WorkloadKind | None:
    """The kind whose runs store specs of ``spec_kind`` (None: no kind registered one)."""
    return next((k for k in kinds() if spec_kind in k.spec_kinds), None)


def items_of(summary_kind: str | None, spec_kind: str) -> str:
    """The noun of a run's items: its summary's kind's, else (a run not summarised) its spec's; "items"
    for a run of no registered kind."""
    kind = kind_of_summary(summary_kind) if summary_kind is not None else kind_of_spec(spec_kind)
    return kind.items if kind is not None else "items"


def engine_names_of_kinds() -> tuple[EngineName, ...]:
    """Every kind's engines as its descriptor names them, in the kinds' order (the light table the
    command line's help and ``--engine`` choices are written from)."""
    return tuple(e for k in kinds() for e in k.engines)


def load_facet(facet: str) -> list[ModuleType]:
    """The ``facet`` module of every kind that has one, in the kinds' order (imported now)."""
    out = []
    for kind in kinds():
        module = kind.facet(facet)
        if module is not None:
            out.append(module)
    return out


__all__ = [
    "FACETS",
    "EngineName",
    "KINDS_PACKAGE",
    "UnknownKind",
    "WorkloadKind",
    "engine_names_of_kinds",
    "kind_named",
    "kind_of_spec",
    "kind_of_summary",
    "kinds",
    "load_facet",
]
