"""The background sampler on a real thread, real psutil, real files; GPUs faked at the import boundary."""

from __future__ import annotations

import os
import time
import types
from collections.abc import Callable
from pathlib import Path

import pytest
from telemetry_fakes import write_zone

from gpuledger.errors import UsageError
from gpuledger.facts.cpu import cpu_model_name
from gpuledger.telemetry import BackgroundSampler, close_sources, open_sources
from gpuledger.telemetry.cpu import PsutilSource
from gpuledger.telemetry.nvml import NvmlSource
from gpuledger.telemetry.rapl import RaplSource

Install = Callable[[str], types.ModuleType]


def test_psutil_reads_cpu_utilisation_and_ram(tmp_path: Path) -> None:
    src = PsutilSource(tmp_path)
    assert src.available and [d.key for d in src.devices()] == ["cpu"]
    busy_until = time.monotonic() + 0.05
    while time.monotonic() < busy_until:
        pass
    got = {r.metric: r.value for r in src.read(1.0)}
    assert 0.0 <= got["cpu_util_ratio"] <= 1.0
    assert 0 < got["ram_used_bytes"] < got["ram_total_bytes"]


def test_cpu_name_comes_from_proc_cpuinfo_under_root(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text("processor\t: 0\nmodel name\t: AMD EPYC 9474F 48-Core Processor\n")
    assert cpu_model_name(tmp_path) == "AMD EPYC 9474F 48-Core Processor"
    assert PsutilSource(tmp_path).devices()[0].name == "AMD EPYC 9474F 48-Core Processor"


def test_open_sources_without_a_gpu_stack_lists_every_source_with_a_reason(no_gpu_stack: None,
                                                                          tmp_path: Path) -> None:
    sources = open_sources(tmp_path)
    status = {s.name: (s.available, s.reason) for s in sources}
    assert list(status) == ["nvml", "nvidia-smi", "amdsmi", "amd-smi", "rocm-smi", "rapl", "psutil"]
    assert status["nvml"][1] and status["nvml"][1].startswith("NVML Shared Library Not Found")
    assert status["nvidia-smi"] == (False, "nvidia-smi: not found on PATH")
    assert status["amdsmi"][1] and "amdsmi Python package is not installed" in status["amdsmi"][1]
    assert status["rapl"] == (False, "rapl: not present (no /sys/class/powercap)")
    assert status["psutil"] == (True, None)
    close_sources(sources)


def test_library_first_cli_only_as_fallback(use_nvml: Install, no_gpu_stack: None, tmp_path: Path) -> None:
    use_nvml("healthy multi-GPU")
    names = [s.name for s in open_sources(tmp_path)]
    assert "nvml" in names and "nvidia-smi" not in names
    assert [s.name for s in open_sources(tmp_path, use_cli=False)] == ["nvml", "amdsmi", "rapl", "psutil"]


def test_sampler_on_a_thread_returns_samples_relative_to_t0(tmp_path: Path) -> None:
    zone = write_zone(tmp_path, "intel-rapl:0", "package-0", 1_000_000)
    sources = [RaplSource(tmp_path), PsutilSource(tmp_path)]
    t0 = time.monotonic()
    sampler = BackgroundSampler(sources, interval_s=0.05, t0=t0).start()
    time.sleep(0.2)
    # +2.5 J, replaced atomically as sysfs reads are: a plain write_text truncates first, and a read
    # that lands in between sees an empty file (a vanished zone), which drops RAPL from the window.
    tmp = zone / "energy_uj.new"
    tmp.write_text("3500000\n")
    os.replace(tmp, zone / "energy_uj")
    time.sleep(0.5)
    samples = sampler.stop()
    assert samples and all(0.0 <= s.t <= time.monotonic() - t0 for s in samples)
    assert {s.metric for s in samples} >= {"energy_j", "cpu_util_ratio", "ram_used_bytes", "ram_total_bytes"}
    assert {s.source for s in samples} == {"rapl", "psutil"}
    (cpu,) = sampler.summaries()
    assert cpu.device == "cpu" and cpu.sources == ["psutil", "rapl"]
    # The counter's 2.5 J, carried to the window's edges (a few ms beyond its first and last read) at
    # its own mean rate.
    assert cpu.energy_method == "counter" and cpu.energy_j == pytest.approx(2.5, rel=0.01)
    assert cpu.mean_power_w is not None and cpu.mean_power_w > 0 and "power_w" not in cpu.unavailable
    assert (cpu.energy_reason or "").startswith("not validated: rapl reports energy only")
    assert cpu.samples >= 2


def test_a_gpu_lost_on_the_thread_does_not_stop_the_other_sources(use_nvml: Install, tmp_path: Path) -> None:
    fake = use_nvml("GPU lost mid-window")
    # lose GPU 1 on the fake's own clock after a few reads, whatever the wall clock says
    reads = {"n": 0}
    original = fake.nvmlDeviceGetPowerUsage

    def power(h: int) -> int:
        if h == 1:
            reads["n"] += 1
            if reads["n"] > 2:
                raise fake.NVMLError(fake.NVML_ERROR_GPU_IS_LOST)
        result: int = original(h)
        return result

    fake.nvmlDeviceGetPowerUsage = power  # type: ignore[attr-defined]
    sources = [NvmlSource(), PsutilSource(tmp_path)]
    sampler = BackgroundSampler(sources, interval_s=0.05).start()
    time.sleep(0.5)
    samples = sampler.stop()
    by_device = {s.device for s in samples}
    assert by_device == {"nvidia:0", "nvidia:1", "cpu"}
    summaries = {s.device: s for s in sampler.summaries()}
    assert "GPU is lost" in (summaries["nvidia:1"].validity_reason or "")
    assert summaries["nvidia:1"].valid is False
    late = max(s.t for s in samples if s.device == "nvidia:0")
    lost_last = max(s.t for s in samples if s.device == "nvidia:1")
    assert late > lost_last  # GPU 0 kept being sampled after GPU 1 was lost


def test_cli_sources_are_polled_no_faster_than_they_refresh(tmp_path: Path) -> None:
    from gpuledger.telemetry.smi_cli import NvidiaSmiSource

    calls: list[float] = []

    def runner(args: object, timeout: float) -> str:
        calls.append(timeout)
        return "0, GPU-a, NVIDIA A10, 00000000:17:00.0, 1, 1, 1, 2, 60, 40, 1, 1, 150\n"

    smi = NvidiaSmiSource(runner)
    sampler = BackgroundSampler([smi, PsutilSource(tmp_path)], interval_s=0.1, t0=0.0)
    for i in range(31):  # 3 s at 0.1 s
        sampler.poll(i * 0.1)
    smi_ticks = {s.t for s in sampler.samples() if s.source == "nvidia-smi"}
    assert sorted(smi_ticks) == pytest.approx([0.0, 1.0, 2.0, 3.0])
    assert len({s.t for s in sampler.samples() if s.source == "psutil"}) == 31
    summary = {s.device: s for s in sampler.summaries(window_end=3.0)}["nvidia:0"]
    assert summary.interval_s == 1.0 and summary.valid  # 1 s ticks are not a gap for a 1 s source


def test_bad_interval_is_a_usage_error() -> None:
    with pytest.raises(UsageError):
        BackgroundSampler([], interval_s=0)


def test_a_bug_in_a_source_surfaces_in_stop_instead_of_dying_silently(use_nvml: Install) -> None:
    fake = use_nvml("healthy multi-GPU")

    def broken(h: int) -> int:
        raise RuntimeError("driver returned garbage")

    fake.nvmlDeviceGetPowerUsage = broken  # type: ignore[attr-defined]
    sampler = BackgroundSampler([NvmlSource()], interval_s=0.05).start()
    time.sleep(0.1)
    with pytest.raises(RuntimeError, match="driver returned garbage"):
        sampler.stop()


def test_a_slow_cli_does_not_hold_up_the_fast_sources(tmp_path: Path) -> None:
    from gpuledger.telemetry.smi_cli import NvidiaSmiSource

    calls = {"n": 0}

    def slow_runner(args: object, timeout: float) -> str:
        calls["n"] += 1
        if calls["n"] > 1:  # the probe at open is quick; every read then takes 1.2 s, like a busy tool
            time.sleep(1.2)
        return "0, GPU-a, NVIDIA A10, 00000000:17:00.0, 1, 1, 1, 2, 60, 40, 1, 1, 150\n"

    smi = NvidiaSmiSource(slow_runner)
    sampler = BackgroundSampler([smi, PsutilSource(tmp_path)], interval_s=0.1).start()
    time.sleep(1.5)
    samples = sampler.stop()
    psutil_ticks = {s.t for s in samples if s.source == "psutil"}
    assert len(psutil_ticks) >= 8  # one thread for both would allow about 3
    summary = {s.device: s for s in sampler.summaries()}["nvidia:0"]
    assert summary.interval_s >= 1.2  # the tool's real pace, not the requested one
