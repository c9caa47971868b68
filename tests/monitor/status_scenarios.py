"""Monitors in the states the other monitor tests drive them into, for the tests of the status document:
the real telemetry sources over fake vendor libraries installed at their import boundary
(telemetry_fakes), a hand-moved clock, and the real recorded vLLM /metrics text for the engine window.

The host's psutil source is left out so that every figure is the same on every run (the CLI test reads
the real one)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from monitor_helpers import RECORDED
from telemetry_fakes import (
    FakeNvGpu,
    ManualClock,
    h100,
    make_fake_amdsmi,
    make_fake_pynvml,
    mi300x,
    write_zone,
)

from gpuledger.monitor import Monitor, MonitorConfig, MonitorState, parse_engine_metrics
from gpuledger.telemetry import open_sources

HOST = "testhost"
ENGINE_URL = "http://user:secret@127.0.0.1:9/metrics"
VLLM_TEXT = (RECORDED / "vllm-0.32.0.metrics.txt").read_text(encoding="utf-8")
OWN_PROFILE = ("name: test-own\ncurrency: USD\ngpu_price: 30000\namortisation_months: 48\n"
               "electricity_per_kwh: 0.10\npue: 1.0\n")


@dataclass(frozen=True)
class Scenario:
    state: MonitorState
    now: float


def _no_nvml(mp: pytest.MonkeyPatch, clock: ManualClock) -> None:
    mp.setitem(sys.modules, "pynvml", make_fake_pynvml([], clock, init_error=12))


def _nvml(mp: pytest.MonkeyPatch, gpus: list[FakeNvGpu], clock: ManualClock) -> None:
    mp.setitem(sys.modules, "pynvml", make_fake_pynvml(gpus, clock))
    mp.setitem(sys.modules, "amdsmi", None)


def _monitor(root: Path, clock: ManualClock, *, profile: str | None = None, interval_s: float = 1.0,
             alert_window_s: float = 3600.0, engine_url: str | None = None) -> Monitor:
    config = MonitorConfig(port=0, interval_s=interval_s, alert_util=0.2, alert_window_s=alert_window_s,
                           hostname=HOST, engine_url=engine_url, engine_window_s=60.0)
    sources = [s for s in open_sources(root, use_cli=False) if s.name != "psutil"]
    return Monitor(config, sources=sources, profile=profile, log=lambda line: None, clock=clock,
                   process_metrics=False)


def _steps(mon: Monitor, clock: ManualClock, times: range | list[float]) -> None:
    for t in times:
        clock.t = float(t)
        mon.poll_once()


def _vllm_later(output: float, requests: float) -> str:
    return VLLM_TEXT.replace(
        'vllm:generation_tokens_total{engine="0",model_name="tiny-llama"} 72.0',
        f'vllm:generation_tokens_total{{engine="0",model_name="tiny-llama"}} {output!r}').replace(
        'vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny-llama"} 3.0',
        f'vllm:request_success_total{{engine="0",finished_reason="length",model_name="tiny-llama"}} '
        f'{requests!r}')


def own_profile_alert_fired(mp: pytest.MonkeyPatch, root: Path) -> Scenario:
    """Two H100s priced by an ownership profile for 40 min; GPU 0 idle for the last 20: alert raised."""
    clock = ManualClock()
    gpus = [h100(0, power_w=312.0), h100(1, power_w=118.0)]
    _nvml(mp, gpus, clock)
    profile = root / "test-own.yaml"
    profile.write_text(OWN_PROFILE)
    with _monitor(root, clock, profile=str(profile), interval_s=10.0, alert_window_s=600.0) as mon:
        _steps(mon, clock, range(0, 1200, 10))
        gpus[0].util_gpu = 5
        _steps(mon, clock, range(1200, 2410, 10))
    return Scenario(mon.state, 2410.0)


def no_cost_gpu_missing_from_catalog(mp: pytest.MonkeyPatch, root: Path) -> Scenario:
    """A GPU the catalog does not know and no --profile: no cost block, the note says why."""
    clock = ManualClock()
    _nvml(mp, [FakeNvGpu(name="NVIDIA GeForce RTX 3080", uuid="GPU-3080")], clock)
    with _monitor(root, clock) as mon:
        _steps(mon, clock, [0.0, 1.0, 2.0])
    return Scenario(mon.state, 2.0)


def cny_profile(mp: pytest.MonkeyPatch, root: Path) -> Scenario:
    """A CNY profile with labour: the totals are keyed cny_total / cny_per_hour."""
    clock = ManualClock()
    _nvml(mp, [h100(0, power_w=312.0), h100(1, power_w=118.0)], clock)
    profile = root / "cny.yaml"
    profile.write_text("name: cn\ncurrency: CNY\ngpu_price: 220000\nelectricity_per_kwh: 0.8\n"
                       "labour_rate_per_hour: 125\nsetup_hours: 80\n")
    with _monitor(root, clock, profile=str(profile)) as mon:
        _steps(mon, clock, [0.0, 60.0])
    return Scenario(mon.state, 60.0)


def vllm_engine_window(mp: pytest.MonkeyPatch, root: Path) -> Scenario:
    """An H100 under its catalog preset and the recorded vLLM /metrics scraped twice, 100 tokens and one
    request apart."""
    clock = ManualClock()
    _nvml(mp, [h100(0)], clock)
    with _monitor(root, clock, engine_url=ENGINE_URL) as mon:
        _steps(mon, clock, [0.0, 1.0, 2.0])
        mon.state.engine_scraped(1.0, parse_engine_metrics(VLLM_TEXT))
        mon.state.engine_scraped(2.0, parse_engine_metrics(_vllm_later(172.0, 4.0)))
    return Scenario(mon.state, 2.0)


def vllm_engine_without_cost(mp: pytest.MonkeyPatch, root: Path) -> Scenario:
    """The recorded vLLM text without a cost profile: per-token cost is absent with its reason."""
    clock = ManualClock()
    _nvml(mp, [FakeNvGpu(name="NVIDIA GeForce RTX 3080", uuid="GPU-3080")], clock)
    with _monitor(root, clock, engine_url=ENGINE_URL) as mon:
        _steps(mon, clock, [0.0, 1.0, 2.0])
        mon.state.engine_scraped(1.0, parse_engine_metrics(VLLM_TEXT))
        mon.state.engine_scraped(2.0, parse_engine_metrics(_vllm_later(72.0, 3.0)))
    return Scenario(mon.state, 2.0)


def engine_down_after_scrapes(mp: pytest.MonkeyPatch, root: Path) -> Scenario:
    """The engine answered twice, then stopped answering: down, with the window it had."""
    clock = ManualClock()
    _nvml(mp, [h100(0)], clock)
    with _monitor(root, clock, engine_url=ENGINE_URL) as mon:
        _steps(mon, clock, [0.0, 1.0, 2.0, 3.0])
        mon.state.engine_scraped(1.0, parse_engine_metrics(VLLM_TEXT))
        mon.state.engine_scraped(2.0, parse_engine_metrics(_vllm_later(172.0, 4.0)))
        mon.state.engine_failed(3.0, "GET http://127.0.0.1:9/metrics: connection refused")
    return Scenario(mon.state, 3.0)


def engine_never_reached(mp: pytest.MonkeyPatch, root: Path) -> Scenario:
    """An engine that never answered: down, no last scrape, no window."""
    clock = ManualClock()
    _nvml(mp, [h100(0)], clock)
    with _monitor(root, clock, engine_url=ENGINE_URL) as mon:
        _steps(mon, clock, [0.0, 1.0])
        mon.state.engine_failed(1.0, "GET http://127.0.0.1:9/metrics: connection refused")
    return Scenario(mon.state, 1.0)


def amd_gpu_lost(mp: pytest.MonkeyPatch, root: Path) -> Scenario:
    """Two MI300X, one falls off the bus: it is down with its error, the other is served."""
    clock = ManualClock()
    mp.setitem(sys.modules, "amdsmi", make_fake_amdsmi([mi300x(0), mi300x(1, lost_at=0.5)], clock))
    _no_nvml(mp, clock)
    with _monitor(root, clock) as mon:
        _steps(mon, clock, [0.0, 1.0, 2.0])
    return Scenario(mon.state, 2.0)


def source_failed(mp: pytest.MonkeyPatch, root: Path) -> Scenario:
    """NVML raising on every read after the first: the source is down with its reason."""
    clock = ManualClock()
    module = make_fake_pynvml([h100(0, power_w=312.0), h100(1, power_w=118.0)], clock)
    mp.setitem(sys.modules, "pynvml", module)
    mp.setitem(sys.modules, "amdsmi", None)

    def wedged(h: int) -> object:
        raise RuntimeError("driver wedged")

    with _monitor(root, clock) as mon:
        _steps(mon, clock, [0.0])
        mp.setattr(module, "nvmlDeviceGetUtilizationRates", wedged)
        _steps(mon, clock, [1.0, 30.0])
    return Scenario(mon.state, 30.0)


def cpu_only_rapl(mp: pytest.MonkeyPatch, root: Path) -> Scenario:
    """No GPU stack: the CPU's RAPL package zone priced by a CPU ownership profile."""
    clock = ManualClock()
    mp.setitem(sys.modules, "pynvml", make_fake_pynvml([], clock, init_error=12))
    mp.setitem(sys.modules, "amdsmi", None)
    zone = write_zone(root, "intel-rapl:0", "package-0", energy_uj=1_000_000)
    profile = root / "cpu-own.yaml"
    profile.write_text("name: cpu-own\nhost_price: 3650\namortisation_months: 10\nelectricity_per_kwh: 0.2\n")
    with _monitor(root, clock, profile=str(profile), interval_s=2.0) as mon:
        _steps(mon, clock, [0.0])
        (zone / "energy_uj").write_text(f"{1_000_000 + 50_000_000}\n")
        _steps(mon, clock, [2.0])
    return Scenario(mon.state, 2.0)


SCENARIOS: dict[str, Callable[[pytest.MonkeyPatch, Path], Scenario]] = {
    "own profile, alert fired": own_profile_alert_fired,
    "no cost (GPU not in the catalog)": no_cost_gpu_missing_from_catalog,
    "CNY profile": cny_profile,
    "vLLM engine window": vllm_engine_window,
    "vLLM engine without cost": vllm_engine_without_cost,
    "engine down after scrapes": engine_down_after_scrapes,
    "engine never reached": engine_never_reached,
    "AMD GPU lost": amd_gpu_lost,
    "source failed": source_failed,
    "CPU only (RAPL)": cpu_only_rapl,
}
