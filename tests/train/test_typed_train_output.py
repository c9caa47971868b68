"""What ``gpuledger bench --task train`` prints after the answer is read from the run's typed models: the
training summary (``TrainingSummary``) and the engine's allocator peak through the typed view of the run's
server record (``bench.rundocs.ServerView``), never by key from the stored dict — so mypy holds
cli/bench_train.py to their fields. A real training run of a tiny model on this machine's CPU."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuledger.bench.rundocs import ClientView, ServerView
from gpuledger.kinds.train.summary import TrainingSummary
from gpuledger.store import open_store

pytest.importorskip("torch", reason="the training tests need torch (pip install '.[torch]')")

CLI = Callable[..., tuple[int, str, str]]


def cells(out: str) -> dict[str, str]:
    """The two-column rows of the tables printed: the first cell -> the second (cells that wrap joined)."""
    rows: dict[str, str] = {}
    last = ""
    for line in out.splitlines():
        if not line.startswith("│"):
            continue
        parts = [c.strip() for c in re.split("│", line)[1:-1]]
        if len(parts) != 2:
            continue
        if parts[0]:
            last = parts[0]
            rows[last] = parts[1]
        elif last:
            rows[last] += " " + parts[1]
    return rows


def test_the_training_table_is_the_summarys_figures_and_the_engines_peak(
    tiny_llama_dir: Path, tmp_path: Path, cli: CLI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    db = f"sqlite:///{tmp_path / 's.sqlite'}"
    code, out, err = cli("bench", "--task", "train", "--model", str(tiny_llama_dir), "--batch-size", "2",
                         "--seq-len", "32", "--steps", "3", "--warmup-steps", "2", "--device", "cpu",
                         "--no-telemetry", "--db", db)
    assert code == 0, err
    run_id = out.strip().splitlines()[-1].removeprefix("run id: ")
    with open_store(db) as store:
        info = store.get_run(run_id)
    s = info.summary
    assert isinstance(s, TrainingSummary)
    rows = cells(out)
    per_step = f"{s.tokens_per_step:,.0f} per step"
    assert rows["training tokens"] == f"{s.tokens_total:,} in {s.window_s:.2f} s ({per_step})"
    assert rows["samples/s"] == f"{s.samples_per_s:,.3f} samples/s"
    server = ServerView.of(info.server)
    peak = server.details.peak_memory
    assert peak is not None and peak.value is not None and peak.value > 0  # the profiled warm-up step's
    assert rows["peak memory"].startswith(f"allocator {peak.value / 1024**3:.2f} GiB ({peak.source})")
    text = " ".join(out.split())
    for note in [*server.warnings, *ClientView.of(info.client).warnings]:
        assert f"note: {' '.join(note.split())[:60]}" in text
