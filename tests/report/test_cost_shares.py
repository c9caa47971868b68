"""The hourly cost's shares, in the answer's why line and the ``cost`` table, go through the one share rule
(``quantity.percent``, issue 33): a small nonzero labour share is not "0%", a zero one is "0 %" (never
"-0%"), and a share just under the whole is not "100%". The run is written through the real store API and
summarised by ``bench.metrics.summarize`` (report_factory); it is priced by ``gpuledger cost``."""

from __future__ import annotations

from pathlib import Path

import pytest
from report_factory import make_run, synth_requests

from gpuledger.cli.main import main
from gpuledger.report import build_report
from gpuledger.store import Store


def _profile(tmp_path: Path, maintenance_hours: float) -> str:
    # 2 USD/h rental; 0.1 h a month of maintenance at 10 USD/h is 0.0014 USD/h: 0.07 % of the hour.
    path = tmp_path / "p.yaml"
    path.write_text(
        "name: tiny-labour\ncurrency: USD\nrental_per_hour: 2.0\nlabour_rate_per_hour: 10\n"
        f"maintenance_hours_per_month: {maintenance_hours}\n"
    )
    return str(path)


def _rows(text: str, label: str) -> list[str]:
    """The hourly cost table's rows of the component ``label``."""
    return [line for line in text.splitlines() if line.startswith(f"│ {label} ") and line.endswith("% │")]


def test_a_small_labour_share_is_not_printed_as_zero_nor_rental_as_all(
    store: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = make_run(store, synth_requests(120), label="rented", telemetry=False)
    assert main(["cost", run, "--no-save", "--profile", _profile(tmp_path, 0.1)]) == 0
    out = capsys.readouterr().out
    (labour,) = _rows(out, "labour (setup + maintenance)")
    assert labour.rstrip(" │").endswith("0.07 %"), labour
    (rental,) = _rows(out, "rental")
    assert rental.rstrip(" │").endswith("99.93 %"), rental
    assert "the rental price is 99.93 % of the" in " ".join(out.split())


def test_a_zero_labour_share_is_zero_percent(
    store: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = make_run(store, synth_requests(120), label="rented", telemetry=False)
    assert main(["cost", run, "--no-save", "--profile", _profile(tmp_path, 0.0)]) == 0
    out = capsys.readouterr().out
    (labour,) = _rows(out, "labour (setup + maintenance)")
    assert labour.rstrip(" │").endswith(" 0 %"), labour
    answer = build_report(store, [run], {run: _profile(tmp_path, 0.0)}).sections[0].answers[0]
    assert any(line.startswith("the rental price is 100 % of the") for line in answer.why), answer.why
