"""The environment section: the software stack each run was measured on (fingerprint, server identity,
doctor status), with the differences between runs flagged."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuledger.records import DoctorRunRecord, RunInfo
from gpuledger.report import fmt
from gpuledger.report.model import Section, Table
from gpuledger.report.rundata import RunData
from gpuledger.report.sections.base import ACCELERATOR_VENDORS, aware, machine_of


def _flatten(prefix: str, value: Any, out: dict[str, str]) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
        for i, v in enumerate(value):
            _flatten(f"{prefix}[{i}]", v, out)
    else:
        out[prefix] = fmt.text(value)


# Which fingerprint/server keys answer the questions a reader asks first, in order.
_ENV_FIRST: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("GPU", ("gpus", "gpu", "gpu_names", "devices")),
    ("driver", ("driver", "driver_version", "nvidia_driver", "amdgpu_driver")),
    ("CUDA", ("cuda", "cuda_version", "cuda_driver_version")),
    ("ROCm", ("rocm", "rocm_version")),
    ("torch", ("torch", "torch_version")),
    ("OS", ("os", "distro")),
    ("kernel", ("kernel", "kernel_release")),
    ("python", ("python", "python_version")),
    ("fingerprint hash", ("hash",)),
)


_SERVER_FIRST = ("kind", "name", "engine", "server", "version", "engine_version")


def _env_value(env: Mapping[str, Any], keys: tuple[str, ...]) -> str | None:
    for k in keys:
        if k in env and env[k] not in (None, "", [], {}):
            value = env[k]
            if isinstance(value, list):
                return ", ".join(
                    fmt.text(v.get("name") or v) if isinstance(v, Mapping) else fmt.text(v) for v in value
                )
            if isinstance(value, Mapping):
                inner: dict[str, str] = {}
                _flatten("", value, inner)
                return "; ".join(f"{k2}={v2}" for k2, v2 in inner.items())
            return fmt.text(value)
    return None


def _doctor_status(info: RunInfo, doctor_runs: list[DoctorRunRecord]) -> str:
    machine = machine_of(info)
    if machine is None:
        return "unknown — the run does not record its machine"
    mine = [d for d in doctor_runs if d.machine == machine]
    if info.started_at is not None:
        mine = [d for d in mine if aware(d.created_at) <= aware(info.started_at)]
    if not mine:
        return f"no doctor run stored for {machine} before this run"
    last = max(mine, key=lambda d: aware(d.created_at))
    verdict = (
        "ok"
        if last.errors == 0 and last.warnings == 0
        else (f"{last.errors} error(s), {last.warnings} warning(s)")
    )
    return f"{verdict} (doctor {fmt.when(last.created_at)})"


def environment_section(runs: list[RunData], doctor_runs: list[DoctorRunRecord]) -> Section:
    missing = []
    per_run: list[dict[str, str]] = []
    for r in runs:
        env = r.info.environment.to_dict()
        rows: dict[str, str] = {}
        gpu_names = [d.name or d.device for d in r.info.telemetry_summary if d.vendor in ACCELERATOR_VENDORS]
        for label, keys in _ENV_FIRST:
            value = _env_value(env, keys)
            if label == "GPU" and value is None and gpu_names:
                value = ", ".join(gpu_names) + " (telemetry)"
            rows[label] = value if value is not None else fmt.MISSING
        server = r.info.server or {}
        engine = _env_value(server, _SERVER_FIRST[:4])
        version = _env_value(server, _SERVER_FIRST[4:])
        rows["engine"] = (
            " ".join(p for p in (engine or r.info.engine or "", version or "") if p) or fmt.MISSING
        )
        rows["doctor status"] = _doctor_status(r.info, doctor_runs)
        used = {k for _, keys in _ENV_FIRST for k in keys}
        rest: dict[str, str] = {}
        _flatten("", {k: v for k, v in env.items() if k not in used}, rest)
        for k, v in rest.items():
            rows[f"env: {k}"] = v
        server_rest: dict[str, str] = {}
        # The server's state over the window has its own section.
        _flatten("", {k: v for k, v in server.items() if k not in (*_SERVER_FIRST, "state")}, server_rest)
        for k, v in server_rest.items():
            rows[f"server: {k}"] = v
        if not env:
            missing.append(
                f"{r.ref.name}: no environment fingerprint stored (recorded by bench via gpuledger.lock)"
            )
        elif "error" in env:
            missing.append(f"{r.ref.name}: environment fingerprint failed: {fmt.text(env['error'])}")
        per_run.append(rows)
    items: list[str] = []
    for rows in per_run:
        items.extend(k for k in rows if k not in items)
    columns: tuple[str, ...] = ("item", *[r.ref.name for r in runs])
    if len(runs) > 1:
        columns = (*columns, "same?")
    table_rows = []
    for k in items:
        values = [rows.get(k, fmt.MISSING) for rows in per_run]
        row = (k, *values)
        if len(runs) > 1:
            row = (*row, "yes" if len(set(values)) == 1 else "differs")
        table_rows.append(row)
    return Section(
        key="environment",
        title="Environment",
        intro="The software stack each run was measured on, as fingerprinted at the start of the run, and "
        "the server's own identity. Differences between runs are flagged: a comparison is only as fair "
        "as its stacks are comparable.",
        tables=(
            Table(
                key="environment",
                title="Environment per run",
                columns=columns,
                rows=tuple(table_rows),
                provenance="RunInfo.environment (gpuledger.lock.fingerprint at run start), RunInfo.server "
                "(server endpoints such as /version), doctor status from the newest stored doctor run of "
                "the same machine before the run.",
                align_numbers=False,
            ),
        ),
        not_measured=tuple(missing),
    )
