"""The ``--telemetry-from`` sources, opened by the kind of their URL: an exporter's exposition
(:mod:`gpuledger.telemetry.remote`) or a Prometheus server's range queries
(:mod:`gpuledger.telemetry.promql`, which builds on the first). Above both, so neither imports the other."""

from __future__ import annotations

from collections.abc import Sequence

from gpuledger.errors import UsageError
from gpuledger.telemetry.http import HttpClient
from gpuledger.telemetry.promql import PrometheusRangeSource, check_prometheus_options
from gpuledger.telemetry.remote import ExpositionSource, parse_remote_url


def check_remote_urls(urls: Sequence[str]) -> None:
    """Every ``--telemetry-from`` URL parsed and its options checked (UsageError, exit 2), without any
    request: what the CLI does before it opens anything."""
    for url in urls:
        spec = parse_remote_url(url)
        if spec.kind == "prometheus":
            check_prometheus_options(spec)


def open_remote_sources(urls: Sequence[str], *, client: HttpClient | None = None, live: bool = False
                        ) -> list[ExpositionSource | PrometheusRangeSource]:
    """One source per ``--telemetry-from`` URL, each checked now: a malformed URL is a UsageError (exit 2),
    an endpoint that cannot be read or serves no GPU series a SourceError (exit 8) — before the run.
    ``live`` (the monitor): exposition endpoints only, and a failed read raises."""
    specs = [parse_remote_url(u) for u in urls]
    opened: list[ExpositionSource | PrometheusRangeSource] = []
    try:
        for spec in specs:
            if live and spec.kind == "prometheus":
                raise UsageError(f"--telemetry-from {spec.display}: the monitor reads exporters live; a "
                                 "Prometheus server is read after a bench run, not by the monitor",
                                 hint="point the monitor at the exporter's /metrics")
            if live:
                opened.append(ExpositionSource(spec, client=client, strict=True))
            elif spec.kind == "prometheus":
                opened.append(PrometheusRangeSource(spec, client=client))
            else:
                opened.append(ExpositionSource(spec, client=client))
    except BaseException:
        for src in opened:
            src.close()
        raise
    return opened


__all__ = ["check_remote_urls", "open_remote_sources"]
