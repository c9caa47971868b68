"""``gpuledger export --format csv`` writes no cell a spreadsheet would run (CSV injection, OWASP): every
text cell that begins with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is written with a ``'`` in
front, every text cell is quoted so that a carriage return inside one cannot start a row of its own
(``gpuledger.textsafe.csv_text``), and numbers — negative ones too — stay numbers. The texts come from
outside (a run's label, a server's error, a stage's name, an imported run) and reach the CSV through the
store, as ``export`` reads them.
"""

from __future__ import annotations

import csv
import io

import pytest

from gpuledger.cli.main import main
from gpuledger.records import RequestRecord, RunInfo
from gpuledger.store import Store, open_store
from gpuledger.textsafe import csv_cell, csv_text

ATTACK = "=cmd|' /C calc'!A0"
HOSTILE = [ATTACK, "+1+cmd|' /C calc'!A0", "-2+3+cmd|' /C calc'!A0", "@SUM(1+9)*cmd|' /C calc'!A0",
           "\t=1+1", "\r=1+1", "=HYPERLINK(\"http://127.0.0.1/x\",\"click\")", "ok\r=cmd|' /C calc'!A0"]


@pytest.fixture
def store() -> Store:
    st = open_store(None)
    yield st  # type: ignore[misc]
    st.close()


def exported_rows(store: Store, capsys: pytest.CaptureFixture[str]) -> list[dict[str, str]]:
    run_id = store.create_run(RunInfo(id="", engine="openai", model=ATTACK, label=ATTACK))
    store.add_requests(run_id, [
        RequestRecord(index=i, t_send=0.1 * i, t_first=0.1 * i + 0.05, t_end=0.1 * i + 0.2,
                      chunk_times=[0.1 * i + 0.05], input_tokens=3, output_tokens=1, error=text, stage=text)
        for i, text in enumerate(HOSTILE)
    ])
    store.update_run(run_id, status="complete")
    assert main(["export", run_id, "--format", "csv"]) == 0
    return list(csv.DictReader(io.StringIO(capsys.readouterr().out, newline="")))


def test_no_text_cell_of_a_csv_export_starts_a_formula(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = exported_rows(store, capsys)
    shown = ["'" + t for t in HOSTILE[:-1]] + [HOSTILE[-1]]  # a CR inside a quoted cell: one row still
    assert [r["error"] for r in rows] == shown and [r["stage"] for r in rows] == shown
    for row in rows:
        for cell in row.values():
            assert not cell.startswith(("=", "+", "-", "@", "\t", "\r")), cell


def test_numbers_stay_numbers_in_the_csv(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    rows = exported_rows(store, capsys)
    assert [int(r["index"]) for r in rows] == list(range(len(HOSTILE)))
    assert float(rows[2]["t_send_s"]) == 0.2 and float(rows[0]["ttft_ms"]) == pytest.approx(50.0)
    assert csv_text([["index", "t"], [-7, -3.5, 0.1, None, "-3.5", "=1"]]) == (
        '"index","t"\n-7,-3.5,0.1,"","\'-3.5","\'=1"\n')  # numbers bare, texts quoted
    assert csv_cell("-3.5") == "'-3.5"  # a text that looks like a number is still a text
    assert csv_cell("server_usage") == "server_usage" and csv_cell("a=b") == "a=b"
