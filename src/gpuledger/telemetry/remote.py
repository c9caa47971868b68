"""Telemetry of the server's node, read over HTTP while the run goes on: a Prometheus exposition endpoint
of NVIDIA's dcgm-exporter, AMD's device-metrics-exporter or ``gpuledger monitor`` (``--telemetry-from
http://NODE:9400/metrics``), sampled over the window like a local source. A Prometheus server is read after
the window instead (``prometheus+http://PROM:9090?selector=…``, :mod:`gpuledger.telemetry.promql`).

Options ride in the URL's query and are taken out of it before the request (docs/telemetry.md):

- ``gpu=0,1`` — only these GPU indices (the exporter's ``gpu`` / ``gpu_id`` label); each one named and not
  reported is a device the run expected and lacks (``device_missing``);
- ``uuid=GPU-…,…`` — only these UUIDs; ``host=NAME`` — only this host label (an endpoint that federates);
- ``interval=1s`` — how often to read (default 1 s; dcgm-exporter refreshes every ``-c`` ms, 30 s by
  default, so run it with ``-c 1000`` or less); ``timeout=5s`` — per request (default 5 s);
- ``gap=3s`` — the energy rule's gap limit for this source's devices (default 3 s; a Prometheus server that
  scrapes every 15 s needs ``gap=16s`` to call such a record valid).

Without a selection every GPU the endpoint reports counts as the run's: on a shared node, select. Credentials
in the URL (``http://user:pass@node/metrics``) are sent as a Basic header and redacted everywhere else.

Bounds: a selection names at most ``MAX_DEVICES`` (1,024) GPUs (UsageError), an exposition reports at most
that many (``expo``: SourceError). The devices an exporter is read for are those of its first answer (at
open) and those the selection names: a device that appears only in a later answer (an exporter whose
identities change from one scrape to the next) is not measured, and the source's reason counts them.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from gpuledger.errors import UsageError
from gpuledger.records import Vendor
from gpuledger.telemetry.base import MAX_DEVICES, BaseSource, DeviceInfo, Reading, SourceError
from gpuledger.telemetry.expo import SERIES, VENDOR, ExpoDevice, Exposition, clean_host, parse_exposition
from gpuledger.telemetry.http import DEFAULT_TIMEOUT_S, HttpClient
from gpuledger.urls import parse_server_url, redact_url

OPTION_KEYS = ("gpu", "uuid", "host", "interval", "timeout", "gap", "selector", "step", "wait")
DEFAULT_INTERVAL_S = 1.0
MAX_SOURCE_NAME = 128  # the store's limit on a sample's source name
_DURATION = re.compile(r"^(\d+(?:\.\d+)?|\.\d+)(ms|s|m)?$")
_PROVIDES = frozenset(metric for _, metric, _ in SERIES.values() if not metric.startswith("_"))


def parse_seconds(text: str, what: str) -> float:
    """``"500ms"``, ``"2s"``, ``"1m"`` or a bare number of seconds; UsageError otherwise."""
    m = _DURATION.match(text.strip().lower())
    if not m:
        raise UsageError(f"{what}: expected a duration such as 500ms, 2s or 1m (got {text!r})")
    value = float(m.group(1)) * {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}[m.group(2)]
    if not (value > 0 and math.isfinite(value)):
        raise UsageError(f"{what}: must be a positive duration (got {text!r})")
    return value


@dataclass(frozen=True, slots=True)
class Selection:
    """Which of an endpoint's GPUs are the run's (module docstring)."""

    gpus: tuple[int, ...] = ()
    uuids: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.gpus or self.uuids or self.hosts)

    def matches(self, dev: ExpoDevice | DeviceInfo, host: str) -> bool:
        if self.gpus and dev.index not in self.gpus:
            return False
        if self.uuids and not (dev.uuid and any(dev.uuid == u or dev.uuid.endswith(u) for u in self.uuids)):
            return False
        return not self.hosts or host in self.hosts

    def describe(self) -> str:
        parts = [f"{k}={','.join(str(x) for x in v)}" for k, v in
                 (("gpu", self.gpus), ("uuid", self.uuids), ("host", self.hosts)) if v]
        return " ".join(parts) if parts else "all the GPUs it reports"


@dataclass(frozen=True, slots=True)
class RemoteUrl:
    """A ``--telemetry-from`` URL taken apart: what to request, what to show, the options."""

    kind: str  # "exposition" | "prometheus"
    request_url: str  # no credentials, no options
    display: str  # redacted, options kept: what is shown and stored
    authorization: str | None
    selection: Selection
    interval_s: float = DEFAULT_INTERVAL_S
    timeout_s: float = DEFAULT_TIMEOUT_S
    options: dict[str, str] = field(default_factory=dict)
    gap_limit_s: float | None = None

    @property
    def host(self) -> str:
        parts = urlsplit(self.request_url)
        return clean_host(f"{parts.hostname}:{parts.port}" if parts.port else (parts.hostname or ""))


def _bounded(values: tuple[Any, ...], what: str, key: str) -> tuple[Any, ...]:
    if len(values) > MAX_DEVICES:
        raise UsageError(f"{what}: {key}= names {len(values):,} GPUs, more than the {MAX_DEVICES:,} one "
                         "source may have")
    return values


def _ints(text: str, what: str) -> tuple[int, ...]:
    out = []
    if text.count(",") > MAX_DEVICES:
        raise UsageError(f"{what}: gpu= names more than the {MAX_DEVICES:,} GPUs one source may have")
    for token in (t.strip() for t in text.split(",")):
        if not token.isdigit() or len(token) > 6:
            raise UsageError(f"{what}: expected GPU indices such as gpu=0,1 (got {text!r})")
        out.append(int(token))
    return tuple(dict.fromkeys(out))


def _words(text: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(t.strip()[:200] for t in text.split(",") if t.strip()))


def parse_remote_url(url: str) -> RemoteUrl:
    """A ``--telemetry-from`` URL (module docstring); UsageError (with the URL redacted) when it is not
    one."""
    raw = url.strip()
    shown = redact_url(raw)
    what = f"--telemetry-from {shown}"
    scheme = raw.partition("://")[0].lower()
    kind = "prometheus" if scheme.startswith("prometheus+") else "exposition"
    http_url = raw[len("prometheus+"):] if kind == "prometheus" else raw
    try:
        parsed = parse_server_url(http_url, strip_v1=False)
    except ValueError as exc:
        raise UsageError(f"{what}: {exc}",
                         hint="use http(s)://NODE:PORT/metrics or prometheus+http(s)://PROM:9090?selector=...",
                         ) from None
    options: dict[str, str] = {}
    kept: list[tuple[str, str]] = []
    for key, value in parse_qsl(parsed.query.lstrip("?"), keep_blank_values=True):
        if key in OPTION_KEYS:
            if key in options:
                raise UsageError(f"{what}: {key}= is given twice")
            options[key] = value
        else:
            kept.append((key, value))
    if kind == "exposition" and ({"selector", "step", "wait"} & set(options)):
        raise UsageError(f"{what}: selector=, step= and wait= are for a Prometheus server "
                         "(prometheus+http://PROM:9090?selector=...)")
    hosts = _bounded(tuple(clean_host(h) for h in _words(options.get("host", ""))), what, "host")
    uuids = _bounded(_words(options.get("uuid", "")), what, "uuid")
    selection = Selection(_ints(options["gpu"], what) if options.get("gpu") else (), uuids, hosts)
    interval = parse_seconds(options["interval"], f"{what}: interval=") if "interval" in options else \
        DEFAULT_INTERVAL_S
    timeout = parse_seconds(options["timeout"], f"{what}: timeout=") if "timeout" in options else \
        DEFAULT_TIMEOUT_S
    gap = parse_seconds(options["gap"], f"{what}: gap=") if "gap" in options else None
    base = parsed.base
    if kind == "exposition" and urlsplit(base).path in ("", "/"):
        base = base.rstrip("/") + "/metrics"
    request = base + (f"?{urlencode(kept)}" if kept else "")
    return RemoteUrl(kind, request, shown, parsed.authorization, selection, interval, timeout, options, gap)


def source_name(label: str, display: str) -> str:
    name = f"{label} {display}"
    return name if len(name) <= MAX_SOURCE_NAME else name[: MAX_SOURCE_NAME - 3] + "..."


class RemoteSource(BaseSource):
    """What both remote sources share: the URL, the HTTP client, the selection and what it expects."""

    remote = True

    def __init__(self, spec: RemoteUrl, label: str, vendor: Vendor, *, client: HttpClient | None = None,
                 min_interval_s: float) -> None:
        super().__init__(source_name(label, spec.display), vendor, _PROVIDES, min_interval_s=min_interval_s)
        self.spec = spec
        self.gap_limit_s = spec.gap_limit_s  # None: the sampler's
        self.client = client or HttpClient()
        self._owns_client = client is None
        self._hosts: list[str] = []
        self.failed_reads = 0
        self._expected: tuple[int, int, list[DeviceInfo]] | None = None  # (devices, hosts) it was made for

    def headers(self) -> dict[str, str]:
        return {"Authorization": self.spec.authorization} if self.spec.authorization else {}

    def interrupt(self, why: str) -> None:
        """Abandon this source's request in flight and make no more (``HttpClient.interrupt``)."""
        self.client.interrupt(why)

    def assigned_by(self, key: str) -> str | None:
        """What makes a device of this source the run's (None: not one of this source's)."""
        keys = {d.key for d in self._devices} | {d.key for d in self.expected_devices()}
        if key not in keys:
            return None
        return f"--telemetry-from {self.spec.display} ({self.spec.selection.describe()})"

    def expected_devices(self) -> list[DeviceInfo]:
        """The selection's GPUs that the endpoint does not report (each is ``device_missing``); made again
        only when the devices or hosts seen changed."""
        if self._expected is not None and self._expected[:2] == (len(self._devices), len(self._hosts)):
            return list(self._expected[2])
        sel = self.spec.selection
        hosts = list(sel.hosts) or self._hosts or [self.spec.host]
        seen = {(d.index, d.key.rpartition("@")[2]) for d in self._devices}
        have = [d.uuid for d in self._devices if d.uuid]
        out = []
        for host in hosts:
            for index in sel.gpus:
                if (index, host) not in seen:
                    out.append(DeviceInfo(key=f"{self.vendor}:{index}@{host}", vendor=self.vendor,
                                          index=index, name=""))
            for uuid in sel.uuids:
                if not any(u.endswith(uuid) for u in have):
                    out.append(DeviceInfo(key=f"{self.vendor}:{uuid[-12:]}@{host}", vendor=self.vendor,
                                          index=None, name="", uuid=uuid))
        self._expected = (len(self._devices), len(self._hosts), out)
        return list(out)

    def _note_hosts(self, devices: Sequence[ExpoDevice]) -> None:
        for d in devices:
            if d.host not in self._hosts:
                self._hosts.append(d.host)

    def close(self) -> None:
        if self._owns_client:
            self.client.close()


