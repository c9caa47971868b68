"""``gpuledger bench --like RUN``: run again the workload of a stored run, on this machine or server.

"Compare two machines" only means something when both ran the same workload. ``--like`` loads the stored
run's spec (``RunInfo.config``) and makes the new run's spec from it: the spec the command line asks for,
with the stored workload wherever the command line did not give it (``bench.flags.FLAG_FIELDS`` says which
fields each workload flag sets).

* server runs (``openai``, ``ollama``): endpoint, dataset (name, file, lengths, range ratio), load
  (concurrency, Poisson rate and cap, or sweep), requests per stage or duration, warm-up, seed, SLOs,
  request timeout and telemetry interval. The server and the model are NOT copied — they are what
  differs between the two runs — so ``--base-url`` and ``--model`` are named again (or defaulted).
  A run on one server API can be repeated on the other: the endpoint of the same request shape
  (``chat`` stays ``chat``; ``completions`` and ``generate`` map to each other).
* torch runs (``gpuledger run``, ``bench --engine torch``): the model (a dummy architecture or the
  weights' path), batch size, input and output tokens, request count, warm-up, seed and SLOs. The
  device and dtype are not copied: ``auto`` picks what the new machine has.

Flags given on the command line win over the stored ones and are listed in the new run's
``config.like.overridden`` when they changed the workload. A dataset file must be byte-identical to the one
the run used when the run recorded its SHA-256 (runs made since gpuledger recorded it), else the new run
would not be the same workload: ``InvalidInputError`` (exit 4).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpuledger.bench.flags import FLAG_FIELDS, REPEAT_NEEDS
from gpuledger.bench.options import spec_of
from gpuledger.engines import EngineKind, either, engine_kind, engine_names
from gpuledger.errors import InvalidInputError, UsageError
from gpuledger.kinds.text.spec import ServerSpec
from gpuledger.records import BenchSpec, RunInfo
from gpuledger.records.spec import LikeOrigin
from gpuledger.workload.datasets import file_sha256


def stored_spec(run: RunInfo) -> BenchSpec:
    """The spec to repeat; ``InvalidInputError`` when the run was made by no engine ``--like`` repeats."""
    spec = run.config
    if type(spec) is BenchSpec:  # a run that records nothing of its workload
        raise InvalidInputError(
            f"run {run.id} does not record its workload: it cannot be repeated with --like"
        )
    name = spec.engine or run.engine
    if name not in engine_names(type(spec)):
        raise InvalidInputError(f"run {run.id} was made by engine {name!r}: --like cannot repeat it")
    doc = spec.model_dump(mode="json", by_alias=True)
    for path in REPEAT_NEEDS[type(spec)]:
        if _get(doc, path) in (None, MISSING):
            raise InvalidInputError(
                f"run {run.id} does not record its config.{path}: its workload cannot be repeated with --like"
            )
    return spec


def engine_of_repeat(run: RunInfo, engine: str, given: set[str]) -> EngineKind:
    """The engine of the repeat: the stored run's unless ``--engine`` names another of the same kind."""
    stored = stored_spec(run)
    if "engine" not in given:
        return engine_kind(stored.engine or run.engine)
    kind = engine_kind(engine)
    if kind.spec is not type(stored):
        same = either(engine_names(type(stored)))
        raise UsageError(
            f"run {run.id} used engine {stored.engine or run.engine}: a torch run's token-id workload and a "
            f"server's text workload are not the same; --like repeats it with --engine {same}"
        )
    return kind


MISSING = object()


def _get(doc: Any, path: str) -> Any:
    """The value at ``path`` (``dataset.output_len``); ``MISSING`` when a part above it is absent."""
    for part in path.split("."):
        if not isinstance(doc, dict) or part not in doc:
            return MISSING
        doc = doc[part]
    return doc


def _set(doc: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    for part in parents:
        child = doc.get(part)
        if not isinstance(child, dict):
            child = doc[part] = {}
        doc = child
    doc[last] = value


def repeat(run: RunInfo, asked: Mapping[str, Any], kind: EngineKind, given: set[str]) -> BenchSpec:
    """The spec of ``asked`` (the document the command line makes, ``bench.flags.flags_document``) with
    ``run``'s workload wherever the command line did not give it (``given``: the parameter names set
    there), and ``like`` saying where it came from and which given flags changed it."""
    stored = stored_spec(run)
    fields = FLAG_FIELDS[kind.spec]
    base = stored.model_dump(mode="json", by_alias=True)
    doc = dict(asked)
    from_command_line = {p for flag in given & set(fields) for p in fields[flag]}
    for flag, paths in fields.items():
        for path in paths:
            value = _get(base, path)
            if flag not in given and path not in from_command_line and value is not MISSING:
                _set(doc, path, value)
    if isinstance(stored, ServerSpec) and "endpoint" not in given:
        doc["endpoint"] = _same_shape(stored, kind)
    overridden = sorted(
        f for f in given & set(fields) if any(_get(base, p) != _get(doc, p) for p in fields[f])
    )
    doc["like"] = LikeOrigin(run_id=run.id, overridden=overridden).model_dump()
    return spec_of(kind, doc)


def _same_shape(stored: ServerSpec, kind: EngineKind) -> str | None:
    """The endpoint of ``kind`` that takes the stored endpoint's request shape (``chat``, ``prompt``)."""
    was = engine_kind(stored.engine) if stored.engine in engine_names() else None
    endpoint = stored.endpoint
    shape = was.endpoints.get(endpoint or "") if was is not None else None
    return kind.endpoint_for(shape) if shape else endpoint


def check_dataset(run: RunInfo, path: Path | None) -> None:
    """The dataset file must be the one the stored run read (when it recorded its SHA-256)."""
    sha = (run.workload or {}).get("sha256")
    if not isinstance(sha, str) or path is None:
        return
    found = file_sha256(path)
    if found != sha:
        raise InvalidInputError(
            f"dataset file {path} is not the one run {run.id} used ({found[:19]}… here, "
            f"{sha[:19]}… recorded): the workload would differ",
            hint="pass the same file with --dataset-path",
        )


__all__ = ["check_dataset", "engine_of_repeat", "repeat", "stored_spec"]
