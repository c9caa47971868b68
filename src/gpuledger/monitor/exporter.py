"""The Prometheus side: a custom collector that renders :class:`MonitorState` as metric families on a
private registry, and the HTTP server (prometheus_client's WSGI server) that serves it.

Names follow Prometheus conventions: base units in the name (``_ratio``, ``_bytes``, ``_watts``,
``_joules_total``, ``_celsius``, ``_hertz``, ``_seconds``), money named by the profile's currency
(``gpuledger_cost_usd_total``; a CNY profile gives ``gpuledger_cost_cny_total``). A gauge whose device
stopped answering is left out (never a stale or zero value); counters keep their last value.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpuledger.errors import ResourceError
from gpuledger.monitor.engine import WindowStats
from gpuledger.monitor.state import DeviceState, MonitorState
from gpuledger.telemetry.expo import GPULEDGER_GPU_SERIES

DEVICE_LABELS = ["gpu", "uuid", "model", "vendor", "hostname"]
CPU_LABELS = ["model", "hostname"]

# telemetry metric -> (exported name, help); the names are telemetry.expo's (--telemetry-from reads them).
_HELP: dict[str, str] = {
    "util_ratio": "GPU busy ratio 0..1 (NVML utilization.gpu, amdsmi gfx_activity)",
    "mem_util_ratio": "Memory controller busy ratio 0..1 (NVML utilization.memory, amdsmi umc_activity)",
    "memory_used_bytes": "GPU memory used, bytes",
    "memory_total_bytes": "GPU memory total, bytes",
    "power_w": "GPU power draw as sampled, watts",
    "power_limit_w": "Enforced power limit / power cap, watts",
    "temperature_c": "GPU (edge) temperature, degrees Celsius",
    "temperature_hotspot_c": "GPU hotspot (junction) temperature, degrees Celsius",
    "sm_clock_hz": "SM / GFX clock, hertz",
    "mem_clock_hz": "Memory clock, hertz",
    "process_memory_bytes": "GPU memory used by compute processes, bytes",
}
GPU_GAUGES: dict[str, tuple[str, str]] = {m: (name, _HELP[m]) for m, name in GPULEDGER_GPU_SERIES.items()}


def device_labels(dev: DeviceState, hostname: str) -> list[str]:
    """The device's label values; a device read from another node (``--telemetry-from``: its key ends in
    ``@host``) carries that node's host name."""
    i = dev.info
    gpu = "" if i.index is None or i.vendor == "cpu" else str(i.index)
    _, at, remote_host = i.key.rpartition("@")
    return [gpu, i.uuid or "", i.name, i.vendor, remote_host if at else hostname]


def _gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels)


def _counter(name: str, doc: str, labels: list[str]) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, labels=labels)


