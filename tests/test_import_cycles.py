"""No import cycle among the modules of any package (issue 27): inside a package the modules are layered
too, so one can be read, tested and moved without the others that import it. A cycle is found with grimp
(the graph import-linter builds: module-level, function-level and ``TYPE_CHECKING`` imports all count, so
moving an import into a function does not hide one). Between the top-level packages the layers contract of
pyproject.toml holds the order; the workload kinds (``gpuledger.kinds``) span those layers by design
(records/kinds.py), so the top level is checked without them."""

from __future__ import annotations

import textwrap
from pathlib import Path

import grimp
import pytest

ROOT = "gpuledger"
KINDS = "gpuledger.kinds"


def cycles(graph: grimp.ImportGraph) -> dict[str, set[tuple[str, str]]]:
    """For every package of the graph whose modules import each other in a circle, the imports that would
    break its cycles (grimp's ``nominate_cycle_breakers``: a subpackage counts as one module with all its
    descendants)."""
    found: dict[str, set[tuple[str, str]]] = {}
    for package in sorted(m for m in graph.modules if len(graph.find_children(m)) >= 2):
        breakers = graph.nominate_cycle_breakers(package)
        if breakers:
            found[package] = set(breakers)
    return found


def without(graph: grimp.ImportGraph, package: str) -> grimp.ImportGraph:
    for module in graph.find_descendants(package) | {package}:
        graph.remove_module(module)
    return graph


def test_no_package_of_gpuledger_has_an_import_cycle_among_its_modules() -> None:
    found = cycles(grimp.build_graph(ROOT, cache_dir=None))
    found.pop(ROOT, None)  # the top level: checked below, without the kinds that span its layers
    top = cycles(without(grimp.build_graph(ROOT, cache_dir=None), KINDS))
    found |= top
    lines = [f"  {package}: " + ", ".join(f"{a} -> {b}" for a, b in sorted(pairs))
             for package, pairs in found.items()]
    assert not found, "import cycles (package: the imports that would break them):\n" + "\n".join(lines)


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A package whose subpackage ``inner`` holds a cycle a -> b -> c -> a (c's import inside a function),
    beside an acyclic one."""
    root = tmp_path / "plantedpkg"
    files = {
        "__init__.py": "",
        "inner/__init__.py": "",
        "inner/a.py": "from plantedpkg.inner import b\n",
        "inner/b.py": "from plantedpkg.inner.c import f\n",
        "inner/c.py": "def f():\n    from plantedpkg.inner import a\n    return a\n",
        "clean/__init__.py": "",
        "clean/x.py": "from plantedpkg.clean import y\n",
        "clean/y.py": "import os\n",
    }
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    return "plantedpkg"


def test_a_planted_cycle_is_found_in_its_package_and_nowhere_else(planted: str) -> None:
    found = cycles(grimp.build_graph(planted, cache_dir=None))
    assert list(found) == ["plantedpkg.inner"]
    (breaker,) = found["plantedpkg.inner"]
    a, b, c = (f"plantedpkg.inner.{m}" for m in "abc")
    assert breaker in {(a, b), (b, c), (c, a)}
