"""Any unit of work is priced end to end: a run that made "widgets" (a unit no gpuledger module knows)
is costed, compared with break-even values, and reported in HTML and Markdown, in widgets.

Nothing in src/ names "widget": the run's summary carries the unit's name and price quantum itself.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuledger.cli.main import app
from gpuledger.records import RunInfo, UnitInfo, Work, WorkSummary
from gpuledger.store import open_store

SRC = Path(__file__).resolve().parents[2] / "src"
WIDGETS = UnitInfo(plural="widgets", price_per=1000)


def _widget_run(store_url: str, label: str, widgets_per_s: float, window_s: float = 200.0) -> str:
    summary = WorkSummary(
        kind="widget_factory",
        headline="widget",
        work={"widget": Work(count=widgets_per_s * window_s, per_s=widgets_per_s, unit=WIDGETS)},
        window_s=window_s,
        num_requests=10,
        num_ok=10,
        num_failed=0,
    )
    cpu = {"device": "cpu", "vendor": "cpu", "name": "AMD EPYC", "mean_power_w": None, "energy_j": None,
           "peak_util_ratio": 1.0, "sources": ["psutil"], "valid": True}
    with open_store(store_url) as store:
        run_id = store.create_run(
            RunInfo(id="", label=label, engine="widget-maker", model="w-1",
                    started_at=datetime(2026, 1, 1, tzinfo=UTC), environment={"cpu": {"logical_cpus": 2}})
        )
        store.update_run(run_id, status="complete", summary=summary, telemetry_summary=[cpu],
                         duration_s=window_s)
    return run_id


def _cli(*args: str) -> dict[str, object]:
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    doc: dict[str, object] = json.loads(result.stdout)
    return doc


def test_no_source_module_names_the_made_up_unit() -> None:
    hits = [p for p in SRC.rglob("*.py") if "widget" in p.read_text().lower()]
    assert hits == []


def test_a_run_of_widgets_is_priced_per_thousand_widgets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    monkeypatch.setenv("GPULEDGER_DB", url)
    run = _widget_run(url, "fast", widgets_per_s=50.0)
    cost = _cli("cost", run, "--profile", "cpu-cloud")
    hourly = cost["usd_per_hour"]
    assert isinstance(hourly, float)
    # 50 widgets/s at 100 % utilisation = 180,000 widgets an hour
    assert cost["usd_per_1k_widgets"] == pytest.approx(hourly / 180_000 * 1000)
    assert cost["widgets_per_usd"] == pytest.approx(180_000 / hourly)
    assert cost["throughput"] == {"widgets_per_s": 50.0, "served_widgets_per_hour": 180_000.0,
                                  "source": "run summary (measured)"}
    # cpu-cloud is a rental price (energy included) and the CPU's power was not measured: no J per widget
    assert cost["energy"]["joules_per_widget"] is None and cost["energy"]["joules"] is None
    owned = tmp_path / "owned.yaml"
    owned.write_text("host_price: 3000\nelectricity_per_kwh: 0.2\npower_w: 90\n")
    own = _cli("cost", run, "--profile", str(owned))
    assert own["energy"]["joules_per_widget"] == pytest.approx(90 * 200.0 / 10_000)
    assert own["usd_per_1k_widgets"] == pytest.approx(own["usd_per_hour"] / 180)


def test_two_widget_runs_compare_with_break_even_values_that_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    monkeypatch.setenv("GPULEDGER_DB", url)
    a = _widget_run(url, "fast", widgets_per_s=50.0)
    b = _widget_run(url, "slow", widgets_per_s=20.0)
    comp = _cli("compare", a, b, "--profile", "cpu-cloud")
    assert comp["basis"] == "widget"
    assert comp["ratio"] == pytest.approx(2.5)
    pair = comp["pairs"][0]
    assert "widgets per USD" in pair["meaning"]
    assert pair["decomposition"]["throughput_ratio"] == pytest.approx(2.5)
    throughput = next(x for x in pair["break_even"] if x["input"] == "widgets_per_s")
    assert throughput["value"] == pytest.approx(50.0) and throughput["unit"] == "widgets/s"
    solved = [x for x in pair["break_even"] if x["value"] is not None]
    assert solved and all(x["verified_ratio"] == pytest.approx(1.0, rel=1e-6) for x in solved)
    row = next(r for r in comp["runs"] if r["run_id"] == a)
    assert row["usd_per_1k_widgets"] == pytest.approx(row["usd_per_hour"] / 180)


def test_the_reports_price_widgets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    monkeypatch.setenv("GPULEDGER_DB", url)
    a = _widget_run(url, "fast", widgets_per_s=50.0)
    b = _widget_run(url, "slow", widgets_per_s=20.0)
    html, md = tmp_path / "r.html", tmp_path / "r.md"
    result = CliRunner().invoke(app, ["report", a, b, "--profile", "cpu-cloud", "--html", str(html),
                                      "--md", str(md)])
    assert result.exit_code == 0, result.output
    for text in (html.read_text(), md.read_text()):
        assert "USD per 1,000 widgets" in text
        assert "widgets/s" in text
        assert "2.5x" in text or "2.50x" in text
