"""``gpuledger bench --like RUN``: run again the workload of a stored run, on this machine or server.

"Compare two machines" only means something when both ran the same workload. ``--like`` reads the
stored run's own record of what it was asked to do and turns it back into ``bench`` flags:

* server runs (``openai``, ``ollama``): endpoint, dataset (name, file, lengths, range ratio), load
  (concurrency, Poisson rate and cap, or sweep), requests per stage or duration, warm-up, seed, SLOs,
  request timeout and telemetry interval. The server and the model are NOT copied — they are what
  differs between the two runs — so ``--base-url`` and ``--model`` are named again (or defaulted).
  A run on one server API can be repeated on the other (``chat`` stays ``chat``; ``completions`` and
  ``generate`` map to each other).
* torch runs (``gpuledger run``, ``bench --engine torch``): the model (a dummy architecture or the
  weights' path), batch size, input and output tokens, request count, warm-up, seed and SLOs. The
  device and dtype are not copied: ``auto`` picks what the new machine has.

Flags given on the command line win over the stored ones and are listed in the new run's
``config.like.overridden``. A dataset file must be byte-identical to the one the run used when the run
recorded its SHA-256 (runs made since gpuledger recorded it), else the new run would not be the same
workload: ``InvalidInputError`` (exit 4).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuledger.errors import InvalidInputError, UsageError
from gpuledger.records import RunInfo, TextGenerationSummary
from gpuledger.workload.datasets import file_sha256

SERVER_ENGINES = ("openai", "ollama")
# The same request shape under the other server API.
_ENDPOINT_FOR = {
    "openai": {"completions": "completions", "generate": "completions", "chat": "chat"},
    "ollama": {"completions": "generate", "generate": "generate", "chat": "chat"},
}


@dataclass(slots=True)
class LikeWorkload:
    """The stored run's workload as ``bench`` parameter values (parameter name -> value, CLI form)."""

    run_id: str
    engine: str
    values: dict[str, Any] = field(default_factory=dict)
    dataset_sha256: str | None = None


def _need(run: RunInfo, mapping: dict[str, Any], key: str, where: str) -> Any:
    if key not in mapping:
        raise InvalidInputError(
            f"run {run.id} does not record its {where}.{key}: its workload cannot be repeated with --like"
        )
    return mapping[key]


def _slo_text(slo: Any) -> str | None:
    """``{"ttft_ms": 500.0, "met": 3}`` -> ``"ttft_ms=500"`` (the limits only, as ``--slo`` takes them)."""
    if not isinstance(slo, dict):
        return None
    limits = [f"{k}={v:g}" for k, v in slo.items() if k.endswith("_ms") and isinstance(v, int | float)]
    return ",".join(limits) or None


def _load_values(run: RunInfo, load: Any) -> dict[str, Any]:
    if not isinstance(load, dict) or not isinstance(load.get("stages"), list) or not load["stages"]:
        raise InvalidInputError(f"run {run.id} does not record its load pattern: it cannot be repeated")
    kind, stages = load.get("kind"), load["stages"]
    if kind == "sweep":
        return {"sweep": ",".join(str(int(s["concurrency"])) for s in stages)}
    if kind == "rate":
        st = stages[0]
        return {"rate": float(st["rate_requests_per_s"]), "concurrency": st.get("max_concurrency")}
    if kind == "concurrency":
        return {"concurrency": int(stages[0]["concurrency"])}
    raise InvalidInputError(f"run {run.id} has a load pattern gpuledger does not know: {kind!r}")


