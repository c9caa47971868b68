"""What the results commands print fits an 80- and a 120-column terminal, and no number is cut.

The runs are the golden store's (tests/golden: real bench runs against the loopback server, an in-process
torch run, an H200 run and an MI300X sweep). Each command's text output at COLUMNS=80 and 120 is checked
against the same output at 1000 columns (where nothing wraps): no line is wider than the terminal, no
digit run exists only because a line break cut a number, no table cell or wrapped line breaks between two
digits, and the headline figures of the command's own ``--json`` appear whole.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from termcheck import cut_numbers, missing_whole, split_in_cells, too_wide
from typer.testing import CliRunner

from gpuledger.cli.main import app
from gpuledger.report import fmt

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
IDS: dict[str, str] = json.loads((GOLDEN / "ids.json").read_text())
WIDTHS = (80, 120)
WIDE = 1000

Figures = Callable[[Any], list[str]]


def _num(value: Any) -> str:
    return fmt.num(value)


def _report_figures(doc: Any) -> list[str]:
    out = []
    for run in doc["numbers"]["runs"]:
        cost = run["cost"]
        if cost is not None:
            out.append(_num(cost["usd_per_1m_output_tokens"]))
    comparison = doc["numbers"]["comparison"]
    if comparison:
        out.append(_num(comparison["pairs"][0]["ratio"]))
    return out


def _cost_figures(doc: Any) -> list[str]:
    return [_num(doc["usd_per_1m_output_tokens"]), _num(doc["throughput"]["output_tokens_per_s"])]


def _compare_figures(doc: Any) -> list[str]:
    return [_num(doc["pairs"][0]["ratio"]), *(_num(r["usd_per_1m_output_tokens"]) for r in doc["runs"])]


def _runs_figures(doc: Any) -> list[str]:
    return [f"{r['output_tokens_per_s']['value']:,.1f}" for r in doc if r["output_tokens_per_s"]["value"]]


def _show_figures(doc: Any) -> list[str]:
    return [f"{doc['output_tokens_per_s']['value']:,.1f}"]


def _gpus_figures(doc: Any) -> list[str]:
    values = [g.get("memory_gb", {}).get("value") for g in doc["gpus"]]
    return [format(v, ",.4g") for v in values if v]


COMMANDS: dict[str, tuple[list[str], Figures | None]] = {
    "report-h200": (["report", IDS["h200"]], _report_figures),
    "report-pair": (["report", IDS["h200"], IDS["mi300x_sweep"]], _report_figures),
    "report-sweep": (["report", IDS["srv_sweep"], "--profile", "cpu-cloud"], _report_figures),
    "report-torch": (["report", IDS["torch"], "--profile", "cpu-cloud"], _report_figures),
    "cost-sweep": (["cost", IDS["srv_sweep"], "--profile", "cpu-cloud", "--no-save"], _cost_figures),
    "cost-h200": (["cost", IDS["h200"], "--profile", "h200-own", "--no-save"], _cost_figures),
    "cost-torch": (["cost", IDS["torch"], "--no-save"], _cost_figures),
    "compare-gpu": (
        ["compare", IDS["h200"], IDS["mi300x_sweep"], "--profile", f"{IDS['h200']}=h200-own",
         "--profile", f"{IDS['mi300x_sweep']}=mi300x-own"],
        _compare_figures,
    ),
    "compare-cpu": (["compare", IDS["srv_c4"], IDS["srv_sweep"], "--profile", "cpu-cloud"], _compare_figures),
    "estimate": (["estimate", IDS["h200"], "--gpu", "MI300X"], None),
    "runs": (["runs"], _runs_figures),
    "show-h200": (["show", IDS["h200"]], _show_figures),
    "show-sweep": (["show", IDS["mi300x_sweep"]], _show_figures),
    "show-faults": (["show", IDS["srv_faults"]], _show_figures),
    "gpus": (["gpus"], _gpus_figures),
    "profiles": (["profiles"], None),
}


@pytest.fixture(scope="module")
def golden_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    d = tmp_path_factory.mktemp("golden-width")
    shutil.copy(GOLDEN / "store-v1.sqlite", d / "store.sqlite")
    return f"sqlite:///{d / 'store.sqlite'}"


def _invoke(args: list[str], columns: int, db: str) -> str:
    result = CliRunner().invoke(app, args, env={"COLUMNS": str(columns), "GPULEDGER_DB": db})
    assert result.exit_code == 0, result.output
    return result.stdout


def check(narrow: str, wide: str, width: int, figures: list[str]) -> None:
    assert not too_wide(narrow, width), "\n".join(too_wide(narrow, width))
    assert not cut_numbers(narrow, wide), f"cut: {cut_numbers(narrow, wide)}\n{narrow}"
    assert not split_in_cells(narrow), "\n".join(split_in_cells(narrow))
    assert not missing_whole(narrow, figures), f"not whole: {missing_whole(narrow, figures)}\n{narrow}"


@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_command_fits_80_and_120_columns_without_cutting_a_number(name: str, golden_db: str) -> None:
    args, figures_of = COMMANDS[name]
    figures = figures_of(json.loads(_invoke([*args, "--json"], WIDE, golden_db))) if figures_of else []
    wide = _invoke(args, WIDE, golden_db)
    assert not missing_whole(wide, figures), missing_whole(wide, figures)
    for width in WIDTHS:
        check(_invoke(args, width, golden_db), wide, width, figures)


def test_a_long_provenance_sentence_is_printed_once_under_the_tables(golden_db: str, tmp_path: Path) -> None:
    """A CPU run without a power reading, priced as owned hardware, rests on CodeCarbon's TDP rule (~300
    characters): the answer, the inputs and the warnings refer to it as [n]; the sentence itself is
    printed once, after the tables."""
    box = tmp_path / "cpu-box.yaml"
    box.write_text("name: cpu-box\nhost_price: 1500\nelectricity_per_kwh: 0.14\npue: 1.0\n")
    for args in (
        ["cost", IDS["torch"], "--profile", str(box), "--no-save"],
        ["report", IDS["torch"], "--profile", str(box)],
    ):
        for width in WIDTHS:
            out = _invoke(args, width, golden_db)
            assert out.count("CodeCarbon") == 1, out
            lines = out.splitlines()
            where = next(i for i, line in enumerate(lines) if "CodeCarbon" in line)
            note = max(i for i in range(where + 1) if re.match(r"^\[\d+\] ", lines[i]))
            assert not any("┃" in line or "│" in line for line in lines[note:]), "the note is inside a table"
            marker = lines[note].split()[0]
            assert sum(line.count(marker) for line in lines[:note]) >= 2, out  # referred to where it applies