class ExpositionSource(RemoteSource):
    """An exporter's ``/metrics`` on the server's node, read every ``interval`` (module docstring)."""

    own_thread = True
    final_read = True

    def __init__(self, spec: RemoteUrl, *, client: HttpClient | None = None, strict: bool = False) -> None:
        super().__init__(spec, "exposition", "nvidia", client=client, min_interval_s=spec.interval_s)
        self.strict = strict  # raise a failed read (the monitor's retry and source_up) instead of skipping it
        self.appeared = 0  # devices seen after the first answer, not measured (module docstring)
        try:
            first = self._scrape()
        except BaseException:  # SourceError, or a signal while the exporter is opened
            self.close()
            raise
        if first.exporter is None:
            self.close()
            raise SourceError(f"{spec.display} has no GPU series of dcgm-exporter, AMD's device-metrics-"
                              "exporter or gpuledger monitor (DCGM_FI_DEV_POWER_USAGE, gpu_power_usage, "
                              "gpuledger_gpu_power_watts)")
        self.name = source_name(first.exporter, spec.display)
        told = VENDOR.get(first.exporter)
        self.vendor = told if told is not None else next((d.vendor for d in first.devices), "nvidia")
        chosen = self._select(first)
        self._note_hosts(chosen)
        self._devices = [d.info() for d in chosen]
        self.available = True

    def _scrape(self) -> Exposition:
        resp = self.client.get(self.spec.request_url, display=self.spec.display, headers=self.headers(),
                               timeout_s=self.spec.timeout_s)
        if resp.status != 200:
            raise SourceError(f"GET {self.spec.display} answered HTTP {resp.status}")
        return parse_exposition(resp.text(), default_host=self.spec.host)

    def _select(self, expo: Exposition) -> list[ExpoDevice]:
        return [d for d in expo.devices if self.spec.selection.matches(d, d.host)]

    def read(self, now: float) -> list[Reading]:
        try:
            expo = self._scrape()
        except SourceError as exc:  # one failed read is a missing sample (the gap rule judges it)
            if self.strict:
                raise
            self.failed_reads += 1
            self.reason = f"{self.failed_reads} read(s) failed; the last: {exc.message}"
            return []
        out: list[Reading] = []
        known = {d.key: d for d in self._devices}
        sel = self.spec.selection
        for dev in self._select(expo):
            info = known.get(dev.key)
            if info is None:
                uuid = dev.uuid or ""
                named = dev.index in sel.gpus or bool(uuid and any(uuid.endswith(u) for u in sel.uuids))
                if not named or len(self._devices) >= MAX_DEVICES:
                    self.appeared += 1
                    self.reason = (f"{self.appeared} reading(s) of GPUs the first answer did not report were "
                                   "left out (measured: the first answer's GPUs and the selection's)")
                    continue
                info = dev.info()
                self._devices.append(info)
                known[dev.key] = info
            out.extend(Reading(now, info, metric, value, self.name) for metric, value in dev.values.items())
        return out


def wall_offset() -> float:
    """``time.time() - time.monotonic()`` now: adds to a monotonic time to give the wall clock."""
    return time.time() - time.monotonic()
