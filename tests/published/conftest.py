"""Fixtures for the published-results tests: the CLI, and the InferenceX points of the test data."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from published_data import INFERENCEX_CSV

from gpuledger.cli.main import main

Cli = Callable[..., Any]


@dataclass(frozen=True)
class Result:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Cli:
    """``cli("cost", run)``: the command's ``--json`` document, run as the user runs it (exit 0 asserted);
    ``json_out=False``: its exit code and output (terminal rendering, or the one-line error)."""

    def run(*args: str, json_out: bool = True) -> Any:
        rc = main([*args, *(["--json"] if json_out else [])])
        out = capsys.readouterr()
        if not json_out:
            return Result(rc, out.out, out.err)
        assert rc == 0, out.err
        return json.loads(out.out)

    return run


@pytest.fixture
def inferencex_runs(cli: Cli) -> dict[str, str]:
    """The test data's six InferenceX points imported: label -> run id."""
    doc = cli("import-results", str(INFERENCEX_CSV))
    return {row["label"]: row["id"] for row in doc["imported"]}