def workload_of(run: RunInfo) -> LikeWorkload:
    """What ``bench`` needs to run ``run``'s workload again (``InvalidInputError`` when the run does not
    record it)."""
    cfg = run.config or {}
    if run.engine == "torch":
        wl = run.workload or {}
        values: dict[str, Any] = {
            "model": run.model,
            "concurrency": int(_need(run, cfg, "batch_size", "config")),
            "input_len": int(_need(run, wl, "input_tokens", "workload")),
            "output_len": int(_need(run, wl, "output_tokens", "workload")),
            "num_requests": int(_need(run, wl, "num_requests", "workload")),
            "warmup": 1 if cfg.get("warmup", True) else 0,
            "seed": int(_need(run, wl, "seed", "workload")),
            "slo": _slo_text(run.summary.slo.limits() if isinstance(run.summary, TextGenerationSummary)
                             and run.summary.slo is not None else None),
        }
        return LikeWorkload(run.id, "torch", values)
    if run.engine not in SERVER_ENGINES:
        raise InvalidInputError(f"run {run.id} was made by engine {run.engine!r}: --like cannot repeat it")
    ds = _need(run, cfg, "dataset", "config")
    if not isinstance(ds, dict):
        raise InvalidInputError(f"run {run.id} does not record its dataset: it cannot be repeated")
    duration = cfg.get("duration_s")
    values = {
        "endpoint": cfg.get("endpoint"),
        "dataset": _need(run, ds, "name", "config.dataset"),
        "dataset_path": Path(ds["path"]) if ds.get("path") else None,
        "input_len": ds.get("input_len"),
        "output_len": ds.get("output_len"),
        "range_ratio": float(ds.get("range_ratio") or 0.0),
        "concurrency": None,
        "rate": None,
        "sweep": None,
        **_load_values(run, cfg.get("load")),
        "num_requests": None if duration is not None else cfg.get("num_requests_per_stage"),
        "duration": duration,
        "warmup": int(cfg.get("warmup", 0)),
        "seed": int(cfg.get("seed", 0)),
        "slo": _slo_text(cfg.get("slo")),
        "request_timeout": float(cfg.get("request_timeout_s", 300.0)),
        "telemetry_interval": float(cfg.get("telemetry_interval_s", 0.1)),
    }
    sha = (run.workload or {}).get("sha256")
    return LikeWorkload(run.id, run.engine, values, sha if isinstance(sha, str) else None)


def apply_like(
    like: LikeWorkload, params: dict[str, Any], given: set[str]
) -> tuple[dict[str, Any], list[str]]:
    """``params`` (the bench command's parameters) with the stored workload filled in wherever the
    command line did not give a value (``given`` = parameter names set on the command line). Returns the
    new parameters and the names of the workload parameters the command line overrode."""
    out = dict(params)
    if "engine" in given and (out["engine"] == "torch") != (like.engine == "torch"):
        raise UsageError(
            f"run {like.run_id} used engine {like.engine}: a torch run's token-id workload and a server's "
            "text workload are not the same; --like repeats it with "
            + ("--engine torch" if like.engine == "torch" else "--engine openai or ollama")
        )
    if "engine" not in given:
        out["engine"] = like.engine
    values = dict(like.values)
    if out["engine"] in SERVER_ENGINES and values.get("endpoint") is not None:
        values["endpoint"] = _ENDPOINT_FOR[out["engine"]].get(str(values["endpoint"]), values["endpoint"])
    load_flags = {"concurrency", "rate", "sweep"}
    load_given = bool(load_flags & given)
    count_given = bool({"num_requests", "duration"} & given)
    overridden: list[str] = []
    for name, value in values.items():
        if name in given:
            if out.get(name) != value:
                overridden.append(name)
            continue
        if name in load_flags and load_given:
            continue  # a load pattern given here replaces the stored one whole
        if name in ("num_requests", "duration") and count_given:
            continue
        out[name] = value
    return out, overridden


def check_dataset(like: LikeWorkload, path: Path | None) -> None:
    """The dataset file must be the one the stored run read (when it recorded its SHA-256)."""
    if like.dataset_sha256 is None or path is None:
        return
    found = file_sha256(path)
    if found != like.dataset_sha256:
        raise InvalidInputError(
            f"dataset file {path} is not the one run {like.run_id} used ({found[:19]}… here, "
            f"{like.dataset_sha256[:19]}… recorded): the workload would differ",
            hint="pass the same file with --dataset-path",
        )