def build_families(state: MonitorState, now: float) -> list[Metric]:
    """Every metric family for the state at ``now`` (monotonic). Call with ``state.lock`` held."""
    host = state.hostname
    out: list[Metric] = []
    gpus = [d for d in state.devices.values() if d.info.vendor != "cpu"]
    cpus = [d for d in state.devices.values() if d.info.vendor == "cpu"]

    # ---------------------------------------------------------------- GPUs
    gauges = {m: _gauge(n, h, DEVICE_LABELS) for m, (n, h) in GPU_GAUGES.items()}
    up = _gauge("gpuledger_gpu_up", "1 while the GPU answers its telemetry source, 0 once it is lost "
                "or silent for more than 3 intervals", DEVICE_LABELS)
    info = _gauge("gpuledger_gpu_info", "GPU identity and provenance: telemetry sources and how energy is "
                  "measured (counter = hardware counter checked against integrated power; integrated = "
                  "trapezoid of sampled power)", [*DEVICE_LABELS, "sources", "energy_method"])
    energy = _counter("gpuledger_gpu_energy_joules", "GPU energy since the monitor started, joules "
                      "(method: gpuledger_gpu_info energy_method)", DEVICE_LABELS)
    busy = _counter("gpuledger_gpu_busy_seconds", "Integral of utilisation over time: busy GPU-seconds "
                    "since the monitor started", DEVICE_LABELS)
    for dev in gpus:
        lv = device_labels(dev, host)
        for metric, fam in gauges.items():
            value = dev.fresh(metric, now)
            if value is not None:
                fam.add_metric(lv, value)
        up.add_metric(lv, 1.0 if dev.up(now) else 0.0)
        info.add_metric([*lv, ",".join(sorted(dev.sources)), dev.meter.method or "none"], 1.0)
        if dev.meter.has_data:
            energy.add_metric(lv, dev.meter.total_j)
        busy.add_metric(lv, dev.busy_s)
    out.extend([*gauges.values(), up, info, energy, busy])

    # ---------------------------------------------------------------- CPU and RAM
    cpu_util = _gauge("gpuledger_cpu_utilization_ratio", "CPU busy ratio 0..1, all cores (/proc/stat "
                      "deltas via psutil)", CPU_LABELS)
    mem_used = _gauge("gpuledger_memory_used_bytes", "Host memory used (total - available), bytes",
                      ["device", "hostname"])
    mem_total = _gauge("gpuledger_memory_total_bytes", "Host memory total, bytes", ["device", "hostname"])
    cpu_power = _gauge("gpuledger_cpu_power_watts", "CPU package power derived from the RAPL energy "
                       "counter (delta J / delta t), watts", CPU_LABELS)
    cpu_energy = _counter("gpuledger_cpu_energy_joules", "CPU package energy since the monitor started "
                          "(RAPL counter), joules", CPU_LABELS)
    cpu_busy = _counter("gpuledger_cpu_busy_seconds", "Integral of CPU utilisation over time, seconds",
                        CPU_LABELS)
    cpu_up = _gauge("gpuledger_cpu_up", "1 while CPU telemetry answers", CPU_LABELS)
    for dev in cpus:
        lv = [dev.info.name, host]
        value = dev.fresh("cpu_util_ratio", now)
        if value is not None:
            cpu_util.add_metric(lv, value)
        used, total = dev.fresh("ram_used_bytes", now), dev.fresh("ram_total_bytes", now)
        if used is not None:
            mem_used.add_metric(["ram", host], used)
        if total is not None:
            mem_total.add_metric(["ram", host], total)
        m = dev.meter
        if (m.last_power_w is not None and m.last_power_t is not None and dev.error is None
                and now - m.last_power_t <= 3 * dev.period_s + 0.5):
            cpu_power.add_metric(lv, m.last_power_w)
        if dev.meter.has_data:
            cpu_energy.add_metric(lv, m.total_j)
        cpu_busy.add_metric(lv, dev.busy_s)
        cpu_up.add_metric(lv, 1.0 if dev.up(now) else 0.0)
    out.extend([cpu_util, mem_used, mem_total, cpu_power, cpu_energy, cpu_busy, cpu_up])

    # ---------------------------------------------------------------- sources
    src_up = _gauge("gpuledger_source_up", "1 while a telemetry source (or the engine endpoint, "
                    "source=\"engine\") answers; 0 after a failed read (retried with backoff)",
                    ["source", "hostname"])
    for src in state.sources.values():
        if src.available_at_start:
            src_up.add_metric([src.name, host], 1.0 if src.up else 0.0)
    if state.engine is not None:
        src_up.add_metric(["engine", host], 1.0 if state.engine.up else 0.0)
    out.append(src_up)

    # ---------------------------------------------------------------- alert
    cfg = state.config
    acc = state.accounted()
    alert = _gauge("gpuledger_low_utilization_alert", f"1 when every utilisation reading stayed below "
                   f"{cfg.alert_util:g} for {cfg.alert_window_s:g} s; back to 0 on the first reading at or "
                   "above it", DEVICE_LABELS)
    for dev in acc:
        alert.add_metric(device_labels(dev, host), 1.0 if dev.alert.active else 0.0)
    threshold = _gauge("gpuledger_alert_threshold_ratio", "The --alert-util level", ["hostname"])
    threshold.add_metric([host], cfg.alert_util)
    window = _gauge("gpuledger_alert_window_seconds", "The --alert-window", ["hostname"])
    window.add_metric([host], cfg.alert_window_s)
    interval = _gauge("gpuledger_monitor_interval_seconds", "The --interval between readings", ["hostname"])
    interval.add_metric([host], cfg.interval_s)
    out.extend([alert, threshold, window, interval])

    # ---------------------------------------------------------------- cost
    c = state.cost
    if c is not None:
        cur = c.currency.lower()
        unit = c.currency
        cost = _counter(f"gpuledger_cost_{cur}", f"Cost accrued since the monitor started, {unit}: hourly "
                        "cost of the profile at the measured power x elapsed time, by component (sum() for "
                        "the total)", ["component", "hostname"])
        for name, value in c.totals.items():
            if name == "energy" and c.energy_reason is not None and value == 0.0:
                continue
            cost.add_metric([name, host], value)
        idle = _counter(f"gpuledger_idle_cost_{cur}", f"Cost accrued while the device's utilisation was "
                        f"below {cfg.alert_util:g}, {unit} (its share of the hourly cost)", DEVICE_LABELS)
        for dev in acc:
            idle.add_metric(device_labels(dev, host), dev.idle_cost)
        out.extend([cost, idle])
        if c.rate is not None:
            rate = _gauge(f"gpuledger_cost_rate_{cur}_per_hour", "Hourly cost at the devices' current power, "
                          f"{unit} per hour", ["hostname"])
            rate.add_metric([host], c.rate.total if c.energy_reason is None else c.rate.total - c.rate.energy)
            out.append(rate)
        if c.power_w is not None:
            pw = _gauge("gpuledger_cost_power_watts", "Power priced now (the priced devices' latest "
                        "power + host_power_w), watts; gpuledger_cost_profile_info power_source says where "
                        "it comes from", ["hostname"])
            pw.add_metric([host], c.power_w)
            out.append(pw)
        prof = _gauge("gpuledger_cost_profile_info", "The cost profile the monitor prices with",
                      ["profile", "currency", "mode", "power_source", "hostname"])
        prof.add_metric([c.profile.name, c.currency, c.profile.mode, c.power_source, host], 1.0)
        out.append(prof)

    # ---------------------------------------------------------------- engine
    eng = state.engine
    if eng is not None:
        kind = eng.last.kind if eng.last else ""
        einfo = _gauge("gpuledger_engine_info", "The serving engine scraped with --engine-metrics",
                       ["engine", "url", "models", "hostname"])
        einfo.add_metric([kind, eng.url, ",".join(eng.last.models) if eng.last else "", host], 1.0)
        out.append(einfo)
        stats = eng.window.stats() if eng.up else None
        if stats is not None:
            out.extend(_engine_families(state, stats, kind, host))
    return out


