"""Times a command line gives are bounded (docs/contracts.md, "Which inputs are bounded"): ``--since`` names
a moment from 1970-01-01 to 9998-12-31 or an age of at most 100 years, ``telemetry import --clock-offset``
is at most 366 days either way. Beyond them: one usage line, exit 2 — ``runs --since 99999999999d``,
``--since 0001-01-01`` and ``--clock-offset 1e308`` overflowed Python's datetime (exit 70). A text that is
not a time at all stays exit 4.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpuledger.cli.main import main
from gpuledger.cli.since import parse_since
from gpuledger.errors import UsageError
from gpuledger.records import RunInfo
from gpuledger.store import open_store


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def one_usage_line(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    code, out, err = cli(capsys, *args)
    assert (code, out) == (2, "") and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: ")
    return err.strip()


@pytest.mark.parametrize(("since", "said"), [
    ("99999999999d", "an age is at most 100 years (36,525d), got 1e+11 days"),
    ("9" * 400 + "w", "an age is at most 100 years (5,218w)"),
    ("0001-01-01", "a date from 1970-01-01 to 9998-12-31, got 0001-01-01"),
    ("9999-12-31T23:59+14:00", "a date from 1970-01-01 to 9998-12-31, got 9999-12-31"),
])
def test_a_since_outside_what_a_store_holds_is_one_usage_line(
    capsys: pytest.CaptureFixture[str], since: str, said: str
) -> None:
    line = one_usage_line(capsys, "runs", "--since", since)
    assert said in line and line.startswith(f"error: --since {since[:64]}")


def test_the_bounds_themselves_are_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    with open_store(None) as store:
        store.create_run(RunInfo(id="", engine="openai", model="m", status="complete"))
    for since in ("36525d", "1970-01-01", "9998-12-31T00:00+00:00"):
        code, _, err = cli(capsys, "runs", "--since", since, "--json")
        assert code == 0, err
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert parse_since("36525d", now) == now - timedelta(days=36_525)
    with pytest.raises(UsageError):
        parse_since("36525.5d", now)


def test_a_since_that_is_no_time_stays_invalid_input(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "runs", "--since", "yesterday-ish")
    assert code == 4 and "expected a date or time" in err


@pytest.mark.parametrize("offset", ["1e308", "-1e308", "31622401"])
def test_a_clock_offset_beyond_a_year_is_one_usage_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, offset: str
) -> None:
    log = tmp_path / "power.csv"
    log.write_text("timestamp, index, power.draw [W]\n2026/11/30 14:02:00.250, 0, 300.00 W\n")
    line = one_usage_line(capsys, "telemetry", "import", "abcd2345", str(log), "--clock-offset", offset)
    assert "--clock-offset must be -31,622,400 … 31,622,400 s (366 days either way" in line
