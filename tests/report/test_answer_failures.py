"""An answer names the failed requests whenever there are any (issue 33): their count, their share and the
kinds they failed with stand among the why lines of every answer block — terminal, Markdown, HTML and the
``--json`` document — whatever else warned. The run is written through the real store API and summarised by
``bench.metrics.summarize`` (report_factory); its verdict is the real one."""

from __future__ import annotations

import io
import json

import pytest
from report_factory import make_run, synth_requests
from rich.console import Console

from gpuledger.cli.main import main
from gpuledger.report import build_report, render_html, render_markdown, render_terminal
from gpuledger.report.headline import measured_answer
from gpuledger.store import Store

# 8 of 400 requests fail (2 %); the client was busy and so was the machine: two other checks warn, and they
# come before the failures in the verdict's order.
FAILED_LINE = "errors WARN (2 % of requests): 8 of 400 requests failed: all http 500"
BUSY = {"cpu_util_ratio": 0.9, "cores_usable": 2, "machine_cpu_busy_ratio": 0.97}


@pytest.fixture()
def failing_run(store: Store) -> str:
    run = make_run(store, synth_requests(400, fail_every=50), label="busy-and-failing")
    store.update_run(run, client=BUSY)
    return run


def _why(lines: object) -> list[str]:
    assert isinstance(lines, list | tuple)
    return [str(line) for line in lines]


def test_the_report_answer_names_the_failed_requests_beside_the_other_warnings(
    store: Store, failing_run: str
) -> None:
    data = build_report(store, [failing_run])
    answer = data.sections[0].answers[0]
    why = _why(answer.why)
    assert any(FAILED_LINE in line for line in why), why
    # The other checks that warned are still there, and so is the input that moves the price most.
    assert any("client_bound WARN" in line for line in why)
    assert why[-1].startswith("the input that moves it most: ")
    assert len(why) <= 5


def test_every_rendering_of_the_answer_names_them(store: Store, failing_run: str) -> None:
    data = build_report(store, [failing_run])
    out = io.StringIO()
    render_terminal(data, Console(file=out, width=400, color_system=None))
    assert FAILED_LINE in out.getvalue()
    assert FAILED_LINE in render_markdown(data)
    assert FAILED_LINE in render_html(data)
    assert any(FAILED_LINE in line for line in data.sections[0].answers[0].why)


def test_the_measured_answer_of_bench_and_show_names_them(
    store: Store, failing_run: str, capsys: pytest.CaptureFixture[str]
) -> None:
    info = store.get_run(failing_run)
    answer = measured_answer(info, records=store.get_requests(failing_run))
    assert any(FAILED_LINE in line for line in answer.why), answer.why
    assert main(["show", failing_run]) == 0
    assert FAILED_LINE in " ".join(capsys.readouterr().out.split())


def test_the_json_report_carries_the_same_line(
    store: Store, failing_run: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", failing_run, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    answer = doc["sections"][0]["answers"][0]
    assert any(FAILED_LINE in line for line in answer["why"])


def test_a_run_without_failures_has_no_such_line(store: Store) -> None:
    run = make_run(store, synth_requests(120), label="clean")
    answer = build_report(store, [run]).sections[0].answers[0]
    assert not any("errors" in line for line in answer.why)
