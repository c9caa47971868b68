"""``gpuledger run --repeat N``: N in-process measurements of the same chosen model in one group, each
priced, and the answer's interval over them (the CPU ``--quick`` path: a built-in dummy model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuledger.cli.main import main


def test_run_repeat_stores_a_group_and_gives_the_mean_with_its_interval(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pytest.importorskip("torch")
    html = tmp_path / "group.html"
    code = main(["run", "--quick", "--device", "cpu", "--repeat", "2", "--html", str(html), "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    doc = json.loads(out.out)
    group = doc["group"]
    assert group["group"].startswith("g-") and len(group["runs"]) == 2
    rate = group["figures"]["output tokens"]
    assert rate["n"] == 2 and rate["ci95_low"] is not None and rate["ci95_low"] < rate["mean"]
    price = next(v for k, v in group["figures"].items() if k.startswith("cost per"))
    assert price["n"] == 2 and price["unit"] == "USD"
    # Each run is stored with its repeat record and its verdict; the report covers both, group first.
    assert main(["show", group["runs"][0], "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["workload"]["repeat"] == {"group": group["group"], "index": 1, "of": 2}
    assert shown["summary"]["verdict"]["status"] in ("pass", "warn", "fail")
    assert f"group {group['group']} (2 runs)" in html.read_text()
