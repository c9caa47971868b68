"""Telemetry of the server's node from a Prometheus server that scrapes its exporters, read once the run's
window is over: ``--telemetry-from 'prometheus+http://PROM:9090?selector={instance="node:9400"}'``.

After the window it asks ``/api/v1/query_range`` for every GPU series gpuledger knows
(:data:`gpuledger.telemetry.expo.SERIES`) that matches ``selector`` (PromQL label matchers, required: they
name the server's node) over the window with a margin, at ``step`` (default 1 s); for the power and energy
series it also asks ``timestamp(...)``, so that each value carries the time it was scraped — the gap and
coverage rules judge real samples, not a step grid that repeats the last value. It waits (``wait``,
default 30 s) until Prometheus has scraped past the window's end. The wall clock of this machine places
the window: the two machines' clocks should agree (NTP).

The selection options of :mod:`gpuledger.telemetry.remote` (``gpu=``, ``uuid=``, ``host=``) apply too.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping

from gpuledger.errors import UsageError
from gpuledger.telemetry.base import MAX_DEVICES, DeviceInfo, Reading, SourceError
from gpuledger.telemetry.expo import ENERGY_SERIES, POWER_SERIES, SERIES, ExpoDevice, classify, plausible
from gpuledger.telemetry.http import HttpClient
from gpuledger.telemetry.remote import RemoteSource, RemoteUrl, parse_seconds, wall_offset

DEFAULT_STEP_S = 1.0
DEFAULT_WAIT_S = 30.0
MARGIN_S = 60.0  # asked for before and after the window, so that samples bracket it
MAX_POINTS = 10_000  # Prometheus refuses more than 11,000 points per series
_MATCHER = re.compile(r'\s*[A-Za-z_][A-Za-z0-9_]*\s*(=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*')


def parse_selector(text: str, what: str) -> str:
    """The label matchers of ``selector=`` (``{instance="node:9400",gpu=~"0|1"}``, braces optional),
    checked and joined; UsageError for anything else (a metric name, a function, an empty selector)."""
    inner = text.strip()
    if inner.startswith("{") and inner.endswith("}"):
        inner = inner[1:-1]
    matchers: list[str] = []
    pos = 0
    while pos < len(inner):
        m = _MATCHER.match(inner, pos)
        if not m or "__name__" in m.group(0):
            raise UsageError(f"{what}: selector= takes PromQL label matchers such as "
                             f'{{instance="node:9400"}} (got {text!r})')
        matchers.append(m.group(0).strip())
        pos = m.end()
        if pos < len(inner):
            if inner[pos] != ",":
                raise UsageError(f"{what}: label matchers are separated by commas (got {text!r})")
            pos += 1
    if not matchers:
        raise UsageError(f"{what}: selector= is empty")
    return ",".join(matchers)


Points = list[tuple[float, float]]
Matrix = list[tuple[dict[str, str], Points]]
Ident = tuple[str, str]


def _matrix(body: bytes, display: str) -> Matrix:
    """The series of a query_range answer; SourceError for an error answer or a malformed one."""
    try:
        doc = json.loads(body)
    except ValueError as exc:
        raise SourceError(f"{display}: the answer is not JSON ({exc})") from exc
    if not isinstance(doc, dict) or doc.get("status") != "success":
        error = doc.get("error") if isinstance(doc, dict) else None
        raise SourceError(f"{display}: Prometheus answered an error: {str(error)[:200]}")
    data = doc.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "matrix" or not isinstance(data.get("result"),
                                                                                           list):
        raise SourceError(f"{display}: the answer is not a range-query matrix")
    out = []
    for item in data["result"]:
        labels = item.get("metric") if isinstance(item, dict) else None
        values = item.get("values") if isinstance(item, dict) else None
        if not isinstance(labels, dict) or not isinstance(values, list):
            continue
        points = []
        for point in values:
            try:
                points.append((float(point[0]), float(point[1])))
            except (TypeError, ValueError, IndexError):
                continue
        out.append(({str(k): str(v) for k, v in labels.items()}, points))
    return out


def _identity(labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in labels.items() if k != "__name__"))


def check_prometheus_options(spec: RemoteUrl) -> tuple[str, float, float]:
    """(selector, step, wait) of a ``prometheus+http`` URL; UsageError for a missing or malformed one."""
    what = f"--telemetry-from {spec.display}"
    if "selector" not in spec.options:
        raise UsageError(f"{what}: a Prometheus server needs selector= naming the server's node",
                         hint="e.g. prometheus+http://prom:9090?selector={instance=\"gpu-node:9400\"}")
    return (parse_selector(spec.options["selector"], what),
            parse_seconds(spec.options.get("step", "1s"), f"{what}: step="),
            parse_seconds(spec.options.get("wait", f"{DEFAULT_WAIT_S:g}s"), f"{what}: wait="))


class PrometheusRangeSource(RemoteSource):
    """A Prometheus server's record of the server's node, fetched after the window (module docstring)."""

    own_thread = True  # nothing to read during the window: kept off the fast sources' thread

    def __init__(self, spec: RemoteUrl, *, client: HttpClient | None = None) -> None:
        self.selector, self.step_s, self.wait_s = check_prometheus_options(spec)
        # Polled (a no-op) at the step: the step is the period its devices' edge tolerance is made of.
        super().__init__(spec, "prometheus", "nvidia", client=client, min_interval_s=self.step_s)
        self.base = spec.request_url.split("?", 1)[0].rstrip("/")
        try:
            resp = self.client.get(f"{self.base}/api/v1/status/buildinfo", display=spec.display,
                                   headers=self.headers(), timeout_s=spec.timeout_s)
        except BaseException:  # SourceError, or a signal while the server is opened
            self.close()
            raise
        if resp.status != 200:
            self.close()
            raise SourceError(f"GET {spec.display}: /api/v1/status/buildinfo answered HTTP {resp.status} "
                              "(is this a Prometheus server?)")
        self.offset = wall_offset()
        self.available = True

    def read(self, now: float) -> list[Reading]:
        return []  # everything comes from after_window()

    def _query(self, query: str, start: float, end: float) -> Matrix:
        step = max(self.step_s, (end - start) / MAX_POINTS)
        params = {"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        resp = self.client.get(f"{self.base}/api/v1/query_range", display=self.spec.display,
                               headers=self.headers(), params=params, timeout_s=self.spec.timeout_s)
        if resp.status not in (200, 400, 422):
            raise SourceError(f"GET {self.spec.display}: query_range answered HTTP {resp.status}")
        return _matrix(resp.body, self.spec.display)

    def _fetch(self, start: float, end: float
               ) -> tuple[dict[Ident, ExpoDevice], dict[Ident, dict[str, Points]]]:
        names = "|".join(re.escape(n) for n in SERIES)
        series = self._query(f'{{__name__=~"{names}",{self.selector}}}', start, end)
        devices: dict[Ident, ExpoDevice] = {}
        points: dict[Ident, dict[str, Points]] = {}
        ranks: dict[tuple[Ident, str], int] = {}
        stamped: dict[str, dict[tuple[tuple[str, str], ...], dict[float, float]]] = {}
        present = {labels.get("__name__", "") for labels, _ in series}
        for name in sorted(present & set(POWER_SERIES + ENERGY_SERIES)):
            for labels, pts in self._query(f"timestamp({name}{{{self.selector}}})", start, end):
                stamped.setdefault(name, {})[_identity(labels)] = dict(pts)
        for labels, pts in series:
            name = labels.get("__name__", "")
            got = classify(name, labels, labels.get("instance", self.spec.host))
            if got is None or not self.spec.selection.matches(got[1], got[1].host):
                continue
            ident, proto, _exporter, metric, scale, rank = got
            if ranks.get((ident, metric), len(SERIES) + 1) <= rank:
                continue
            ranks[(ident, metric)] = rank
            devices.setdefault(ident, proto)
            if len(devices) > MAX_DEVICES:
                raise SourceError(f"{self.spec.display}: the selector matches more than {MAX_DEVICES:,} "
                                  "GPUs: not one node's")
            times = stamped.get(name, {}).get(_identity(labels))
            kept: dict[float, float] = {}
            for t, raw in pts:
                true_t = times.get(t, t) if times is not None else t
                if plausible(metric, raw, scale):
                    kept.setdefault(true_t, raw * scale)
            points.setdefault(ident, {})[metric] = sorted(kept.items())
        return devices, points

    def after_window(self, start: float, end: float) -> list[Reading]:
        """The window's readings (``start``/``end`` on the monotonic clock), once Prometheus has scraped
        past its end or ``wait`` has passed."""
        t0, t1 = start + self.offset, end + self.offset
        deadline = time.monotonic() + self.wait_s
        while True:
            devices, points = self._fetch(t0 - MARGIN_S, t1 + MARGIN_S)
            latest = [max((t for t, _ in per.get("power_w", [])), default=0.0) for per in points.values()]
            if (latest and min(latest) >= t1) or time.monotonic() >= deadline:
                break
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
            if self.client.interrupted is not None:  # a signal: what was fetched is what there is
                break
        if not devices:
            self.reason = f"no GPU series matched {{{self.selector}}} between the window's edges"
        out: list[Reading] = []
        known = {d.key for d in self._devices}
        for ident, dev in devices.items():
            info = dev.info()
            if info.key not in known:
                known.add(info.key)
                self._devices.append(info)
            for metric, series in points.get(ident, {}).items():
                if metric.startswith("_"):
                    continue
                out.extend(Reading(t - self.offset, info, metric, v, self.name) for t, v in series)
            if dev.host not in self._hosts:
                self._hosts.append(dev.host)
        return out

    def expected_devices(self) -> list[DeviceInfo]:
        return super().expected_devices() if self._hosts or self.spec.selection.hosts else []
