"""The repository stands alone: a clone with nothing beside it runs its tests and benchmarks.

No test, test helper, SOURCES note or benchmark names a path outside the checkout (a shared folder
beside it, an environment variable pointing there, a ``Path(__file__)`` climb above the repository
root, a relative ``../`` link that leaves it), and every capture the tests open lies in
tests/fixtures/captures, described in a SOURCES.md there."""

from __future__ import annotations

import ast
import itertools
import os
import re
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"
CAPTURES = TESTS / "fixtures" / "captures"

OUTSIDE = re.compile(r"\.\./(?:\.\./)*shared\b|/work/shared|GPULEDGER_SHARED|\bshared/fixtures")
RELATIVE_LINK = re.compile(r"(?<![\w./])((?:\.\./)+[\w.+-]*(?:/[\w.+-]+)*)")
# The capture fixtures and where each one's paths start (tests/conftest.py, tests/bench/conftest.py).
CAPTURE_ROOTS = {"fixtures_dir": CAPTURES, "server_fixtures": CAPTURES / "servers"}


def scanned_files() -> list[Path]:
    tests = [p for p in TESTS.rglob("*") if p.suffix in (".py", ".md")]
    bench = [p for p in (REPO / "benchmarks").rglob("*") if p.is_file()]
    return sorted(p for p in tests + bench if "__pycache__" not in p.parts)


def inside(path: Path) -> bool:
    return path == REPO or REPO in path.parents


def rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


# ---- Path(__file__) arithmetic, evaluated statically --------------------------------------------


def file_paths(tree: ast.Module, source: Path) -> Iterator[tuple[int, Path]]:
    """Every path a module computes from its own location (``Path(__file__)``, ``os.path.dirname``),
    through names it assigns, ``.parent``, ``.parents[N]`` and ``/ "literal"``, with its line."""
    names: dict[str, Path] = {}

    def ev(node: ast.expr) -> Path | None:
        match node:
            case ast.Name(id="__file__"):
                return source
            case ast.Name(id=name):
                return names.get(name)
            case ast.Call(func=ast.Name(id="Path"), args=[arg]):
                return ev(arg)
            case ast.Call(func=ast.Attribute(value=base, attr="resolve" | "absolute"), args=[]):
                return ev(base)
            case ast.Call(func=ast.Attribute(attr="dirname"), args=[arg]):
                p = ev(arg)
                return p.parent if p else None
            case ast.Call(func=ast.Attribute(attr="abspath" | "realpath"), args=[arg]):
                return ev(arg)
            case ast.Attribute(value=base, attr="parent"):
                p = ev(base)
                return p.parent if p else None
            case ast.Subscript(value=ast.Attribute(value=base, attr="parents"), slice=ast.Constant(int(n))):
                p = ev(base)
                if p is None:
                    return None
                return p.parents[n] if n < len(p.parents) else Path(p.anchor)
            case ast.BinOp(left=base, op=ast.Div(), right=ast.Constant(value=str(part))):
                p = ev(base)
                return Path(os.path.normpath(p / part)) if p else None
        return None

    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = ev(node.value)
            if value is not None:
                names[node.targets[0].id] = value
    for node in ast.walk(tree):
        if isinstance(node, ast.expr) and not isinstance(node, ast.Name):
            value = ev(node)
            if value is not None:
                yield node.lineno, value


# ---- the capture paths the tests open ------------------------------------------------------------


