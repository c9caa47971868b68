"""Remote telemetry of the server's node: exporters' real expositions parsed in base units, the
``--telemetry-from`` URL (options, selection, redaction), and the exposition source against a replayed
dcgm-exporter on 127.0.0.1 (dcgm-exporter needs a GPU: its real capture is served instead)."""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from exporter_replay import CAPTURE, ReplayedDcgmExporter

from gpuledger.errors import UsageError
from gpuledger.telemetry import BackgroundSampler, SourceError, close_sources, open_sources
from gpuledger.telemetry.expo import parse_exposition
from gpuledger.telemetry.remote import parse_remote_url
from gpuledger.telemetry.remotes import check_remote_urls

EXPORTERS = Path(__file__).resolve().parents[1] / "fixtures" / "captures" / "exporters"
MIB = 1024 * 1024


def test_a_real_dcgm_exporter_exposition_reads_in_base_units() -> None:
    expo = parse_exposition(CAPTURE.read_text(), default_host="node:9400")
    assert expo.exporter == "dcgm-exporter" and expo.left_out == 0
    t4 = next(d for d in expo.devices if d.host == "424773df46e0")
    assert (t4.key, t4.name, t4.uuid) == ("nvidia:0@424773df46e0", "Tesla T4",
                                          "GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e")
    assert t4.values["power_w"] == pytest.approx(8.969)  # DCGM_FI_DEV_POWER_USAGE, W
    assert t4.values["energy_j"] == pytest.approx(128996.013)  # TOTAL_ENERGY_CONSUMPTION 128996013 mJ
    assert t4.values["util_ratio"] == 0.0  # GPU_UTIL, %
    assert t4.values["memory_used_bytes"] == 0.0  # FB_USED, MiB
    assert t4.values["memory_total_bytes"] == 15109 * MIB  # FB_USED + FB_FREE
    assert t4.values["sm_clock_hz"] == 300e6


def test_a_real_amd_device_metrics_exporter_exposition_reads_in_base_units() -> None:
    text = (EXPORTERS / "rocm-device-metrics-exporter-metrics-mini.txt").read_text()
    expo = parse_exposition(text, default_host="mi-node:5000")
    assert expo.exporter == "amd-device-metrics-exporter"
    (gpu,) = expo.devices
    assert gpu.vendor == "amd" and gpu.uuid == "6699c0a8-4200-4242-037f-f97e6cae0f09"
    assert gpu.key == "amd:f97e6cae0f09@mi-node:5000"  # no gpu_id label in this early release: by UUID
    assert gpu.values == {"power_w": 41.0, "memory_total_bytes": 68702 * MIB, "util_ratio": 0.0}


def test_current_amd_names_energy_in_microjoules_and_power_preference() -> None:
    labels = 'gpu_id="0",card_series="AMD Instinct MI300X OAM",hostname="tw038",serial_number="6924"'
    text = (f"gpu_package_power{{{labels}}} 748\ngpu_power_usage{{{labels}}} 745\n"
            f"gpu_energy_consumed{{{labels}}} 1.5e12\ngpu_gfx_activity{{{labels}}} 93\n"
            f"gpu_used_vram{{{labels}}} 183265\ngpu_clock{{{labels},clock_type=\"SYSTEM\"}} 4294967295\n")
    (gpu,) = parse_exposition(text, default_host="x").devices
    assert gpu.key == "amd:0@tw038" and gpu.name == "AMD Instinct MI300X OAM"
    assert gpu.values["power_w"] == 745.0  # gpu_power_usage preferred over package power, whatever the order
    assert gpu.values["energy_j"] == pytest.approx(1.5e6)  # uJ
    assert gpu.values["util_ratio"] == pytest.approx(0.93)
    assert gpu.values["memory_used_bytes"] == 183265 * MIB


def test_sentinels_and_impossible_values_are_left_out() -> None:
    lab = 'gpu="0",UUID="GPU-1",Hostname="h"'
    text = (f"DCGM_FI_DEV_POWER_USAGE{{{lab}}} 9223372036854775794\nDCGM_FI_DEV_GPU_UTIL{{{lab}}} 250\n"
            f"DCGM_FI_DEV_FB_USED{{{lab}}} 100\n")
    expo = parse_exposition(text, default_host="h")
    assert expo.left_out == 2 and expo.devices[0].values == {"memory_used_bytes": 100 * MIB}


def test_mig_instances_repeat_the_device_and_count_once() -> None:
    lines = [f'DCGM_FI_DEV_POWER_USAGE{{gpu="0",UUID="GPU-a",GPU_I_PROFILE="2g.20gb",GPU_I_ID="{i}",'
             f'Hostname="n"}} 78.174' for i in (3, 5, 6)]
    expo = parse_exposition("\n".join(lines) + "\n", default_host="n")
    assert [(d.key, d.values) for d in expo.devices] == [("nvidia:0@n", {"power_w": 78.174})]


def test_text_that_is_not_an_exposition_is_a_source_error() -> None:
    with pytest.raises(SourceError, match="not Prometheus exposition text"):
        parse_exposition('DCGM_FI_DEV_POWER_USAGE{gpu="0" 5\n', default_host="h")


