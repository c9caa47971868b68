"""The exporter over the real telemetry sources with fake vendor libraries at the import boundary
(telemetry_fakes): names, labels and units of the exposition, cost accrual, idle cost and the alert,
and the faults — a GPU lost mid-run, a source raising — that must leave the rest served."""

from __future__ import annotations

import sys
import time
import types
from collections.abc import Callable
from pathlib import Path

import pytest
from monitor_helpers import Series, one, parse_exposition, values
from prometheus_client import generate_latest
from telemetry_fakes import (
    GIB,
    FakeNvGpu,
    ManualClock,
    h100,
    make_fake_amdsmi,
    make_fake_pynvml,
    mi300x,
    write_zone,
)

from gpuledger.monitor import Monitor, MonitorConfig
from gpuledger.telemetry import open_sources

HOST = "testhost"
HOURS_PER_MONTH = 730.0


def make_monitor(root: Path, clock: ManualClock, *, profile: str | None = None, interval_s: float = 1.0,
                 alert_util: float = 0.2, alert_window_s: float = 3600.0,
                 logs: list[str] | None = None) -> Monitor:
    config = MonitorConfig(port=0, interval_s=interval_s, alert_util=alert_util,
                           alert_window_s=alert_window_s, hostname=HOST)
    sources = open_sources(root, use_cli=False)
    sink = logs if logs is not None else []
    return Monitor(config, sources=sources, profile=profile, log=sink.append, clock=clock,
                   process_metrics=False)


def scrape(mon: Monitor) -> Series:
    """The exposition text exactly as served, checked by prometheus_client's parser."""
    return parse_exposition(generate_latest(mon.registry).decode())


def step(mon: Monitor, clock: ManualClock, t: float) -> list[str]:
    clock.t = t
    return mon.poll_once()


def install_nvml(monkeypatch: pytest.MonkeyPatch, gpus: list[FakeNvGpu],
                 clock: ManualClock) -> types.ModuleType:
    module = make_fake_pynvml(gpus, clock)
    monkeypatch.setitem(sys.modules, "pynvml", module)
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    return module


@pytest.fixture
def own_profile(tmp_path: Path) -> Path:
    path = tmp_path / "test-own.yaml"
    path.write_text("name: test-own\ncurrency: USD\ngpu_price: 30000\namortisation_months: 48\n"
                    "electricity_per_kwh: 0.10\npue: 1.0\n")
    return path


def test_healthy_gpus_are_exported_in_base_units_with_identity_labels(
        use_nvml: Callable[[str], types.ModuleType], clock: ManualClock, tmp_path: Path) -> None:
    use_nvml("healthy multi-GPU")
    with make_monitor(tmp_path, clock) as mon:
        step(mon, clock, 0.0)
        # CPU utilisation is a /proc/stat delta between two reads: let at least a few ticks pass for real
        # (two reads within one tick have no ratio to give, and a busy CI box made that happen).
        time.sleep(0.05)
        step(mon, clock, 1.0)
        s = scrape(mon)
    gpu0 = {"gpu": "0", "uuid": "GPU-5a1c0000-0000-0000-0000-000000000000", "model": "NVIDIA H100 80GB HBM3",
            "vendor": "nvidia", "hostname": HOST}
    assert one(s, "gpuledger_gpu_utilization_ratio", **gpu0) == pytest.approx(0.87)
    assert one(s, "gpuledger_gpu_memory_used_bytes", **gpu0) == 61 * GIB
    assert one(s, "gpuledger_gpu_memory_total_bytes", **gpu0) == 80 * GIB
    assert one(s, "gpuledger_gpu_power_watts", **gpu0) == 312.0
    assert one(s, "gpuledger_gpu_power_limit_watts", **gpu0) == 700.0
    assert one(s, "gpuledger_gpu_temperature_celsius", **gpu0) == 64.0
    assert one(s, "gpuledger_gpu_sm_clock_hertz", **gpu0) == 1980e6
    assert one(s, "gpuledger_gpu_energy_joules_total", **gpu0) == pytest.approx(312.0)
    assert one(s, "gpuledger_gpu_busy_seconds_total", **gpu0) == pytest.approx(0.87)
    assert one(s, "gpuledger_gpu_up", **gpu0) == 1.0
    assert one(s, "gpuledger_gpu_info", **gpu0, sources="nvml", energy_method="counter") == 1.0
    assert one(s, "gpuledger_gpu_power_watts", gpu="1") == 118.0
    assert one(s, "gpuledger_source_up", source="nvml", hostname=HOST) == 1.0
    assert one(s, "gpuledger_source_up", source="psutil") == 1.0
    # the CPU and RAM of the host are exported too, without GPU labels
    assert 0.0 <= one(s, "gpuledger_cpu_utilization_ratio", hostname=HOST) <= 1.0
    assert one(s, "gpuledger_memory_total_bytes", device="ram", hostname=HOST) > 0
    assert one(s, "gpuledger_low_utilization_alert", gpu="0") == 0.0
    assert values(s, "gpuledger_low_utilization_alert", vendor="cpu") == []  # only GPUs are alerted on


