"""Runs stored by an earlier gpuledger read the same today: ``show``, ``cost``, ``compare``, ``estimate``,
``report``, ``export`` and ``runs`` with ``--json`` print what they printed when the store was written
(tests/golden/README.md: which commit, and every deliberate change since, with its reason).

The store is copied first: opening it upgrades it (schema migrations, stored documents of an older
version), which is part of what is tested.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuledger.cli.main import app

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from make_golden import commands  # noqa: E402

IDS: dict[str, str] = json.loads((HERE / "ids.json").read_text())
GOLDEN = {name: json.loads((HERE / "outputs" / f"{name}.json").read_text()) for name in commands(IDS)}
# Values that depend on when or where the command runs, not on the stored run.
VOLATILE = {"generated_at", "store", "db", "now"}


def _scrub(value: Any, approx: bool = True) -> Any:
    if isinstance(value, dict):
        return {k: ("<volatile>" if k in VOLATILE else _scrub(v, approx)) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v, approx) for v in value]
    if approx and isinstance(value, float) and not value.is_integer():
        # The same figure computed in another order may differ in its last bits: 12 significant digits.
        return pytest.approx(value, rel=1e-12, abs=0.0)
    return value


@pytest.fixture(scope="module")
def golden_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    d = tmp_path_factory.mktemp("golden")
    shutil.copy(HERE / "store-v1.sqlite", d / "store.sqlite")
    return f"sqlite:///{d / 'store.sqlite'}"


@pytest.mark.parametrize("name", list(GOLDEN))  # the order they were captured in: cost saves evaluations
def test_output_is_unchanged(name: str, golden_db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPULEDGER_DB", golden_db)
    monkeypatch.setenv("COLUMNS", "120")
    want = GOLDEN[name]
    result = CliRunner().invoke(app, want["args"])
    assert result.exit_code == want["exit"], result.output
    got = json.loads(result.stdout) if result.stdout.strip() else None
    expected = want["stdout"]
    if want["args"][0] == "report":
        # A report's figures are its `numbers`; its sections are presentation (README: deliberate changes).
        got, expected = _report_numbers(got), _report_numbers(expected)
    assert _scrub(got, approx=False) == _scrub(expected)


def _report_numbers(doc: Any) -> Any:
    return {k: doc[k] for k in ("title", "runs", "numbers")} if isinstance(doc, dict) else doc