def test_the_url_carries_options_that_are_taken_out_of_the_request() -> None:
    spec = parse_remote_url("http://user:s3cret@node:9400?gpu=1,0&interval=500ms&token=abc&timeout=2s")
    assert spec.kind == "exposition"
    assert spec.request_url == "http://node:9400/metrics?token=abc"  # the exporter's own params kept
    assert spec.authorization == "Basic " + base64.b64encode(b"user:s3cret").decode()
    assert "s3cret" not in spec.display and "abc" not in spec.display
    assert spec.selection.gpus == (1, 0) and spec.interval_s == 0.5 and spec.timeout_s == 2.0
    assert spec.host == "node:9400"


@pytest.mark.parametrize("url, message", [
    ("ftp://node/metrics", "must start with http"),
    ("http://node:9400/metrics?gpu=zero", "GPU indices"),
    ("http://node:9400/metrics?interval=fast", "interval="),
    ("http://node:9400/metrics?selector=up", "for a Prometheus server"),
    ("prometheus+http://prom:9090", "needs selector="),
    ("prometheus+http://prom:9090?selector=rate(x[5m])", "label matchers"),
    ('prometheus+http://prom:9090?selector={__name__="x"}', "label matchers"),
])
def test_a_malformed_url_is_a_usage_error_before_any_request(url: str, message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace("[", r"\[")):
        check_remote_urls([url])


@pytest.fixture
def exporter() -> Iterator[ReplayedDcgmExporter]:
    with ReplayedDcgmExporter({0: 250.0, 1: 400.0, 2: 300.0}, util={2: 100.0}) as ex:
        yield ex


def test_the_selection_keeps_the_shared_nodes_other_gpus_out(exporter: ReplayedDcgmExporter) -> None:
    (src,) = open_sources(local=False, remote=[exporter.url + "?gpu=0,1,7&interval=0.2"])
    try:
        assert src.name.startswith("dcgm-exporter http://127.0.0.1:")
        assert [d.key for d in src.devices()] == ["nvidia:0@gpu-node-1", "nvidia:1@gpu-node-1"]
        t0 = time.monotonic()
        sampler = BackgroundSampler([src], interval_s=0.1, t0=t0).start()
        time.sleep(1.2)
        sampler.stop()
        got = {s.device: s for s in sampler.summaries()}
    finally:
        close_sources([src])
    assert set(got) == {"nvidia:0@gpu-node-1", "nvidia:1@gpu-node-1", "nvidia:7@gpu-node-1"}
    for key, watts in (("nvidia:0@gpu-node-1", 250.0), ("nvidia:1@gpu-node-1", 400.0)):
        s = got[key]
        assert s.valid and s.assigned and s.mean_power_w == pytest.approx(watts)
        assert s.energy_method == "counter" and s.energy_j == pytest.approx(watts * s.window_s, rel=0.01)
        assert s.sources == [src.name] and "gpu=0,1,7" in (s.assigned_by or "")
    missing = got["nvidia:7@gpu-node-1"]
    assert missing.valid is False and missing.reasons == ["device_missing"] and missing.assigned


def test_an_unreachable_endpoint_fails_at_open_with_the_url_redacted() -> None:
    with pytest.raises(SourceError, match=r"GET http://me:\*\*\*@127\.0\.0\.1:9/metrics"):
        open_sources(local=False, remote=["http://me:pw@127.0.0.1:9/metrics"])


class _Recorder:
    def __init__(self, body: str, status: int = 200) -> None:
        self.body, self.status = body, status
        self.headers: list[dict[str, str]] = []


@pytest.fixture
def recorder() -> Iterator[tuple[_Recorder, int]]:
    rec = _Recorder(CAPTURE.read_text())

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            rec.headers.append(dict(self.headers.items()))
            data = rec.body.encode()
            self.send_response(rec.status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield rec, server.server_address[1]
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def test_credentials_are_sent_as_a_header_and_never_shown(recorder: tuple[_Recorder, int]) -> None:
    rec, port = recorder
    (src,) = open_sources(local=False, remote=[f"http://ops:hunter2@127.0.0.1:{port}/metrics"])
    close_sources([src])
    assert rec.headers[0]["Authorization"] == "Basic " + base64.b64encode(b"ops:hunter2").decode()
    assert "hunter2" not in src.name and "ops:***@" in src.name


@pytest.mark.parametrize("body, status, message", [
    ("", 503, "answered HTTP 503"),
    ("# HELP something else\nnode_load1 0.5\n", 200, "has no GPU series"),
    ("\x00\x01garbage{{{", 200, "not Prometheus exposition text"),
])
def test_an_endpoint_that_serves_no_gpus_is_one_clear_error(recorder: tuple[_Recorder, int], body: str,
                                                            status: int, message: str) -> None:
    rec, port = recorder
    rec.body, rec.status = body, status
    with pytest.raises(SourceError, match=message):
        open_sources(local=False, remote=[f"http://127.0.0.1:{port}/metrics"])


def test_an_oversized_answer_is_refused(recorder: tuple[_Recorder, int]) -> None:
    rec, port = recorder
    rec.body = "# " + "x" * (17 * 1024 * 1024)  # over the 16 MiB cap
    with pytest.raises(SourceError, match="larger than 16 MiB"):
        open_sources(local=False, remote=[f"http://127.0.0.1:{port}/metrics"])
