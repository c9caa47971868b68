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
from typing import Any

import pytest

from gpuledger.records.kinds import FACETS

REPO = Path(__file__).resolve().parents[1]


def _lint_imports() -> str:
    exe = Path(sys.executable).with_name("lint-imports")
    found = str(exe) if exe.exists() else shutil.which("lint-imports")
    if not found:
        pytest.fail("lint-imports is not installed: pip install -e '.[test]'")
    return found


def _contracts() -> dict[str, dict[str, Any]]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    return {c["id"]: c for c in config["contracts"]}


def test_the_layers_contract_names_every_layer_of_the_design() -> None:
    contract = _contracts()["layers"]
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


def test_every_facet_of_a_workload_kind_is_placed_in_a_layer() -> None:
    """The facets of records/kinds.py are each held to their layer (a forbidden contract names them as its
    source), and each layer of the design is held to the facets at or below it."""
    contracts = _contracts()
    placed = {m.rsplit(".", 1)[-1] for c in contracts.values() if c["type"] == "forbidden"
              for m in c["source_modules"] if m.startswith("gpuledger.kinds.*.")}
    assert placed | {"run"} == set(FACETS)  # run: the contract on all of gpuledger.kinds (below the CLI)
    inner = contracts["kind-facets"]
    assert inner["containers"] == ["gpuledger.kinds.*"]
    order = [n.strip(" ()") for layer in inner["layers"] for n in layer.replace(":", "|").split("|")]
    assert sorted(order) == sorted(FACETS)


def test_a_kind_facet_importing_above_its_layer_breaks_the_contract(tmp_path: Path) -> None:
    """A kind's summary (a records facet) that imports the report, in a function body."""
    shutil.copytree(REPO / "src" / "gpuledger", tmp_path / "gpuledger",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    summary = tmp_path / "gpuledger" / "kinds" / "image" / "summary.py"
    summary.write_text(
        summary.read_text() + "\n\ndef _hidden() -> object:\n"
        "    from gpuledger.report import build_report\n\n    return build_report\n"
    )
    proc = subprocess.run(
        [_lint_imports(), "--no-cache"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "a kind's spec and summary are records" in proc.stdout and "BROKEN" in proc.stdout
    assert "gpuledger.kinds.image.summary -> gpuledger.report" in proc.stdout
