"""build_report over a real store: every section, the numbers it shows, and what it says is missing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from report_factory import CPU, H200, Pair, make_run, synth_requests

from gpuledger.bench.metrics import summarize
from gpuledger.catalog import load_catalog
from gpuledger.cost import compare, cost_of_run, default_profile_for
from gpuledger.errors import NotFoundError, UsageError
from gpuledger.kinds.text.summary import TextGenerationSummary
from gpuledger.records import DoctorRunRecord, RunSummary
from gpuledger.report import ReportData, build_report, fmt
from gpuledger.report.model import Table
from gpuledger.store import Store

# The answer first, the money next; the environment (no money, dozens of rows) last (issue 15).
SECTIONS = [
    "answer", "overview", "cost", "latency", "throughput", "telemetry", "labour", "how_measured",
    "environment",
]


def _table(data: ReportData, section: str, key: str) -> Table:
    for t in data.section(section).tables:
        if t.key == key:
            return t
    raise AssertionError(f"no table {key} in {section}: {[t.key for t in data.section(section).tables]}")


def _column(t: Table, name: str) -> list[str]:
    i = t.columns.index(name)
    return [row[i] for row in t.rows]


def _text(summary: RunSummary | None) -> TextGenerationSummary:
    assert isinstance(summary, TextGenerationSummary), summary
    return summary


def _row(t: Table, first: str) -> dict[str, str]:
    for row in t.rows:
        if row[0] == first:
            return dict(zip(t.columns, row, strict=True))
    raise AssertionError(f"no row {first!r} in {t.key}")


def test_a_single_run_report_has_every_section_in_order(store: Store, single_run: str) -> None:
    data = build_report(store, [single_run])
    assert [s.key for s in data.sections] == SECTIONS
    assert data.runs[0].id == single_run
    assert data.runs[0].name == "h200-vllm"
    assert "h200-vllm" in data.title


def test_overview_shows_the_stored_summary_numbers(store: Store, single_run: str) -> None:
    summary = _text(store.get_run(single_run).summary)
    data = build_report(store, [single_run[:5]])  # an unambiguous prefix works
    row = _row(_table(data, "overview", "overview"), "h200-vllm")
    assert row["output tok/s"] == fmt.num(summary.output_tokens_per_s)
    assert row["ok requests"] == "120"
    assert row["failed"] == "0"
    assert row["status"] == "complete"


def test_latency_table_matches_the_metrics_of_the_stored_requests(store: Store, single_run: str) -> None:
    recomputed = summarize(store.get_requests(single_run))
    data = build_report(store, [single_run])
    t = _table(data, "latency", "latency")
    rows = {r[1]: dict(zip(t.columns, r, strict=True)) for r in t.rows}
    assert set(rows) == {"TTFT", "TPOT", "ITL", "E2E"}
    for label, key in (("TTFT", "ttft_ms"), ("TPOT", "tpot_ms"), ("ITL", "itl_ms"), ("E2E", "e2e_ms")):
        assert rows[label]["p50"] == fmt.num(recomputed.latency(key).p50)
        assert rows[label]["p99"] == fmt.num(recomputed.latency(key).p99)
    assert rows["ITL"]["n"] == fmt.num(120 * 31)


def test_latency_cdfs_are_drawn_from_every_request_with_exact_end_points(
    store: Store, single_run: str
) -> None:
    requests = store.get_requests(single_run)
    data = build_report(store, [single_run])
    figs = {f.key: f for f in data.section("latency").figures}
    assert set(figs) == {"cdf_ttft_ms", "cdf_itl_ms", "cdf_e2e_ms"}
    ttft = figs["cdf_ttft_ms"].series[0]
    expected = sorted((r.t_first - r.t_send) * 1000 for r in requests if r.t_first is not None)
    assert ttft.x[0] == pytest.approx(expected[0]) and ttft.x[-1] == pytest.approx(expected[-1])
    assert ttft.y[-1] == 1.0 and len(ttft.x) == 120
    assert figs["cdf_ttft_ms"].x_title == "TTFT (ms)"


def test_a_run_of_one_request_builds_with_one_point_distributions(store: Store) -> None:
    run = make_run(store, synth_requests(1), label="one")
    data = build_report(store, [run])
    figs = {f.key: f for f in data.section("latency").figures}
    assert figs["cdf_ttft_ms"].series[0].x == (pytest.approx(figs["cdf_ttft_ms"].series[0].x[0]),)
    assert figs["cdf_ttft_ms"].series[0].mode == "lines+markers"  # a single point still shows
    assert _row(_table(data, "overview", "overview"), "one")["ok requests"] == "1"


def test_single_token_answers_say_why_tpot_and_itl_are_not_measured(store: Store) -> None:
    run = make_run(store, synth_requests(5, output_tokens=1), label="short")
    data = build_report(store, [run])
    missing = data.section("latency").not_measured
    assert any("TPOT" in m and "more than one output token" in m for m in missing)
    assert any("ITL" in m and "two or more content chunks" in m for m in missing)


def test_a_run_where_every_request_failed_says_so(store: Store) -> None:
    run = make_run(store, synth_requests(4, fail_every=1), label="broken", telemetry=False)
    data = build_report(store, [run])
    assert any("every request failed" in m for m in data.section("latency").not_measured)
    assert data.section("latency").figures == ()
    assert _row(_table(data, "overview", "overview"), "broken")["error rate (%)"] == "100.0"
    assert any("could not be priced" in m for m in data.section("cost").not_measured)


def test_a_run_without_telemetry_says_power_was_not_measured_and_why(store: Store) -> None:
    run = make_run(store, synth_requests(20), label="blind", telemetry=False)
    data = build_report(store, [run])
    section = data.section("telemetry")
    assert section.tables == () and section.figures == ()
    assert any("--no-telemetry" in m for m in section.not_measured)
    # the cost model cannot find a device to price: the cost section carries its reason, nothing crashes
    cost = data.section("cost")
    assert any("blind: could not be priced" in m and "no devices" in m for m in cost.not_measured)


def test_a_device_without_power_readings_is_listed_with_the_reason(store: Store, single_run: str) -> None:
    data = build_report(store, [single_run])
    missing = data.section("telemetry").not_measured
    assert any("cpu (AMD EPYC 7B13) power and energy: not reported by any source" in m for m in missing)


def test_telemetry_table_and_series_come_from_the_stored_samples(store: Store, single_run: str) -> None:
    info = store.get_run(single_run)
    gpu = next(d for d in info.telemetry_summary if d.device == "nvidia:0")
    data = build_report(store, [single_run])
    t = _table(data, "telemetry", "telemetry")
    row = next(dict(zip(t.columns, r, strict=True)) for r in t.rows if r[1] == "nvidia:0")
    assert row["mean power (W)"] == fmt.num(gpu.mean_power_w)
    assert row["energy (J)"] == fmt.num(gpu.energy_j)
    assert row["energy method"] == "counter"
    assert gpu.energy_j is not None
    assert row["J per output token"] == fmt.num(gpu.energy_j / _text(info.summary).output_tokens_total)
    figs = {f.key: f for f in data.section("telemetry").figures}
    assert set(figs) == {"ts_power", "ts_utilisation"}
    names = {s.name for s in figs["ts_utilisation"].series}
    assert names == {"nvidia:0", "cpu"}  # GPU util_ratio and CPU cpu_util_ratio on one plot
    assert figs["ts_power"].y_title == "power (W)"


def test_long_telemetry_is_averaged_into_at_most_1200_points_and_says_so(store: Store) -> None:
    # 300 s at 10 Hz = 3001 samples per metric
    reqs = synth_requests(8, concurrency=1) + synth_requests(1, start=300.0, first_index=8)
    run = make_run(store, reqs, label="long", devices=(H200,))
    data = build_report(store, [run])
    power = next(f for f in data.section("telemetry").figures if f.key == "ts_power")
    assert 0 < len(power.series[0].x) <= 1200
    assert "means of 3 consecutive samples" in power.provenance


def test_itl_plot_subsamples_requests_past_its_budget_and_says_so(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gpuledger.kinds.text.report.latency as latency

    monkeypatch.setattr(latency, "ITL_GAP_BUDGET", 310)
    run = make_run(store, synth_requests(100, output_tokens=32), label="big")
    data = build_report(store, [run])
    itl = next(f for f in data.section("latency").figures if f.key == "cdf_itl_ms")
    assert len(itl.series[0].x) <= 600
    note = " ".join(data.section("latency").notes)
    assert "every 10th successful request (10 of 100, 310 token gaps)" in note
    # the table still reports all 100 x 31 gaps
    assert _row(_table(data, "latency", "latency"), "big")["n"] != "310"
    t = _table(data, "latency", "latency")
    assert [r for r in t.rows if r[1] == "ITL"][0][-1] == "3,100"


def test_an_unfinalised_run_is_summarised_from_its_stored_requests(store: Store) -> None:
    run = make_run(store, synth_requests(10), label="killed", finalise=False)
    data = build_report(store, [run])
    assert "recomputed now from the stored requests" in data.numbers.runs[0].summary_source
    assert _row(_table(data, "overview", "overview"), "killed")["ok requests"] == "10"
    assert _row(_table(data, "how_measured", "provenance"), "killed")["summary"].startswith("recomputed")


def test_unknown_run_ids_are_not_found(store: Store, single_run: str) -> None:
    with pytest.raises(NotFoundError):
        build_report(store, ["zzzzzzzz"])
    with pytest.raises(NotFoundError):
        build_report(store, [single_run, "zzzzzzzz"])


def test_a_run_given_twice_is_a_usage_error(store: Store, single_run: str) -> None:
    with pytest.raises(UsageError, match="given twice"):
        build_report(store, [single_run, single_run[:6]])
    with pytest.raises(UsageError):
        build_report(store, [])


def test_a_sweep_gives_throughput_vs_concurrency_and_a_pareto_frontier(store: Store, pair: Pair) -> None:
    data = build_report(store, [pair.mi300x])
    section = data.section("throughput")
    t = _table(data, "throughput", "throughput")
    assert _column(t, "stage") == ["c=1", "c=4", "c=16"]
    assert _column(t, "concurrency") == ["1", "4", "16"]
    summary = _text(store.get_run(pair.mi300x).summary)
    assert summary.stages is not None
    for row, stage in zip(t.rows, summary.stages, strict=True):
        r = dict(zip(t.columns, row, strict=True))
        assert r["output tok/s"] == fmt.num(stage.output_tokens_per_s)
        # one accelerator: per GPU equals the total
        assert r["output tok/s per GPU"] == fmt.num(stage.output_tokens_per_s)
        assert stage.tpot_ms.p50 is not None
        assert r["tok/s per user"] == fmt.num(1000.0 / stage.tpot_ms.p50)
    figs = {f.key: f for f in section.figures}
    assert figs["throughput_vs_concurrency"].series[0].x == (1.0, 4.0, 16.0)
    pareto = figs["pareto"]
    assert pareto.x_title.startswith("tokens/s per user") and pareto.y_title == "output tokens/s per GPU"
    assert len(pareto.series[0].x) == 3
    assert not any("one load level" in m for m in section.not_measured)


def test_a_run_at_one_load_level_contributes_one_point_and_says_a_sweep_is_needed(
    store: Store, single_run: str
) -> None:
    data = build_report(store, [single_run])
    section = data.section("throughput")
    assert any("one load level only" in m and "--sweep" in m for m in section.not_measured)
    assert _column(_table(data, "throughput", "throughput"), "stage") == ["whole run"]
    assert _column(_table(data, "throughput", "throughput"), "concurrency") == ["4"]


def test_a_comparison_shows_the_cost_models_ratio_decomposition_and_break_even(
    store: Store, pair: Pair
) -> None:
    data = build_report(store, [pair.h200, pair.mi300x])
    a, b = store.get_run(pair.h200), store.get_run(pair.mi300x)
    catalog = load_catalog()
    costs = [cost_of_run(r, default_profile_for(r, catalog), catalog=catalog) for r in (a, b)]
    expected = compare(costs)
    assert data.numbers.comparison is not None
    assert data.numbers.comparison.pairs[0].ratio == pytest.approx(expected.ratio)
    ratio_row = _table(data, "cost", "comparison").rows[0]
    assert ratio_row[:3] == ("h200-vllm", "mi300x-vllm", fmt.num(expected.ratio, 4))
    be = _table(data, "cost", "break_even")
    assert "output_tokens_per_s" in _column(be, "input")
    verified = [v for v in _column(be, "ratio when recomputed") if v != fmt.MISSING]
    assert verified and all(float(v) == pytest.approx(1.0) for v in verified)
    assert _table(data, "cost", "sensitivity").rows
    per_run = _table(data, "cost", "cost")
    assert _column(per_run, "per 1M output tokens") == [
        fmt.num(c.evaluation.cost_per("output_token"), 4) for c in costs
    ]
    bars = next(f for f in data.section("cost").figures if f.key == "cost_breakdown")
    assert bars.kind == "bar" and bars.y_title == "USD per 1M output tokens"
    heights = [sum(s.y[i] for s in bars.series) for i in range(2)]
    assert heights == pytest.approx([c.evaluation.cost_per("output_token") for c in costs])


def test_a_profile_per_run_is_used_and_an_unknown_profile_is_an_error(
    store: Store, pair: Pair, tmp_path: object
) -> None:
    from pathlib import Path

    profile = Path(str(tmp_path)) / "rented.yaml"
    profile.write_text("name: rented\ncurrency: EUR\nrental_per_gpu_hour: 2.5\n")
    data = build_report(store, [pair.h200], {pair.h200[:6]: str(profile)})
    row = _row(_table(data, "cost", "cost"), "h200-vllm")
    assert row["profile"] == "rented" and row["currency"] == "EUR" and row["mode"] == "rental"
    with pytest.raises(NotFoundError):
        build_report(store, [pair.h200], {"*": "no-such-profile"})
    with pytest.raises(UsageError, match="not in this report"):
        build_report(store, [pair.h200], {pair.mi300x: str(profile)})


def test_runs_priced_in_different_currencies_are_not_compared(
    store: Store, pair: Pair, tmp_path: object
) -> None:
    from pathlib import Path

    profile = Path(str(tmp_path)) / "eur.yaml"
    profile.write_text("name: eur\ncurrency: EUR\nrental_per_gpu_hour: 2.5\n")
    data = build_report(store, [pair.h200, pair.mi300x], {pair.h200: str(profile)})
    assert data.numbers.comparison is None
    assert any("comparison:" in m and "currenc" in m for m in data.section("cost").not_measured)


def test_environments_are_shown_side_by_side_with_differences_flagged(store: Store, pair: Pair) -> None:
    data = build_report(store, [pair.h200, pair.mi300x])
    t = _table(data, "environment", "environment")
    assert t.columns == ("item", "h200-vllm", "mi300x-vllm", "same?")
    rows = {r[0]: r for r in t.rows}
    assert rows["CUDA"][1:] == ("12.4", fmt.MISSING, "differs")
    assert rows["ROCm"][1:] == (fmt.MISSING, "6.2.0", "differs")
    assert rows["engine"][1:] == ("vllm 0.6.3", "vllm 0.6.3", "yes")


def test_doctor_status_and_setup_ledger_come_from_the_stored_doctor_runs(store: Store) -> None:
    t0 = datetime(2025, 5, 30, 9, 0, tzinfo=UTC)
    store.add_doctor_run(
        DoctorRunRecord(
            machine="gpu-box-a",
            created_at=t0,
            errors=1,
            warnings=0,
            findings=[
                {
                    "id": "nvidia.driver_not_loaded",
                    "layer": "driver",
                    "severity": "error",
                    "title": "NVIDIA driver not loaded",
                }
            ],
        )
    )
    store.add_doctor_run(
        DoctorRunRecord(
            machine="gpu-box-a",
            created_at=t0 + timedelta(hours=3),
            errors=0,
            warnings=0,
            findings=[],
        )
    )
    run = make_run(
        store, synth_requests(10), label="after-setup", started_at=datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
    )
    data = build_report(store, [run])
    env = {r[0]: r[1] for r in _table(data, "environment", "environment").rows}
    assert env["doctor status"].startswith("ok (doctor 2025-05-30 12:00:00 UTC)")
    ledger = _table(data, "labour", "doctor_runs")
    assert _column(ledger, "problems found") == ["nvidia.driver_not_loaded", "all clear"]
    assert any(t.key == "setup_labour" for t in data.section("labour").tables)


def test_without_doctor_runs_the_ledger_says_how_to_record_one(store: Store, single_run: str) -> None:
    data = build_report(store, [single_run])
    assert data.section("labour").tables == ()
    assert any(
        "no `gpuledger doctor` run is stored for gpu-box-a" in m for m in data.section("labour").not_measured
    )
    env = {r[0]: r[1] for r in _table(data, "environment", "environment").rows}
    assert env["doctor status"] == "no doctor run stored for gpu-box-a before this run"


def test_how_measured_quotes_the_metric_definitions_and_token_sources(store: Store, single_run: str) -> None:
    data = build_report(store, [single_run])
    section = data.section("how_measured")
    terms = dict(section.definitions)
    assert terms["TTFT"] == "first content token received − request sent."
    assert terms["TPOT"] == "(E2E − TTFT) / (output_tokens − 1), requests with > 1 output token."
    row = _row(_table(data, "how_measured", "provenance"), "h200-vllm")
    assert row["token counts from"] == "server_usage: 120"
    assert row["output length mismatch"] == "0 of 120 requests"
    assert row["energy method"] == "nvidia:0: counter"


def test_duplicate_labels_are_told_apart_by_run_id(store: Store) -> None:
    a = make_run(store, synth_requests(5), label="same")
    b = make_run(store, synth_requests(5), label="same", devices=(H200, CPU))
    data = build_report(store, [a, b])
    assert [r.name for r in data.runs] == [f"same ({a})", f"same ({b})"]


def test_the_report_is_json_serialisable(store: Store, pair: Pair) -> None:
    import orjson

    from gpuledger.cli.common import dumps_json

    data = build_report(store, [pair.h200, pair.mi300x])
    doc = orjson.loads(dumps_json(data.model_dump(mode="json")))
    assert [r["id"] for r in doc["runs"]] == [pair.h200, pair.mi300x]
    assert doc["numbers"]["runs"][0]["cost"]["usd_per_1m_output_tokens"] > 0
    assert {s["key"] for s in doc["sections"]} == set(SECTIONS)


def test_a_request_rate_run_has_no_concurrency_to_plot_and_says_why(store: Store) -> None:
    load = {"kind": "rate", "stages": [{"stage": "rate=2", "rate_requests_per_s": 2.0, "max_concurrency": 8}]}
    run = make_run(store, synth_requests(20), label="poisson", config={"load": load})
    data = build_report(store, [run])
    assert _column(_table(data, "throughput", "throughput"), "concurrency") == [fmt.MISSING]
    missing = data.section("throughput").not_measured
    assert any("request-rate run has no fixed concurrency" in m for m in missing)
    assert [f.key for f in data.section("throughput").figures] == ["pareto"]


def test_tokens_arriving_in_one_burst_get_a_linear_axis_and_no_pareto_point(store: Store) -> None:
    reqs = synth_requests(6)
    for r in reqs:  # the whole answer in one network read: every chunk shares one arrival time
        r.chunk_times = [r.chunk_times[0]] * len(r.chunk_times)
        r.t_end = r.chunk_times[-1]
    run = make_run(store, reqs, label="burst")
    data = build_report(store, [run])
    itl = next(f for f in data.section("latency").figures if f.key == "cdf_itl_ms")
    assert itl.x_log is False and "some values are 0 ms" in itl.provenance
    ttft = next(f for f in data.section("latency").figures if f.key == "cdf_ttft_ms")
    assert ttft.x_log is True
    assert any("median TPOT is 0 ms" in m for m in data.section("throughput").not_measured)


def test_throughput_per_gpu_divides_by_the_gpus_that_worked(store: Store) -> None:
    from report_factory import Device

    second = Device("nvidia:1", "nvidia", "NVIDIA H200", 500.0, 141 * 2**30)
    run = make_run(store, synth_requests(40), label="two-gpus", devices=(H200, second, CPU))
    data = build_report(store, [run])
    row = _row(_table(data, "throughput", "throughput"), "two-gpus")
    total = _text(store.get_run(run).summary).output_tokens_per_s
    assert total is not None
    assert row["output tok/s per GPU"] == fmt.num(total / 2)
    assert "2 GPU(s) seen working" in " ".join(data.section("throughput").notes)
    assert data.numbers.runs[0].throughput_points[0].output_tokens_per_s_per_gpu == pytest.approx(total / 2)


def test_a_cpu_run_counts_throughput_per_machine(store: Store) -> None:
    from report_factory import fingerprint

    run = make_run(
        store,
        synth_requests(10),
        label="cpu-only",
        devices=(CPU,),
        environment=fingerprint(gpus=[], gpu_count=0, cuda=None, driver=None),
    )
    data = build_report(store, [run])
    assert "throughput is per machine" in " ".join(data.section("throughput").notes)


def test_table_columns_come_from_the_headers_each_row_declares_in_order() -> None:
    from gpuledger.report.sections.base import tabulate as _tabulate

    (table,) = _tabulate("t", "T", [{"run": "a", "p50": "1"}, {"run": "b", "p50": "2"}], "ms")
    assert table.columns == ("run", "p50")
    assert table.rows == (("a", "1"), ("b", "2"))
    assert _tabulate("t", "T", [], "ms") == ()
    with pytest.raises(ValueError, match="a row has columns"):
        _tabulate("t", "T", [{"run": "a", "p50": "1"}, {"p50": "2", "run": "b"}], "ms")


def test_the_answer_comes_first_with_the_price_figures_and_why(store: Store, single_run: str) -> None:
    data = build_report(store, [single_run])
    first = data.sections[0]
    assert first.key == "answer" and len(first.answers) == 1
    answer = first.answers[0]
    cost = data.numbers.runs[0].cost
    assert cost is not None
    assert answer.headline == f"{fmt.num(cost.price('output_token'), 3)} USD per 1M output tokens"
    labels = [k for k, _ in answer.facts]
    # The run's validity verdict first (gpuledger.bench.validity), then the measured figures.
    assert labels[:6] == ["validity", "output tokens", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99"]
    assert {"power", "energy per output token", "profile"} <= set(labels)
    assert 1 <= len(answer.why) <= 5
    assert answer.why[-1].startswith("the input that moves it most: ")
    assert data.sections[-1].key == "environment" and data.sections[-1].collapsed


def test_a_comparison_answer_is_the_ratio_with_its_decomposition(store: Store, pair: Pair) -> None:
    data = build_report(store, [pair.h200, pair.mi300x])
    assert data.numbers.comparison is not None
    ratio = data.numbers.comparison.pairs[0].ratio
    answer = data.sections[0].answers[0]
    assert answer.headline == f"{fmt.num(ratio)}x the output tokens per USD"
    assert answer.why[0].startswith("= throughput ")
    assert [a.title for a in data.sections[0].answers[1:]] == [r.name for r in data.runs]


def test_a_killed_sweep_is_priced_from_the_summary_recomputed_with_its_slos_and_stages(store: Store) -> None:
    """Issue 15: a killed run's report showed its numbers, but its cost section said it "has no metrics
    summary … nothing to price" (it priced the empty stored summary), and the recomputed one dropped the
    SLOs and the sweep's stages."""
    sweep = synth_requests(20, concurrency=2, stage="c=2", seed=4) + synth_requests(
        20, concurrency=8, stage="c=8", seed=5, itl_s=0.02, start=40.0, first_index=20
    )
    config = {
        "load": {"kind": "sweep",
                 "stages": [{"stage": "c=2", "concurrency": 2}, {"stage": "c=8", "concurrency": 8}]},
        "slo": {"ttft_ms": 100.0},
    }
    run = make_run(store, sweep, label="killed-sweep", config=config, finalise=False)
    data = build_report(store, [run], {"*": "cpu-cloud"})  # no telemetry was stored: name the price
    numbers = data.numbers.runs[0]
    assert numbers.cost_error is None and numbers.cost is not None
    summary = _text(numbers.summary)
    assert [s.stage_name() for s in summary.stage_summaries()] == ["c=2", "c=8"]
    assert summary.slo is not None and summary.slo.limits() == {"ttft_ms": 100.0}
    point = numbers.cost.operating_point
    assert point is not None and point.stage in ("c=2", "c=8")
    assert "SLOs (ttft_ms ≤ 100)" in point.rule
