"""Cost of a run: hand-computed examples checked to the cent, power provenance, bad runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from cost_runs import MakeRun, Stage, build_run, text_summary

from gpuledger.catalog import Catalog
from gpuledger.cost import CostProfile, cost_of_run, hourly_cost
from gpuledger.errors import InvalidInputError
from gpuledger.records import DoctorRunRecord

RENTAL = CostProfile(name="rent2", rental_per_gpu_hour=2.00, utilisation=0.5)
OWNED = CostProfile(
    name="owned",
    gpu_price=20_000,
    amortisation_months=48,
    electricity_per_kwh=0.10,
    pue=1.5,
    labour_rate_per_hour=100,
    setup_hours=40,
    maintenance_hours_per_month=5,
    hosting_per_month=100,
    utilisation=0.8,
    idle_power_w=100,
)


def test_the_runs_priced_here_measure_what_they_were_asked_for() -> None:
    # The runs' summaries come from the real metrics over generated requests (cost_runs.py); the figures
    # every hand-computed example below relies on must come out of them exactly (to float rounding).
    s = text_summary(build_run(output_tps=1000, input_tps=500, window_s=100.0, num_ok=100, goodput=0.5))
    assert s.window_s == 100.0 and s.num_ok == s.num_requests == 100 and s.num_failed == 0
    assert (s.output_tokens_total, s.input_tokens_total) == (100_000, 50_000)
    assert s.output_tokens_per_s == 1000.0 and s.input_tokens_per_s == 500.0 and s.requests_per_s == 1.0
    assert s.e2e_ms.mean == pytest.approx(2000.0) and s.e2e_ms.n == 100
    assert s.goodput_requests_per_s == 0.5 and s.slo is not None and s.slo.met == 50
    every = text_summary(build_run(ttft_ms=200.0, e2e_ms=2000.0))
    assert every.ttft_ms.mean == pytest.approx(200.0) and every.e2e_ms.mean == pytest.approx(2000.0)
    assert every.output_len_mismatch.count == 0 and every.token_source == {"server_usage": 100}
    sweep = text_summary(build_run(stages=[Stage("c=1", 100.0, 1.0), Stage("c=16", 900.0, 0.995)]))
    assert sweep.window_s == 20.0 and sweep.stages is not None
    c16 = sweep.stages[1]
    assert (c16.stage, c16.concurrency, c16.window_s) == ("c=16", 16, 10.0)
    assert c16.output_tokens_per_s == 900.0 and c16.input_tokens_per_s == 450.0
    assert c16.slo is not None and c16.slo.met_ratio == 0.995 and c16.requests_per_s == 20.0


def test_rental_example_to_the_cent(make_run: MakeRun, catalog: Catalog) -> None:
    # 2.00 USD/h; 1000 output tok/s x 3600 s x 0.5 utilisation = 1.8 M output tokens per hour
    d_cost = cost_of_run(make_run(output_tps=1000, input_tps=500), RENTAL, catalog=catalog)
    d = d_cost.document().model_dump(mode="json")
    assert d["usd_per_hour"] == 2.00
    assert round(d["usd_per_1m_output_tokens"], 2) == 1.11  # 2 / 1.8
    assert round(d["usd_per_1m_tokens"], 2) == 0.74  # 2 / 2.7
    assert round(d["output_tokens_per_usd"]) == 900_000
    assert round(d["usd_per_request"], 5) == 0.00111  # 2 / (1 req/s x 3600 x 0.5)
    # priced separately by time share: TTFT 200 ms of E2E 2000 ms -> 10 % of the cost to input tokens
    assert d["split"]["input_cost_share"] == pytest.approx(0.1)
    assert round(d["split"]["usd_per_1m_input_tokens"], 2) == 0.22  # 0.2 USD / 0.9 M input tokens
    assert round(d["split"]["usd_per_1m_output_tokens"], 2) == 1.00  # 1.8 USD / 1.8 M output tokens
    assert d["hourly"]["energy_usd_per_hour"] == 0.0 and d["hourly"]["rental_usd_per_hour"] == 2.00


def test_ownership_example_to_the_cent(make_run: MakeRun, catalog: Catalog) -> None:
    run = make_run(output_tps=2000, input_tps=1000, power_w=500.0)
    cost = cost_of_run(run, OWNED, catalog=catalog)
    h = cost.document().model_dump(mode="json")["hourly"]
    life_h = 48 * 730  # 35,040 h
    assert h["capex_usd_per_hour"] == pytest.approx(20_000 / life_h)  # 0.5708
    # average power at 80 % utilisation: 0.8 x 500 W + 0.2 x 100 W idle = 420 W
    assert cost.inputs.average_power_w == pytest.approx(420.0)
    assert h["energy_usd_per_hour"] == pytest.approx(0.420 * 1.5 * 0.10)  # 0.063
    assert h["labour_setup_usd_per_hour"] == pytest.approx(40 * 100 / life_h)  # 0.1142
    assert h["labour_maintenance_usd_per_hour"] == pytest.approx(5 * 100 / 730)  # 0.6849
    assert h["other_usd_per_hour"] == pytest.approx(100 / 730)  # 0.1370
    assert round(h["usd_per_hour"], 2) == 1.57
    # 2000 tok/s x 3600 x 0.8 = 5.76 M output tokens per hour
    assert round(cost.document().model_dump(mode="json")["usd_per_1m_output_tokens"], 2) == 0.27
    assert sum(h["shares"].values()) == pytest.approx(1.0)


def test_money_keys_carry_the_profile_currency(make_run: MakeRun, catalog: Catalog) -> None:
    cny = CostProfile(currency="cny", rental_per_gpu_hour=15.0)
    d = cost_of_run(make_run(), cny, catalog=catalog).document().model_dump(mode="json")
    assert d["currency"] == "CNY"
    assert d["cny_per_hour"] == 15.0 and "cny_per_1m_output_tokens" in d and "usd_per_hour" not in d
    assert "cny_per_hour" in d["hourly"] and "capex_cny_per_hour" in d["hourly"]


def test_measured_power_and_energy_are_used_and_named(make_run: MakeRun, catalog: Catalog) -> None:
    run = make_run(output_tps=1000, input_tps=500, power_w=600.0, window_s=100.0, energy_j=61_000.0)
    cost = cost_of_run(run, RENTAL, catalog=catalog)
    d = cost.document().model_dump(mode="json")
    assert d["power"]["serving_w"] == 600.0
    assert d["power"]["power_source"].startswith("measured") and "nvml" in d["power"]["power_source"]
    assert d["power"]["estimate"] is False
    # J/token = measured energy in the window / tokens in the window (150,000)
    assert d["energy"]["joules_per_token"] == pytest.approx(61_000 / 150_000)
    assert d["energy"]["joules_per_output_token"] == pytest.approx(61_000 / 100_000)


def test_missing_power_falls_back_to_catalog_tdp_and_says_so(make_run: MakeRun, catalog: Catalog) -> None:
    run = make_run(power_w=None, gpu="NVIDIA H100 80GB HBM3")
    cost = cost_of_run(run, OWNED, catalog=catalog)
    d = cost.document().model_dump(mode="json")
    assert d["power"]["power_source"] == "catalog TDP (not measured)"
    assert d["power"]["serving_w"] == 700.0
    assert d["power"]["estimate"] is True
    assert any("power is not measured" in w for w in d["warnings"])
    assert "not measured" in d["power"]["per_device"][0]["why"]


def test_missing_power_and_no_tdp_is_a_clear_error(make_run: MakeRun, catalog: Catalog) -> None:
    run = make_run(power_w=None, gpu="NVIDIA Tesla T4")
    with pytest.raises(InvalidInputError) as err:
        cost_of_run(run, OWNED, catalog=catalog)
    msg = err.value.message
    assert "NVIDIA Tesla T4" in msg and "no power to price" in msg and "\n" not in msg
    assert err.value.hint and "power_w" in err.value.hint


def test_a_user_power_figure_overrides_everything(make_run: MakeRun, catalog: Catalog) -> None:
    prof = RENTAL.model_copy(update={"power_w": 420.0})
    d_cost = cost_of_run(make_run(power_w=None, gpu="NVIDIA Tesla T4"), prof, catalog=catalog)
    d = d_cost.document().model_dump(mode="json")
    assert d["power"]["serving_w"] == 420.0 and d["power"]["power_source"] == "profile power_w (user figure)"


def test_idle_gpus_are_not_priced_and_gpu_count_scales_power(make_run: MakeRun, catalog: Catalog) -> None:
    busy = {
        "device": "nvidia:0",
        "vendor": "nvidia",
        "name": "NVIDIA H200",
        "mean_power_w": 500.0,
        "energy_j": 50_000.0,
        "peak_util_ratio": 0.9,
        "valid": True,
        "sources": {"power_w": "nvml"},
    }
    idle = dict(busy, device="nvidia:1", mean_power_w=70.0, peak_util_ratio=0.0)
    run = make_run(devices=[busy, idle])
    cost = cost_of_run(run, RENTAL, catalog=catalog)
    assert cost.inputs.gpu_count == 1 and cost.inputs.power_serving_w == 500.0
    assert any("nvidia:1" in a for a in cost.assumptions)
    eight = cost_of_run(run, RENTAL.model_copy(update={"gpu_count": 8}), catalog=catalog)
    assert eight.evaluation.hourly.rental == 16.0
    # Under a rental profile power is only reported as measured; an owned deployment of 8 prices 8 x 500 W.
    assert eight.inputs.power_serving_w == 500.0 and eight.power.measured and not eight.power.needed
    owned = cost_of_run(run, OWNED.model_copy(update={"gpu_count": 8}), catalog=catalog)
    assert owned.inputs.power_serving_w == 4000.0


def test_a_run_where_every_gpu_stayed_idle_is_flagged(make_run: MakeRun, catalog: Catalog) -> None:
    dev = {
        "device": "amd:0",
        "vendor": "amd",
        "name": "AMD Instinct MI300X",
        "mean_power_w": 150.0,
        "energy_j": 15_000.0,
        "peak_util_ratio": 0.0,
        "valid": True,
    }
    cost = cost_of_run(make_run(devices=[dev]), RENTAL, catalog=catalog)
    assert any("fallen back to CPU" in w or "run on the CPU" in w for w in cost.warnings)


def test_cpu_run_uses_measured_rapl_power(make_run: MakeRun, catalog: Catalog) -> None:
    cpu = {
        "device": "cpu",
        "vendor": "cpu",
        "name": "AMD EPYC 9474F",
        "mean_power_w": 180.0,
        "energy_j": 18_000.0,
        "energy_method": "counter",
        "valid": True,
        "sources": {"power_w": "rapl"},
    }
    prof = CostProfile(rental_per_hour=0.5)
    d = cost_of_run(make_run(devices=[cpu]), prof, catalog=catalog).document().model_dump(mode="json")
    assert d["devices"]["kind"] == "cpu" and d["power"]["serving_w"] == 180.0
    assert "rapl" in d["power"]["power_source"]


def test_cpu_run_without_rapl_estimates_half_the_tdp_and_labels_it(
    make_run: MakeRun, catalog: Catalog
) -> None:
    cpu = {
        "device": "cpu",
        "vendor": "cpu",
        "name": "AMD EPYC",
        "mean_power_w": None,
        "energy_j": None,
        "unavailable": {"power_w": "rapl: not present (no /sys/class/powercap)"},
    }
    run = make_run(devices=[cpu], environment={"cpu": {"logical_cpus": 2}})
    owned_cpu = CostProfile(host_price=2000.0, electricity_per_kwh=0.2)
    d = cost_of_run(run, owned_cpu, catalog=catalog).document().model_dump(mode="json")
    # CodeCarbon's fallback: 4 W per thread x 2 threads = 8 W TDP; 50 % of it = 4 W, and it says so
    assert d["power"]["serving_w"] == pytest.approx(4.0)
    assert d["power"]["estimate"] is True and d["power"]["power_source"].startswith(
        "estimate: 4 W = 50% of an assumed CPU TDP of 8 W (4 W x 2 threads;"
    )
    assert "rapl: not present" in d["power"]["per_device"][0]["why"]
    with_tdp = cost_of_run(run, owned_cpu.model_copy(update={"cpu_tdp_w": 65}), catalog=catalog)
    assert with_tdp.inputs.power_serving_w == pytest.approx(32.5)
    assert with_tdp.power.source.startswith("estimate: 32.5 W = 50% of the profile's CPU TDP of 65 W")
    # A rental price includes energy: nothing is estimated, and J per token is unavailable (not a zero).
    rented_cost = cost_of_run(run, CostProfile(rental_per_hour=0.0816), catalog=catalog)
    rented = rented_cost.document().model_dump(mode="json")
    assert rented["power"]["serving_w"] is None and rented["power"]["estimate"] is False
    assert rented["power"]["power_source"] == (
        "not measured — not needed for the price: rental includes energy"
    )
    assert rented["energy"]["joules_per_token"] is None
    assert "rental includes energy" in rented["energy"]["reason"]
    assert not any("power is not measured" in w for w in rented["warnings"])


def test_cpu_run_without_power_or_tdp_is_a_clear_error(make_run: MakeRun, catalog: Catalog) -> None:
    cpu = {"device": "cpu", "vendor": "cpu", "name": "AMD EPYC", "mean_power_w": None}
    with pytest.raises(InvalidInputError, match="no power to price"):
        cost_of_run(make_run(devices=[cpu]), CostProfile(host_price=2000.0, electricity_per_kwh=0.2),
                    catalog=catalog)


def test_a_gpu_priced_profile_does_not_fit_a_cpu_run(make_run: MakeRun, catalog: Catalog) -> None:
    cpu = {"device": "cpu", "vendor": "cpu", "name": "AMD EPYC", "mean_power_w": 50.0, "valid": True}
    with pytest.raises(InvalidInputError, match="rental_per_gpu_hour prices GPUs"):
        cost_of_run(make_run(devices=[cpu]), RENTAL, catalog=catalog)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"output_tps": 0.0},
        {"output_tps": 0.0, "input_tps": 0.0, "window_s": 10.0},
    ],
)
def test_runs_with_no_tokens_cannot_be_priced(
    make_run: MakeRun, catalog: Catalog, kwargs: dict[str, float]
) -> None:
    with pytest.raises(InvalidInputError, match="no output tokens"):
        cost_of_run(make_run(**kwargs), RENTAL, catalog=catalog)


def test_a_run_without_a_summary_cannot_be_priced(make_run: MakeRun, catalog: Catalog) -> None:
    run = make_run()
    run.summary = None
    with pytest.raises(InvalidInputError, match="no metrics summary"):
        cost_of_run(run, RENTAL, catalog=catalog)


def test_cost_at_slo_counts_only_good_requests(make_run: MakeRun, catalog: Catalog) -> None:
    run = make_run(num_ok=100, window_s=100.0, goodput=0.5)  # 1 request/s, half of them within the SLO
    assert text_summary(run).requests_per_s == pytest.approx(1.0)
    assert text_summary(run).goodput_requests_per_s == pytest.approx(0.5)
    d = cost_of_run(run, RENTAL, catalog=catalog).document().model_dump(mode="json")
    assert d["usd_per_good_request"] == pytest.approx(2 * d["usd_per_request"])
    assert d["usd_per_1m_output_tokens_at_slo"] == pytest.approx(2 * d["usd_per_1m_output_tokens"])


def test_user_given_output_to_input_cost_ratio_splits_the_cost(make_run: MakeRun, catalog: Catalog) -> None:
    prof = RENTAL.model_copy(update={"output_to_input_cost_ratio": 4.0})
    d_cost = cost_of_run(make_run(output_tps=1000, input_tps=1000), prof, catalog=catalog)
    d = d_cost.document().model_dump(mode="json")
    # an output token costs 4 input tokens: input share = 1000 / (1000 + 4 x 1000) = 20 %
    assert d["split"]["input_cost_share"] == pytest.approx(0.2)
    split = d["split"]
    assert split["usd_per_1m_output_tokens"] == pytest.approx(4 * split["usd_per_1m_input_tokens"])


def test_without_ttft_and_ratio_the_split_says_why(make_run: MakeRun, catalog: Catalog) -> None:
    d = cost_of_run(make_run(ttft_ms=None), RENTAL, catalog=catalog).document().model_dump(mode="json")
    assert d["split"]["rule"] is None and "no TTFT/E2E" in d["split"]["reason"]


def test_every_input_is_listed_with_unit_and_source(make_run: MakeRun, catalog: Catalog) -> None:
    d = cost_of_run(make_run(), OWNED, catalog=catalog).document().model_dump(mode="json")
    for name in ("gpu_price", "electricity_per_kwh", "pue", "utilisation", "setup_hours", "power_serving_w"):
        row = d["inputs"][name]
        assert row["unit"] and row["source"], name
    assert d["inputs"]["electricity_per_kwh"]["unit"] == "USD per kWh"


def _doctor(machine: str, hours_ago: float, errors: int) -> DoctorRunRecord:
    when = datetime(2026, 11, 1, 12, tzinfo=UTC) - timedelta(hours=hours_ago)
    findings = (
        [{"id": "rocm.gfx_unsupported", "layer": "runtime", "severity": "error", "title": "x"}]
        if errors
        else []
    )
    return DoctorRunRecord(machine=machine, created_at=when, errors=errors, warnings=0, findings=findings)


def test_setup_hours_come_from_the_doctor_ledger(make_run: MakeRun, catalog: Catalog) -> None:
    records = [
        _doctor("lab-amd", 30, 2),
        _doctor("lab-amd", 20, 1),
        _doctor("lab-amd", 6, 0),
        _doctor("lab-nv", 3, 0),
    ]
    prof = CostProfile(rental_per_gpu_hour=2.0, labour_rate_per_hour=100, from_doctor_history=True)
    run = make_run(environment={"hostname": "lab-amd"})
    cost = cost_of_run(run, prof, catalog=catalog, doctor_records=records)
    assert cost.inputs.setup_hours == pytest.approx(24.0)  # first error 30 h ago -> all clear 6 h ago
    assert cost.setup_source.startswith("doctor history: machine lab-amd")
    assert cost.evaluation.hourly.labour_setup == pytest.approx(24 * 100 / (48 * 730))


def test_doctor_ledger_problems_are_clear_errors(make_run: MakeRun, catalog: Catalog) -> None:
    prof = CostProfile(rental_per_gpu_hour=2.0, labour_rate_per_hour=100, from_doctor_history=True)
    with pytest.raises(InvalidInputError, match="no doctor runs are stored"):
        cost_of_run(make_run(), prof, catalog=catalog, doctor_records=[])
    two = [_doctor("a", 5, 1), _doctor("a", 1, 0), _doctor("b", 5, 1), _doctor("b", 2, 0)]
    with pytest.raises(InvalidInputError, match="cannot tell which machine"):
        cost_of_run(make_run(), prof, catalog=catalog, doctor_records=two)


def test_hourly_cost_for_live_accrual(catalog: Catalog) -> None:
    h = hourly_cost(OWNED, 1000.0, gpu_count=2)
    assert h.capex == pytest.approx(2 * 20_000 / (48 * 730))
    assert h.energy == pytest.approx(1.0 * 1.5 * 0.10)
    assert h.total == pytest.approx(h.capex + h.energy + h.labour + h.other)
    assert hourly_cost(RENTAL, 0.0, gpu_count=3).rental == 6.0
    with pytest.raises(InvalidInputError):
        hourly_cost(RENTAL, -1.0)
