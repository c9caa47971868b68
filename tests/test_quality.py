"""The code base itself: typed (mypy --strict), linted (ruff), no stubs, vendor libraries imported once."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src" / "gpuledger"


def _tool(name: str) -> str:
    exe = Path(sys.executable).with_name(name)
    found = str(exe) if exe.exists() else shutil.which(name)
    if not found:
        pytest.fail(f"{name} is not installed: pip install -e '.[test]'")
    return found


def test_mypy_strict_is_clean_on_src() -> None:
    proc = subprocess.run(
        [_tool("mypy"), "--strict", "src"], cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_ruff_is_clean() -> None:
    proc = subprocess.run(
        [_tool("ruff"), "check", "src", "tests", "benchmarks"], cwd=REPO, capture_output=True, text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_no_unfinished_code_markers_in_src() -> None:
    pattern = re.compile(r"TODO|FIXME|raise NotImplemented")
    hits = [
        f"{p.relative_to(REPO)}:{n}"
        for p in SRC.rglob("*.py")
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert hits == []


@pytest.mark.parametrize(
    ("library", "allowed"),
    [
        ("pynvml", {"facts/nvml.py"}),
        ("amdsmi", {"telemetry/amd.py"}),
        ("torch", {"engines/torch/imports.py"}),
        ("transformers", {"engines/torch/imports.py"}),
        ("diffusers", {"engines/image/imports.py"}),
        ("tokenizers", {"engines/image/imports.py"}),
        ("PIL", {"engines/image/thumbs.py"}),
        ("ray", {"bench/cluster.py"}),
    ],
)
def test_each_vendor_library_is_imported_in_one_module_only(library: str, allowed: set[str]) -> None:
    """Python import statements and ``importlib.import_module("name")`` calls (a script text run in a child
    process is another process)."""

    def imports(path: Path) -> set[str]:
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
            elif (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                names.add(node.args[0].value.split(".")[0])
        return names

    importers = {str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if library in imports(p)}
    assert importers <= allowed


def test_subprocess_calls_never_use_a_shell() -> None:
    offenders = [
        str(p.relative_to(REPO))
        for p in SRC.rglob("*.py")
        if re.search(r"shell\s*=\s*True", p.read_text())
    ]
    assert offenders == []
