"""``gpuledger gate BASELINE --run``: the baseline's exact workload, run again on this machine, then gated.

The spec of the new run is made the way ``bench --like BASELINE`` makes it (``bench.like.repeat``: the stored
workload — dataset, lengths, load, counts, warm-up, seed, SLOs, timeouts — wherever the command line did not
give it), from a command line that gives only what differs between an upgrade's before and after: the server's
URL (``--base-url``; default: the baseline's, when it was stored without credentials), the model (``--model``;
default: the one the baseline's spec asked for), the engine (``--engine``; default: the baseline's) and the
label. What ``bench --like`` would take from bench's own defaults is the baseline's here: telemetry on or off,
reading the server's /metrics, the variable holding the API key. A group's first run is the one repeated.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuledger.bench.flags import FLAG_FIELDS, require
from gpuledger.bench.like import check_dataset, engine_of_repeat, repeat, stored_spec
from gpuledger.bench.options import options_of
from gpuledger.errors import UsageError
from gpuledger.records import BenchSpec, RunInfo


def default_base_url(baseline: RunInfo) -> str | None:
    """The baseline's server URL when it was stored whole (a URL with credentials is stored redacted)."""
    url = getattr(baseline.config, "base_url", None)
    return url if isinstance(url, str) and "***" not in url else None


def rerun_spec(
    baseline: RunInfo,
    *,
    base_url: str | None = None,
    model: str | None = None,
    engine: str | None = None,
    label: str = "",
) -> BenchSpec:
    """The spec of a new run of ``baseline``'s workload (module docstring); ``UsageError`` for a flag that
    does not fit it, ``InvalidInputError`` when the baseline does not record its workload or its dataset file
    changed."""
    stored = stored_spec(baseline)
    given = {"label"}
    has_url = "base_url" in type(stored).model_fields
    url = base_url if base_url is not None else default_base_url(baseline)
    if has_url and getattr(stored, "base_url", None) is not None and url is None:
        raise UsageError(f"run {baseline.id}'s server URL is stored redacted (it carried credentials): give "
                         "--base-url")
    given.update(name for name, value in (("base_url", base_url), ("model", model), ("engine", engine))
                 if value is not None)
    kind = engine_of_repeat(baseline, engine or stored.engine or baseline.engine, given)
    # The model is the workload's where the workload names it (in-process engines: bench --like copies it);
    # a server run's is not (bench --like names it again): here the baseline's spec's.
    asked_model = getattr(stored, "model", None)
    own_model = "model" not in FLAG_FIELDS[type(stored)] and isinstance(asked_model, str)
    # What is not the workload's is the baseline's too (bench --like would take bench's defaults): whether
    # it sampled telemetry and read the server's /metrics, the variable holding the API key. An option the
    # task does not have is not given (the task's options model ignores it).
    values: dict[str, Any] = {
        "engine": kind.name,
        "base_url": url,
        "model": model if model is not None or not own_model else asked_model,
        "label": label,
        "telemetry": stored.telemetry_enabled(),
        "server_metrics": stored.records_server_metrics(),
        "api_key_env": getattr(stored, "api_key_env", None),
    }
    asked = options_of(kind, values, given).document(kind)
    spec = repeat(baseline, asked, kind, given)
    require(spec)
    dataset = spec.dataset_spec()
    path = getattr(dataset, "path", None)
    check_dataset(baseline, path if isinstance(path, Path) else None)
    return spec


__all__ = ["default_base_url", "rerun_spec"]
