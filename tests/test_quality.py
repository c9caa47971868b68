"""The code base itself: typed (mypy --strict), linted (ruff), no stubs, vendor libraries imported once."""

from __future__ import annotations

import ast
import importlib.util
import re
import shutil
import subprocess
import sys
import tomllib
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
    """With whatever optional libraries this environment has (README's test command: no Ray)."""
    proc = subprocess.run(
        [_tool("mypy"), "--strict", "src"], cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def _mypy_ini_as_if_absent(modules: list[str], cache_dir: Path) -> str:
    """pyproject's mypy settings as an INI file, with ``modules`` not followed: mypy then sees ``import ray``
    as Any, as it does where Ray is not installed."""
    conf = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]
    lines = ["[mypy]", f"cache_dir = {cache_dir}"]
    for key, value in conf.items():
        if key != "overrides":
            text = ",".join(value) if isinstance(value, list) else str(value)
            lines.append(f"{key} = {text}")
    for override in conf.get("overrides", []):
        names = override["module"] if isinstance(override["module"], list) else [override["module"]]
        lines.append(f"[mypy-{','.join(names)}]")
        lines += [f"{k} = {v}" for k, v in override.items() if k != "module"]
    lines += [f"[mypy-{','.join(modules)}]", "follow_imports = skip"]
    return "\n".join(lines) + "\n"


def test_mypy_strict_is_clean_on_src_without_ray_too(tmp_path: Path) -> None:
    """Ray ships its types: installed (``.ci/run``, the extra gpuledger[cluster]) mypy reads them; absent
    (README's test command) ``import ray`` is Any. Where Ray is installed, src is checked a second time as
    mypy sees it without Ray (``bench/cluster.py`` returned that Any as a module: red for every newcomer)."""
    if importlib.util.find_spec("ray") is None:
        pytest.skip("Ray is not installed: test_mypy_strict_is_clean_on_src is this check here")
    ini = tmp_path / "mypy.ini"
    ini.write_text(_mypy_ini_as_if_absent(["ray", "ray.*"], REPO / ".mypy_cache" / "as-without-ray"))
    proc = subprocess.run(
        [_tool("mypy"), "--config-file", str(ini), "--strict", "src"], cwd=REPO, capture_output=True,
        text=True, timeout=600,
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
        ("submitit", {"bench/slurm.py"}),
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