def test_default_profile_is_the_catalog_preset_of_the_gpu_found(
        use_nvml: Callable[[str], types.ModuleType], clock: ManualClock, tmp_path: Path) -> None:
    use_nvml("healthy multi-GPU")
    with make_monitor(tmp_path, clock) as mon:
        step(mon, clock, 0.0)
        step(mon, clock, 10.0)
        s = scrape(mon)
    info = {"profile": "h100-sxm-own", "currency": "USD", "mode": "ownership"}
    assert one(s, "gpuledger_cost_profile_info", **info) == 1.0
    assert sum(values(s, "gpuledger_cost_usd_total")) > 0


def test_cost_accrues_amortisation_and_measured_energy_by_component(
        monkeypatch: pytest.MonkeyPatch, clock: ManualClock, tmp_path: Path, own_profile: Path) -> None:
    install_nvml(monkeypatch, [h100(0, power_w=312.0), h100(1, power_w=118.0)], clock)
    with make_monitor(tmp_path, clock, profile=str(own_profile), interval_s=10.0) as mon:
        for t in range(0, 3601, 10):
            step(mon, clock, float(t))
        s = scrape(mon)
    capex = 2 * 30000 / (48 * HOURS_PER_MONTH)  # two GPUs, one hour
    energy = (312.0 + 118.0) / 1000 * 0.10  # kWh x price, PUE 1
    assert one(s, "gpuledger_cost_usd_total", component="capex", hostname=HOST) == pytest.approx(capex)
    assert one(s, "gpuledger_cost_usd_total", component="energy") == pytest.approx(energy)
    assert one(s, "gpuledger_cost_usd_total", component="labour") == 0.0
    assert one(s, "gpuledger_cost_rate_usd_per_hour") == pytest.approx(capex + energy)
    assert one(s, "gpuledger_cost_power_watts") == pytest.approx(430.0)
    assert one(s, "gpuledger_cost_profile_info", profile="test-own", power_source="measured") == 1.0
    assert one(s, "gpuledger_gpu_energy_joules_total", gpu="0") == pytest.approx(312.0 * 3600)


