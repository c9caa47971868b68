"""``gpuledger monitor``: a vendor-neutral Prometheus exporter for GPU/CPU utilisation, memory, power,
energy and temperature, with live cost accrual from a cost profile, a low-utilisation alert, and live
cost per million tokens from a serving engine's own ``/metrics``.

>>> config = MonitorConfig(host="127.0.0.1", port=9835, interval_s=1.0)
>>> with Monitor(config, profile="h100-sxm-own") as mon:
...     mon.start_server(); mon.run(handle_signals=True)
"""

from __future__ import annotations

from gpuledger.engines.server_metrics import (
    EngineCounters,
    EngineMetricsError,
    normalise_engine_url,
    parse_engine_metrics,
)
from gpuledger.monitor.config import MonitorConfig, is_loopback_host, parse_duration, parse_listen
from gpuledger.monitor.engine import EngineWindow, WindowStats
from gpuledger.monitor.exporter import MetricsServer, MonitorCollector, build_families, make_registry
from gpuledger.monitor.runner import Monitor
from gpuledger.monitor.state import EnergyMeter, LowUtilAlert, MonitorState
from gpuledger.monitor.status import MonitorStatus, MonitorSummary

__all__ = [
    "EnergyMeter",
    "EngineCounters",
    "EngineMetricsError",
    "EngineWindow",
    "LowUtilAlert",
    "MetricsServer",
    "Monitor",
    "MonitorCollector",
    "MonitorConfig",
    "MonitorState",
    "MonitorStatus",
    "MonitorSummary",
    "WindowStats",
    "build_families",
    "is_loopback_host",
    "make_registry",
    "normalise_engine_url",
    "parse_duration",
    "parse_engine_metrics",
    "parse_listen",
]
