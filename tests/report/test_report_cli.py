"""``gpuledger report`` on the command line: outputs, files, exit codes."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from report_factory import Pair

from gpuledger.cli.main import main
from gpuledger.cli.report_cmd import parse_profiles
from gpuledger.errors import UsageError


def test_report_prints_terminal_tables(pair: Pair, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", pair.h200]) == 0
    out = capsys.readouterr().out
    assert "h200-vllm" in out and "Latency (ms)" in out and "Cost per run" in out


def test_report_writes_html_and_markdown_files(
    pair: Pair, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    html, md = tmp_path / "out" / "r.html", tmp_path / "r.md"
    html.parent.mkdir()  # a missing directory is refused (tests/test_output_files.py)
    assert main(["report", pair.h200, pair.mi300x, "--html", str(html), "--md", str(md)]) == 0
    captured = capsys.readouterr()
    assert html.read_text().startswith("<!doctype html>")
    assert "| h200-vllm | mi300x-vllm |" in md.read_text()
    assert f"wrote {html}" in captured.err and f"wrote {md}" in captured.err
    assert not list(tmp_path.glob("**/.*.tmp"))


def test_json_prints_only_json_on_stdout(
    pair: Pair, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    md = tmp_path / "r.md"
    assert main(["report", pair.h200, pair.mi300x, "--json", "--md", str(md)]) == 0
    doc = orjson.loads(capsys.readouterr().out)
    assert [r["id"] for r in doc["runs"]] == [pair.h200, pair.mi300x]
    assert doc["files"] == {"md": str(md)}
    assert doc["numbers"]["comparison"]["ratio"] > 0


def test_markdown_to_stdout(pair: Pair, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", pair.h200, "--md", "-"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# gpuledger report — h200-vllm")
    assert "## How measured" in out


def test_profiles_are_given_per_run(pair: Pair, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "rented.yaml"
    profile.write_text("name: rented\nrental_per_gpu_hour: 3.0\n")
    assert main(["report", pair.h200, pair.mi300x, "--profile", f"{pair.mi300x}={profile}", "--json"]) == 0
    doc = orjson.loads(capsys.readouterr().out)
    costs = [r["cost"]["profile"]["name"] for r in doc["numbers"]["runs"]]
    assert costs[1] == "rented" and costs[0] != "rented"


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["zzzzzzzz"], 3, "zzzzzzzz"),
        (["{a}", "{a}"], 2, "given twice"),
        (["{a}", "--profile", "=x"], 2, "expected RUN=PROFILE"),
        (["{a}", "--profile", "no-such-preset"], 3, "no cost profile 'no-such-preset'"),
        (["{a}", "--md", "-", "--json"], 2, "both want stdout"),
    ],
)
def test_bad_input_is_one_line_and_a_documented_exit_code(
    pair: Pair, capsys: pytest.CaptureFixture[str], args: list[str], code: int, message: str
) -> None:
    assert main(["report", *(a.format(a=pair.h200) for a in args)]) == code
    captured = capsys.readouterr()
    assert captured.out == ""
    assert message in captured.err
    assert "Traceback" not in captured.err


def test_an_unwritable_output_file_is_invalid_input(
    pair: Pair, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["report", pair.h200, "--md", str(blocker / "r.md")]) == 4
    assert "cannot write" in capsys.readouterr().err


def test_profile_flags_parse_into_a_run_map() -> None:
    assert parse_profiles(["abcd=h200-own", "ef12=./my.yaml"]) == {"abcd": "h200-own", "ef12": "./my.yaml"}
    assert parse_profiles(["h200-own"]) == {"*": "h200-own"}
    assert parse_profiles(None) == {}
    with pytest.raises(UsageError):
        parse_profiles(["abcd=a", "abcd=b"])
    with pytest.raises(UsageError):
        parse_profiles(["abcd="])
