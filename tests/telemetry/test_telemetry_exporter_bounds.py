"""A remote exporter is hostile until checked (tests/support/exposition.py serves what each test programs):
its device list is bounded (1,024), fixed by its first answer and the selection (an exposition whose
identities change on every scrape is not thousands of GPUs), processed in time linear in devices, and its
power is held against the catalog's TDP before anything is priced."""

from __future__ import annotations

import pytest

from gpuledger.errors import UsageError
from gpuledger.records import TelemetrySample
from gpuledger.telemetry import sampler as sampler_module
from gpuledger.telemetry.base import BaseSource, DeviceInfo, Reading, SourceError
from gpuledger.telemetry.remote import ExpositionSource, parse_remote_url
from gpuledger.telemetry.sampler import BackgroundSampler, summarize_device
from support.exposition import HEAD, ExpositionServer, dcgm_power


def _window(source: ExpositionSource, reads: int) -> BackgroundSampler:
    """``reads`` readings of ``source`` one second apart on a manual clock (no thread, no wall clock)."""
    sampler = BackgroundSampler([source], interval_s=1.0, t0=0.0, env={})
    for i in range(reads):
        sampler.poll(float(i))
    return sampler


def test_an_exposition_of_more_than_1024_gpus_is_refused_at_open() -> None:
    body = HEAD + "".join(dcgm_power(100.0, gpu=g) for g in range(1100))
    with ExpositionServer(lambda n: body) as srv, pytest.raises(SourceError) as err:
        ExpositionSource(parse_remote_url(srv.url))
    assert "reports more than 1,024 GPUs: not one node's exporter" in err.value.message
    assert srv.requests == 1


def test_uuids_that_change_on_every_scrape_are_not_new_gpus() -> None:
    with ExpositionServer(lambda n: HEAD + dcgm_power(300.0, uuid=f"GPU-rotating-{n:08d}")) as srv:
        source = ExpositionSource(parse_remote_url(srv.url + "?interval=1s"))
        try:
            summaries = _window(source, 40).summaries()
        finally:
            source.close()
    assert [s.device for s in summaries] == ["nvidia:ing-00000000@gpu-node-1"]  # the first answer's GPU
    assert source.appeared == 40 and "40 reading(s) of GPUs the first answer did not report" in (source.reason
                                                                                                 or "")


def test_a_gpu_the_selection_names_may_appear_after_the_first_answer() -> None:
    def answer(n: int) -> str:
        return HEAD + dcgm_power(300.0, gpu=0) + (dcgm_power(200.0, gpu=1) if n >= 2 else "")

    with ExpositionServer(answer) as srv:
        source = ExpositionSource(parse_remote_url(srv.url + "?gpu=0,1&interval=1s"))
        try:
            devices = {s.device: s for s in _window(source, 5).summaries()}
        finally:
            source.close()
    assert set(devices) == {"nvidia:0@gpu-node-1", "nvidia:1@gpu-node-1"} and source.appeared == 0
    assert devices["nvidia:1@gpu-node-1"].samples == 4


def test_a_selection_naming_more_than_1024_gpus_is_a_usage_error() -> None:
    with pytest.raises(UsageError) as err:
        parse_remote_url("http://node:9400/metrics?gpu=" + ",".join(str(i) for i in range(2000)))
    assert "more than the 1,024 GPUs one source may have" in err.value.message


def test_99999_w_on_an_h100_is_not_a_reading_it_can_have() -> None:
    def answer(n: int) -> str:
        return HEAD + dcgm_power(99999.0 if n == 3 else 650.0, gpu=0)

    with ExpositionServer(answer) as srv:
        source = ExpositionSource(parse_remote_url(srv.url + "?interval=1s"))
        try:
            (summary,) = _window(source, 8).summaries()
        finally:
            source.close()
    assert summary.valid is False and summary.reasons == ["power_out_of_range"]
    assert "over 1,050 W (1.5 × the NVIDIA H100 SXM's 700 W TDP (catalog))" in (summary.validity_reason or "")
    assert summary.peak_power_w == pytest.approx(650.0)
    assert summary.energy_j == pytest.approx(650.0 * 7.0)


def test_a_device_the_catalog_does_not_know_is_held_to_3000_w() -> None:
    dev = DeviceInfo("nvidia:0", "nvidia", 0, "Some Future GPU")
    samples = [TelemetrySample(float(t), dev.key, "power_w", 1e300 if t == 2 else 400.0, "x")
               for t in range(6)]
    summary = summarize_device(dev, samples, window_start=0.0, window_end=5.0, interval_s=1.0)
    assert summary.reasons == ["power_out_of_range"] and summary.mean_power_w == pytest.approx(400.0)
    assert "over 3,000 W (3,000 W, the most any device draws" in (summary.validity_reason or "")
    cpu = DeviceInfo("cpu", "cpu", None, "AMD EPYC")
    counter = [TelemetrySample(float(t), "cpu", "energy_j", 1.7e308 * t / 5, "rapl") for t in range(6)]
    summary = summarize_device(cpu, counter, window_start=0.0, window_end=5.0, interval_s=1.0)
    assert summary.energy_j is None and summary.reasons == ["power_out_of_range"]  # not "inf J, valid"


class _ManyGpus(BaseSource):
    """A source of ``n`` GPUs that counts how often the sampler asks what it could not read."""

    def __init__(self, n: int) -> None:
        super().__init__("many", "nvidia", frozenset({"power_w"}))
        self.available = True
        self._devices = [DeviceInfo(f"nvidia:{i}", "nvidia", i, "") for i in range(n)]
        self.asked = 0

    def read(self, now: float) -> list[Reading]:
        return [Reading(now, d, "power_w", 100.0, self.name) for d in self._devices]

    def unavailable(self) -> dict[str, dict[str, str]]:
        self.asked += 1
        return super().unavailable()


def test_summaries_take_time_linear_in_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    source = _ManyGpus(1000)
    sampler = BackgroundSampler([source], interval_s=1.0, t0=0.0, env={})
    for i in range(5):
        sampler.poll(float(i))
    seen: list[int] = []
    real = sampler_module.summarize_device

    def counting(dev: DeviceInfo, samples: list[TelemetrySample], **kw: object) -> object:
        seen.append(len(samples))
        return real(dev, samples, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(sampler_module, "summarize_device", counting)
    summaries = sampler.summaries(window_end=4.0)
    assert len(summaries) == 1000 and all(s.mean_power_w == pytest.approx(100.0) for s in summaries)
    assert sum(seen) == 5000  # each device was given its own 5 samples, not all 5,000 (quadratic: 5,000,000)
    assert source.asked == 1  # asked once, not once per device