def test_idle_cost_and_the_alert_follow_utilisation_below_the_level(
        monkeypatch: pytest.MonkeyPatch, clock: ManualClock, tmp_path: Path, own_profile: Path) -> None:
    gpus = [h100(0, power_w=312.0), h100(1, power_w=118.0)]
    install_nvml(monkeypatch, gpus, clock)
    logs: list[str] = []
    with make_monitor(tmp_path, clock, profile=str(own_profile), interval_s=10.0, alert_util=0.2,
                      alert_window_s=600.0, logs=logs) as mon:
        for t in range(0, 1800, 10):
            step(mon, clock, float(t))
        gpus[0].util_gpu = 5  # GPU 0 goes idle from t=1800
        for t in range(1800, 2400, 10):
            step(mon, clock, float(t))
        assert one(scrape(mon), "gpuledger_low_utilization_alert", gpu="0") == 0.0
        assert not [line for line in logs if line.startswith("ALERT")]
        step(mon, clock, 2400.0)  # 600 s of readings below 20 %
        s = scrape(mon)
        assert one(s, "gpuledger_low_utilization_alert", gpu="0") == 1.0
        assert one(s, "gpuledger_low_utilization_alert", gpu="1") == 0.0
        alerts = [line for line in logs if line.startswith("ALERT")]
        assert len(alerts) == 1
        assert "nvidia:0 (NVIDIA H100 80GB HBM3) below 20 % for 10 min" in alerts[0]
        for t in range(2410, 3601, 10):
            step(mon, clock, float(t))
        idle = one(scrape(mon), "gpuledger_idle_cost_usd_total", gpu="0")
        gpus[0].util_gpu = 90
        step(mon, clock, 3610.0)
        s = scrape(mon)
    # each interval is priced by the reading that closes it: 181 intervals of 10 s read 5 %
    idle_hours = 181 * 10 / 3600
    per_gpu_hour = 30000 / (48 * HOURS_PER_MONTH) + 312.0 / 1000 * 0.10
    assert idle == pytest.approx(idle_hours * per_gpu_hour)
    assert one(s, "gpuledger_idle_cost_usd_total", gpu="1") == 0.0
    assert one(s, "gpuledger_low_utilization_alert", gpu="0") == 0.0
    assert any(line.startswith("alert cleared: nvidia:0") and "back at 90 %" in line for line in logs)


def test_a_gpu_lost_mid_run_stops_its_gauges_and_the_rest_is_still_served(
        use_nvml: Callable[[str], types.ModuleType], clock: ManualClock, tmp_path: Path) -> None:
    use_nvml("GPU lost mid-window")  # GPU 1 falls off the bus at t=0.5
    logs: list[str] = []
    with make_monitor(tmp_path, clock, logs=logs) as mon:
        step(mon, clock, 0.0)
        step(mon, clock, 1.0)
        step(mon, clock, 2.0)
        s = scrape(mon)
    assert one(s, "gpuledger_gpu_up", gpu="1") == 0.0
    assert values(s, "gpuledger_gpu_power_watts", gpu="1") == []  # no stale value
    assert values(s, "gpuledger_gpu_utilization_ratio", gpu="1") == []
    assert one(s, "gpuledger_gpu_up", gpu="0") == 1.0
    assert one(s, "gpuledger_gpu_power_watts", gpu="0") == 250.0
    assert one(s, "gpuledger_source_up", source="nvml") == 1.0
    lost = [line for line in logs if "lost" in line]
    assert len(lost) == 1 and "nvidia:1" in lost[0] and "GpuIsLost" in lost[0]


def test_a_source_raising_is_down_with_its_error_retried_and_back_when_it_recovers(
        monkeypatch: pytest.MonkeyPatch, use_nvml: Callable[[str], types.ModuleType], clock: ManualClock,
        tmp_path: Path) -> None:
    module = use_nvml("healthy multi-GPU")
    healthy = module.nvmlDeviceGetUtilizationRates

    def wedged(h: int) -> object:
        raise RuntimeError("driver wedged")

    logs: list[str] = []
    with make_monitor(tmp_path, clock, logs=logs) as mon:
        step(mon, clock, 0.0)
        monkeypatch.setattr(module, "nvmlDeviceGetUtilizationRates", wedged)
        step(mon, clock, 1.0)
        s = scrape(mon)
        assert one(s, "gpuledger_source_up", source="nvml") == 0.0
        assert one(s, "gpuledger_source_up", source="psutil") == 1.0
        assert one(s, "gpuledger_memory_total_bytes", device="ram") > 0
        assert [line for line in logs if "source nvml failed: RuntimeError: driver wedged" in line]
        step(mon, clock, 1.5)  # before the retry time: not read again
        assert len([line for line in logs if "failed" in line]) == 1
        monkeypatch.setattr(module, "nvmlDeviceGetUtilizationRates", healthy)
        step(mon, clock, 2.5)
        s = scrape(mon)
    assert one(s, "gpuledger_source_up", source="nvml") == 1.0
    assert one(s, "gpuledger_gpu_utilization_ratio", gpu="0") == pytest.approx(0.87)
    assert any("source nvml is back" in line for line in logs)