def _engine_families(state: MonitorState, stats: WindowStats, kind: str, host: str) -> list[Metric]:
    out: list[Metric] = []
    labels = ["engine", "hostname"]
    span = _gauge("gpuledger_engine_window_seconds", "Length of the sliding window the engine figures "
                  "below are computed over, seconds", labels)
    span.add_metric([kind, host], stats.span_s)
    out.append(span)
    for name, doc, value in (
        ("gpuledger_engine_output_tokens_per_second", "Output (generation) tokens per second over the window",
         stats.rate(stats.output_tokens)),
        ("gpuledger_engine_prompt_tokens_per_second", "Prompt (prefill) tokens per second over the window",
         stats.rate(stats.prompt_tokens)),
        ("gpuledger_engine_requests_per_second", "Finished requests per second over the window",
         stats.rate(stats.requests)),
        ("gpuledger_engine_e2e_latency_mean_seconds", "Mean end-to-end request latency over the window "
         "(engine histogram sum / count), seconds", stats.e2e_mean_s),
    ):
        if value is not None:
            fam = _gauge(name, doc, labels)
            fam.add_metric([kind, host], value)
            out.append(fam)
    c = state.cost
    if c is not None:
        cur = c.currency.lower()
        per_m = _gauge(f"gpuledger_cost_per_million_tokens_{cur}", "Cost accrued over the window / tokens "
                       f"the engine processed in it x 1e6, {c.currency}; basis=total: prompt + output "
                       "tokens, basis=output: the whole cost charged to output tokens", ["basis", *labels])
        for basis, value in (("total", stats.cost_per_million_total()),
                             ("output", stats.cost_per_million_output())):
            if value is not None:
                per_m.add_metric([basis, kind, host], value)
        out.append(per_m)
    dev_kind = "gpu" if any(d.info.vendor != "cpu" for d in state.accounted()) else "cpu"
    per_req = _gauge(f"gpuledger_{dev_kind}_seconds_per_request", f"{dev_kind.upper()}-seconds per "
                     "finished request over the window; basis=allocated: devices x wall time / requests "
                     "(what is paid for), basis=busy: utilisation x time / requests (what the work used)",
                     ["basis", *labels])
    for basis, value in (("allocated", stats.device_seconds_per_request()),
                         ("busy", stats.busy_seconds_per_request())):
        if value is not None:
            per_req.add_metric([basis, kind, host], value)
    out.append(per_req)
    return out


class MonitorCollector(Collector):
    """Renders the live state at scrape time."""

    def __init__(self, state: MonitorState, clock: Callable[[], float] = time.monotonic) -> None:
        self.state = state
        self.clock = clock

    def collect(self) -> Iterable[Metric]:
        with self.state.lock:
            families = build_families(self.state, self.clock())
        return families


def make_registry(state: MonitorState, *, clock: Callable[[], float] = time.monotonic,
                  process_metrics: bool = True) -> CollectorRegistry:
    """A private registry holding the monitor's collector (and the exporter's own process metrics)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(MonitorCollector(state, clock))
    if process_metrics:
        ProcessCollector(namespace="gpuledger_exporter", registry=registry)
    return registry


class MetricsServer:
    """prometheus_client's threaded WSGI server on ``host:port`` (port 0: a free one)."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        try:
            server, thread = start_http_server(port, addr=host, registry=registry)
        except OSError as exc:
            raise ResourceError(f"cannot listen on {host}:{port}: {exc.strerror or exc}",
                                hint="pick another port with --listen HOST:PORT") from exc
        self._server: WSGIServer = server
        self._thread: threading.Thread = thread
        self.host = host
        self.port = int(server.server_port)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
