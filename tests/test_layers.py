"""The layer order is enforced: `lint-imports` (import-linter, contract in pyproject.toml) passes on src/.

Every import counts, at module level or inside a function: an upward import hidden in a function body is
still a dependency (and usually a cycle dodged), so it fails here the same way."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _lint_imports() -> str:
    exe = Path(sys.executable).with_name("lint-imports")
    found = str(exe) if exe.exists() else shutil.which("lint-imports")
    if not found:
        pytest.fail("lint-imports is not installed: pip install -e '.[test]'")
    return found


def test_the_layers_contract_names_every_layer_of_the_design() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = config["contracts"]
    assert contract["type"] == "layers" and contract["containers"] == ["gpuledger"]
    assert contract["exhaustive"] is True
    assert contract["layers"][0] == "cli" and contract["layers"][-1].startswith("records")
    order = [name.strip() for layer in contract["layers"] for name in layer.replace(":", "|").split("|")]
    for high, low in [("report", "cost"), ("cost", "bench"), ("bench", "engines"), ("telemetry", "store"),
                      ("store", "facts"), ("facts", "catalog"), ("catalog", "records")]:
        assert order.index(high) < order.index(low), (high, low)


def test_imports_follow_the_layers() -> None:
    proc = subprocess.run(
        [_lint_imports(), "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]


def test_an_upward_import_inside_a_function_breaks_the_contract(tmp_path: Path) -> None:
    """The same contract over a copy of src/ where a catalog helper imports the doctor in a function body."""
    shutil.copytree(REPO / "src" / "gpuledger", tmp_path / "gpuledger",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    versions = tmp_path / "gpuledger" / "catalog" / "versions.py"
    versions.write_text(
        versions.read_text() + "\n\ndef _hidden() -> object:\n    from gpuledger.doctor import diagnose\n\n"
        "    return diagnose\n"
    )
    proc = subprocess.run(
        [_lint_imports(), "--no-cache"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "gpuledger.catalog is not allowed to import gpuledger.doctor" in proc.stdout
    assert "gpuledger.catalog.versions -> gpuledger.doctor" in proc.stdout