def test_a_gpu_without_power_is_priced_at_its_catalog_tdp_and_says_so(
        monkeypatch: pytest.MonkeyPatch, clock: ManualClock, tmp_path: Path, own_profile: Path) -> None:
    install_nvml(monkeypatch, [h100(0, power_supported=False)], clock)
    logs: list[str] = []
    with make_monitor(tmp_path, clock, profile=str(own_profile), logs=logs) as mon:
        lines = mon.startup_lines()
        step(mon, clock, 0.0)
        step(mon, clock, 3600.0)
        s = scrape(mon)
    said = "power for nvidia:0 when it reports none: 700 W (catalog TDP (not measured)"
    assert any(said in line for line in lines)
    assert values(s, "gpuledger_gpu_power_watts") == []
    assert values(s, "gpuledger_gpu_energy_joules_total") == []  # no power, no energy: absent, not 0
    assert one(s, "gpuledger_cost_profile_info", power_source="catalog TDP") == 1.0
    assert one(s, "gpuledger_cost_usd_total", component="energy") == pytest.approx(0.7 * 0.10)


def test_amd_gpus_are_exported_under_the_same_names(
        use_amdsmi: Callable[[str], types.ModuleType], clock: ManualClock, tmp_path: Path) -> None:
    use_amdsmi("healthy MI300X")
    with make_monitor(tmp_path, clock) as mon:
        step(mon, clock, 0.0)
        step(mon, clock, 1.0)
        s = scrape(mon)
    amd0 = {"gpu": "0", "uuid": "c4ff74a1-0000-1000-80b2-000000000000", "model": "AMD Instinct MI300X",
            "vendor": "amd"}
    assert one(s, "gpuledger_gpu_utilization_ratio", **amd0) == pytest.approx(0.93)
    assert one(s, "gpuledger_gpu_power_watts", **amd0) == 550.0
    assert one(s, "gpuledger_gpu_hotspot_temperature_celsius", **amd0) == 71.0
    assert values(s, "gpuledger_gpu_temperature_celsius", **amd0) == []  # edge sensor not supported
    assert one(s, "gpuledger_gpu_energy_joules_total", **amd0) == pytest.approx(550.0, rel=1e-3)
    assert one(s, "gpuledger_source_up", source="amdsmi") == 1.0
    assert one(s, "gpuledger_cost_profile_info", profile="mi300x-own") == 1.0


def test_amd_gpu_lost_mid_run_keeps_the_other_gpu_served(
        monkeypatch: pytest.MonkeyPatch, clock: ManualClock, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "amdsmi", make_fake_amdsmi([mi300x(0), mi300x(1, lost_at=0.5)], clock))
    monkeypatch.setitem(sys.modules, "pynvml", make_fake_pynvml([], clock, init_error=12))
    with make_monitor(tmp_path, clock) as mon:
        step(mon, clock, 0.0)
        step(mon, clock, 1.0)
        s = scrape(mon)
    assert one(s, "gpuledger_gpu_up", gpu="1", vendor="amd") == 0.0
    assert one(s, "gpuledger_gpu_up", gpu="0", vendor="amd") == 1.0
    assert one(s, "gpuledger_gpu_power_watts", gpu="0") == 550.0


def test_cpu_only_machine_exports_rapl_power_and_energy_and_prices_the_cpu(
        no_gpu_stack: None, clock: ManualClock, tmp_path: Path) -> None:
    zone = write_zone(tmp_path, "intel-rapl:0", "package-0", energy_uj=1_000_000)
    profile = tmp_path / "cpu-own.yaml"
    profile.write_text("name: cpu-own\nhost_price: 3650\namortisation_months: 10\nelectricity_per_kwh: 0.2\n")
    logs: list[str] = []
    with make_monitor(tmp_path, clock, profile=str(profile), interval_s=2.0, logs=logs) as mon:
        step(mon, clock, 0.0)
        (zone / "energy_uj").write_text(f"{1_000_000 + 50_000_000}\n")  # +50 J in 2 s
        step(mon, clock, 2.0)
        s = scrape(mon)
        cpu = {"model": mon.state.devices["cpu"].info.name, "hostname": HOST}
        assert one(s, "gpuledger_cpu_power_watts", **cpu) == pytest.approx(25.0)
        assert one(s, "gpuledger_cpu_energy_joules_total", **cpu) == pytest.approx(50.0)
        assert one(s, "gpuledger_low_utilization_alert", vendor="cpu", gpu="") == 0.0
        hours = 2.0 / 3600
        assert one(s, "gpuledger_cost_usd_total", component="capex") == pytest.approx(
            3650 / (10 * HOURS_PER_MONTH) * hours)
        assert one(s, "gpuledger_cost_usd_total", component="energy") == pytest.approx(50 / 3.6e6 * 0.2)
        # the powercap file disappears: RAPL is down, psutil keeps going
        (zone / "energy_uj").unlink()
        step(mon, clock, 4.0)
        s = scrape(mon)
    assert one(s, "gpuledger_source_up", source="rapl") == 0.0
    assert one(s, "gpuledger_source_up", source="psutil") == 1.0
    assert values(s, "gpuledger_cpu_power_watts") == []
    assert one(s, "gpuledger_cpu_energy_joules_total") == pytest.approx(50.0)  # a counter keeps its value
    assert any("source rapl failed: rapl: cannot read" in line for line in logs)


