"""What ``gpuledger monitor`` is asked to do: listen address, intervals, alert level, engine endpoint.

Parsing of the command-line forms lives here so that the library and the CLI agree:
``parse_duration("1h30m") == 5400.0``, ``parse_listen("127.0.0.1:9835") == ("127.0.0.1", 9835)``.
"""

from __future__ import annotations

import ipaddress
import math
import re
from dataclasses import dataclass

from gpuledger.errors import UsageError

DEFAULT_LISTEN = "127.0.0.1:9835"
DEFAULT_INTERVAL_S = 1.0
DEFAULT_ALERT_UTIL = 0.2
DEFAULT_ALERT_WINDOW_S = 3600.0
DEFAULT_ENGINE_WINDOW_S = 60.0
DEFAULT_ENGINE_TIMEOUT_S = 5.0

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?|\.\d+)(ms|s|m|h|d)")


def parse_duration(text: str, what: str = "duration") -> float:
    """Seconds from ``"1s"``, ``"500ms"``, ``"15m"``, ``"1h30m"``, ``"2d"`` or a bare number of seconds.
    Anything else, zero, or a negative value is a :class:`UsageError` naming ``what``."""
    raw = text.strip().lower()
    seconds: float | None = None
    try:
        seconds = float(raw)
    except ValueError:
        pos, total = 0, 0.0
        for match in _PART.finditer(raw):
            if match.start() != pos:
                break
            total += float(match.group(1)) * _UNITS[match.group(2)]
            pos = match.end()
        if raw and pos == len(raw):
            seconds = total
    if seconds is None or not math.isfinite(seconds) or seconds <= 0:
        raise UsageError(
            f"{what}: expected a positive duration such as 1s, 500ms, 15m, 1h or 1h30m (got {text!r})"
        )
    return seconds


def is_loopback_host(host: str) -> bool:
    """True for ``localhost`` and loopback IP literals (127.0.0.0/8, ::1). Other host names are not
    resolved (no DNS from a command-line check) and count as non-loopback."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_listen(text: str, *, allow_remote: bool = False) -> tuple[str, int]:
    """``(host, port)`` from ``HOST:PORT``, ``[IPv6]:PORT``, ``:PORT`` or ``PORT`` (host 127.0.0.1).
    Port 0 asks the system for a free port. A non-loopback host needs ``allow_remote``."""
    raw = text.strip()
    host: str
    if raw.startswith("["):
        close = raw.find("]")
        if close < 0 or not raw[close + 1:].startswith(":"):
            raise UsageError(f"--listen: expected [IPv6]:PORT (got {text!r})")
        host, port_text = raw[1:close], raw[close + 2:]
    elif raw.count(":") == 1:
        host, port_text = raw.split(":")
    elif ":" not in raw:
        host, port_text = "", raw
    else:
        raise UsageError(f"--listen: write an IPv6 address in brackets, e.g. [::1]:9835 (got {text!r})")
    host = host or "127.0.0.1"
    try:
        port = int(port_text)
    except ValueError:
        raise UsageError(f"--listen: port must be a number 0-65535 (got {text!r})") from None
    if not 0 <= port <= 65535:
        raise UsageError(f"--listen: port must be a number 0-65535 (got {text!r})")
    if not is_loopback_host(host) and not allow_remote:
        raise UsageError(
            f"--listen {text}: {host} is not a loopback address; the exporter serves unauthenticated "
            "data about this machine, so binding it beyond this host must be asked for explicitly",
            hint="add --allow-remote (and restrict who can reach the port), or use 127.0.0.1",
        )
    return host, port


@dataclass(frozen=True, slots=True)
class MonitorConfig:
    """Everything the monitor loop needs (the CLI fills it from its flags)."""

    host: str = "127.0.0.1"
    port: int = 9835
    interval_s: float = DEFAULT_INTERVAL_S
    alert_util: float = DEFAULT_ALERT_UTIL
    alert_window_s: float = DEFAULT_ALERT_WINDOW_S
    engine_url: str | None = None
    engine_window_s: float = DEFAULT_ENGINE_WINDOW_S
    engine_timeout_s: float = DEFAULT_ENGINE_TIMEOUT_S
    hostname: str = ""

    def __post_init__(self) -> None:
        if not (self.interval_s > 0 and math.isfinite(self.interval_s)):
            raise UsageError(f"--interval must be a positive number of seconds (got {self.interval_s!r})")
        if not (0.0 <= self.alert_util <= 1.0):
            raise UsageError(
                "--alert-util is a utilisation ratio between 0 and 1, e.g. 0.2 for 20 % "
                f"(got {self.alert_util!r})"
            )
        if not (self.alert_window_s > 0 and math.isfinite(self.alert_window_s)):
            raise UsageError(f"--alert-window must be a positive duration (got {self.alert_window_s!r})")
        if not (self.engine_window_s > 0 and math.isfinite(self.engine_window_s)):
            raise UsageError(f"--engine-window must be a positive duration (got {self.engine_window_s!r})")
        if not (self.engine_timeout_s > 0 and math.isfinite(self.engine_timeout_s)):
            raise UsageError(f"engine timeout must be a positive duration (got {self.engine_timeout_s!r})")
        if self.engine_url is not None and not re.match(r"^https?://[^/\s]+", self.engine_url):
            raise UsageError(
                f"--engine-metrics: expected an http(s) URL such as http://127.0.0.1:8000/metrics "
                f"(got {self.engine_url!r})"
            )
