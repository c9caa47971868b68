"""A package that exports its names lazily (``gpuledger.lazy.exports``) exports exactly what it imports for
the type checker, and every name resolves to the object its module defines: the table cannot drift from the
imports mypy checks."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "gpuledger"
LAZY = sorted(p for p in SRC.rglob("__init__.py") if "exports(__name__" in p.read_text(encoding="utf-8"))


def _checked_imports(tree: ast.Module) -> dict[str, str]:
    out: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for imp in node.body:
                if isinstance(imp, ast.ImportFrom) and imp.module:
                    out.update({a.asname or a.name: imp.module for a in imp.names})
    return out


def _table(tree: ast.Module) -> dict[str, str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "exports":
            table = node.args[1]
            assert isinstance(table, ast.Dict)
            pairs = zip(table.keys, table.values, strict=True)
            return {ast.literal_eval(k): ast.literal_eval(v) for k, v in pairs if k is not None}
    raise AssertionError("no exports(...) call")


def test_there_are_lazy_packages() -> None:
    assert {p.parent.name for p in LAZY} >= {"report", "bench", "cost"}


@pytest.mark.parametrize("init", LAZY, ids=lambda p: p.parent.name)
def test_the_lazy_table_is_what_the_type_checker_sees(init: Path) -> None:
    tree = ast.parse(init.read_text(encoding="utf-8"))
    assert _table(tree) == _checked_imports(tree)


@pytest.mark.parametrize("init", LAZY, ids=lambda p: p.parent.name)
def test_every_lazy_name_is_its_modules_object(init: Path) -> None:
    package = "gpuledger." + init.parent.relative_to(SRC).as_posix().replace("/", ".")
    pkg = importlib.import_module(package)
    for name, module in _table(ast.parse(init.read_text(encoding="utf-8"))).items():
        assert getattr(pkg, name) is getattr(importlib.import_module(module), name), name
    with pytest.raises(AttributeError):
        _ = pkg.no_such_name