def test_a_gpu_missing_from_the_catalog_runs_without_cost_metrics_and_says_why(
        monkeypatch: pytest.MonkeyPatch, clock: ManualClock, tmp_path: Path) -> None:
    install_nvml(monkeypatch, [FakeNvGpu(name="NVIDIA GeForce RTX 3080", uuid="GPU-3080")], clock)
    with make_monitor(tmp_path, clock) as mon:
        lines = mon.startup_lines()
        step(mon, clock, 0.0)
        s = scrape(mon)
    assert any(line.startswith("cost metrics off:") and "pass --profile" in line for line in lines)
    assert [n for (n, _l) in s if "cost" in n] == []
    assert one(s, "gpuledger_gpu_power_watts", model="NVIDIA GeForce RTX 3080") == 250.0


def test_a_cny_profile_names_the_money_metrics_in_cny(
        use_nvml: Callable[[str], types.ModuleType], clock: ManualClock, tmp_path: Path) -> None:
    use_nvml("healthy multi-GPU")
    path = tmp_path / "cny.yaml"
    path.write_text("name: cn\ncurrency: CNY\ngpu_price: 220000\nelectricity_per_kwh: 0.8\n"
                    "labour_rate_per_hour: 125\nsetup_hours: 80\n")
    with make_monitor(tmp_path, clock, profile=str(path)) as mon:
        step(mon, clock, 0.0)
        step(mon, clock, 60.0)
        s = scrape(mon)
    assert one(s, "gpuledger_cost_cny_total", component="labour") > 0
    assert values(s, "gpuledger_cost_usd_total") == []
    assert values(s, "gpuledger_idle_cost_cny_total", gpu="0") == [0.0]


def test_what_the_monitor_exports_is_read_back_whole_by_telemetry_from(
        use_nvml: Callable[[str], types.ModuleType], clock: ManualClock, tmp_path: Path) -> None:
    """`gpuledger monitor` on a node, `bench --telemetry-from` that node: every device metric the monitor
    exports comes back under the same metric in base units, none left out."""
    from gpuledger.monitor.exporter import GPU_GAUGES
    from gpuledger.telemetry.expo import parse_exposition as read_back

    use_nvml("healthy multi-GPU")
    with make_monitor(tmp_path, clock) as mon:
        step(mon, clock, 0.0)
        step(mon, clock, 1.0)
        text = generate_latest(mon.registry).decode()
        served = scrape(mon)
    expo = read_back(text, default_host="elsewhere")
    assert expo.exporter == "gpuledger" and expo.left_out == 0
    gpu0 = next(d for d in expo.devices if d.index == 0)
    exported = {m for m, (name, _) in GPU_GAUGES.items() if values(served, name, gpu="0")}
    assert exported <= set(gpu0.values), exported - set(gpu0.values)
    for metric in exported:
        assert gpu0.values[metric] == pytest.approx(one(served, GPU_GAUGES[metric][0], gpu="0")), metric
    assert gpu0.values["energy_j"] == pytest.approx(one(served, "gpuledger_gpu_energy_joules_total", gpu="0"))
    assert {"sm_clock_hz", "power_w", "memory_used_bytes"} <= exported  # the fake GPUs report these