def module_literals(tree: ast.Module) -> dict[str, list[str]]:
    """Module-level names bound to a literal list/tuple/set/dict of strings (dict: its keys)."""
    out: dict[str, list[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = node.value
            items = value.keys if isinstance(value, ast.Dict) else getattr(value, "elts", None)
            if isinstance(value, (ast.Dict, ast.List, ast.Tuple, ast.Set)) and items is not None:
                strings = [k.value for k in items if isinstance(k, ast.Constant) and isinstance(k.value, str)]
                if strings and len(strings) == len(items):
                    out[node.targets[0].id] = strings
    return out


def parametrized(func: ast.FunctionDef, literals: dict[str, list[str]]) -> dict[str, list[str]]:
    """The string values each argument of ``func`` takes: from ``pytest.mark.parametrize`` (literal
    lists, or a module literal, possibly through ``sorted``) and from string defaults."""
    bound: dict[str, list[str]] = {}
    for dec in func.decorator_list:
        if not (isinstance(dec, ast.Call) and getattr(dec.func, "attr", None) == "parametrize"):
            continue
        argnames, values = dec.args[0], dec.args[1]
        if isinstance(argnames, ast.Constant) and isinstance(argnames.value, str):
            names = [n.strip() for n in argnames.value.split(",")]
        elif isinstance(argnames, (ast.Tuple, ast.List)):
            names = [str(n.value) for n in argnames.elts if isinstance(n, ast.Constant)]
        else:
            continue
        if isinstance(values, ast.Call) and getattr(values.func, "id", None) == "sorted":
            values = values.args[0]
        if isinstance(values, ast.Name) and values.id in literals and len(names) == 1:
            bound[names[0]] = literals[values.id]
            continue
        if not isinstance(values, (ast.List, ast.Tuple)):
            continue
        for row in values.elts:
            cells = row.elts if isinstance(row, ast.Tuple) and len(names) > 1 else [row]
            for name, cell in zip(names, cells, strict=False):
                if isinstance(cell, ast.Constant) and isinstance(cell.value, str):
                    bound.setdefault(name, []).append(cell.value)
    args = func.args.args
    for arg, default in zip(args[len(args) - len(func.args.defaults):], func.args.defaults, strict=True):
        if isinstance(default, ast.Constant) and isinstance(default.value, str):
            bound.setdefault(arg.arg, []).append(default.value)
    return bound


def strings_of(node: ast.expr, bound: dict[str, list[str]]) -> list[str] | None:
    """The strings an expression can be (literal, parametrized name, f-string of those); None if unknown."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Name):
        return bound.get(node.id)
    if isinstance(node, ast.JoinedStr):
        parts: list[list[str]] = []
        for value in node.values:
            got = strings_of(value.value if isinstance(value, ast.FormattedValue) else value, bound)
            if got is None:
                return None
            parts.append(got)
        return ["".join(p) for p in itertools.product(*parts)]
    return None


def capture_expr(node: ast.expr, roots: dict[str, Path], bound: dict[str, list[str]]) -> list[Path] | None:
    """The capture paths an expression can be: a root name, ``root / part / ...`` or ``x.fixture(name)``."""
    if isinstance(node, ast.Name):
        return [roots[node.id]] if node.id in roots else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        bases, parts = capture_expr(node.left, roots, bound), strings_of(node.right, bound)
        if bases is None or parts is None:
            return None
        return [base / part for base in bases for part in parts]
    if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "fixture" and node.args:
        names = strings_of(node.args[0], bound)
        return None if names is None else [CAPTURES / name for name in names]
    return None


def capture_paths(tree: ast.Module) -> Iterator[tuple[int, Path]]:
    """Every capture path the module opens whose name it spells out: ``fixtures_dir / ...``,
    ``server_fixtures / ...`` (or a local name bound to one of those) and ``machine.fixture(...)``
    (the doctor harness, rooted at fixtures_dir)."""
    literals = module_literals(tree)
    for func in ast.walk(tree):
        if not isinstance(func, ast.FunctionDef):
            continue
        bound = parametrized(func, literals)
        roots = dict(CAPTURE_ROOTS)
        for node in ast.walk(func):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                got = capture_expr(node.value, roots, bound)
                if isinstance(node.targets[0], ast.Name) and got is not None and len(got) == 1:
                    roots[node.targets[0].id] = got[0]
        for node in ast.walk(func):
            if isinstance(node, (ast.BinOp, ast.Call)):
                for target in capture_expr(node, roots, bound) or []:
                    yield node.lineno, target


def python_trees() -> Iterator[tuple[Path, ast.Module]]:
    for path in scanned_files():
        if path.suffix == ".py":
            yield path, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


# ---- the specification ---------------------------------------------------------------------------


def test_the_capture_fixture_is_a_folder_inside_the_repository(fixtures_dir: Path) -> None:
    assert fixtures_dir.resolve() == CAPTURES
    assert {p.name for p in CAPTURES.iterdir() if p.is_dir()} >= {"amd", "nvidia-smi", "servers"}


def test_no_test_or_benchmark_names_the_shared_folder_beside_the_checkout() -> None:
    hits = [
        f"{rel(path)}:{n}: {line.strip()}"
        for path in scanned_files()
        if path != Path(__file__).resolve()  # this file spells the patterns out
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert not hits, "paths outside the repository:\n" + "\n".join(hits)


def test_no_path_computed_from_a_files_location_leaves_the_repository() -> None:
    seen, outside = 0, []
    for path, tree in python_trees():
        for line, target in file_paths(tree, path):
            seen += 1
            if not inside(target):
                outside.append(f"{rel(path)}:{line}: {target}")
    assert seen >= 20  # REPO/TESTS/HERE constants across tests and benchmarks: the check sees them
    assert not outside, "Path(__file__) climbs above the repository root:\n" + "\n".join(outside)


def test_relative_links_in_notes_stay_inside_the_repository() -> None:
    bad = [
        f"{rel(path)}: {link}"
        for path in scanned_files()
        if path.suffix == ".md"
        for link in RELATIVE_LINK.findall(path.read_text(encoding="utf-8"))
        if not inside(Path(os.path.normpath(path.parent / link)))
    ]
    assert not bad, "relative links that leave the repository:\n" + "\n".join(bad)


def test_every_capture_the_tests_open_is_in_the_repository() -> None:
    opened = {(rel(p), line, target) for p, tree in python_trees() for line, target in capture_paths(tree)}
    assert len({target for _, _, target in opened}) >= 40  # the check sees the captures the tests name
    missing = sorted(f"{src}:{line}: {target}" for src, line, target in opened if not target.exists())
    assert not missing, "captures the tests open that are not in the repository:\n" + "\n".join(missing)


def test_every_capture_is_described_in_a_sources_note_beside_it() -> None:
    notes = {p.parent: p.read_text(encoding="utf-8") for p in CAPTURES.rglob("SOURCES.md")}
    undescribed = [
        rel(p)
        for p in CAPTURES.rglob("*")
        if p.is_file() and p.name != "SOURCES.md"
        and not any(p.name in text for folder, text in notes.items() if folder in p.parents)
    ]
    assert CAPTURES / "SOURCES.md" in {folder / "SOURCES.md" for folder in notes}
    assert not undescribed, "captures without a source line: " + ", ".join(undescribed)
