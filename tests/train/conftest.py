"""Fixtures for the training tests: a real tiny model saved on disk, data with a pattern it can learn, and the
command line run in this process."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpuledger.cli.main import main
from support.tiny_model import make_tiny_llama

PATTERN = "the cat sat on the mat. "


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A saved tiny Llama (random weights, real byte-level BPE tokenizer): loads through from_pretrained."""
    return make_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture
def pattern_file(tmp_path: Path) -> Path:
    """Learnable text: one short sentence repeated."""
    path = tmp_path / "pattern.txt"
    path.write_text(PATTERN * 400, encoding="utf-8")
    return path


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    """``gpuledger ARGS`` in this process: (exit code, stdout, stderr)."""

    def run(*args: str) -> tuple[int, str, str]:
        code = main(list(args))
        out = capsys.readouterr()
        return code, out.out, out.err

    return run
