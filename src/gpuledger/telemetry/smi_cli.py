"""CLI fallbacks when the vendor library is missing: ``nvidia-smi`` (csv), ``amd-smi metric --json``,
``rocm-smi --json``. Parsers are pure functions over the tools' text (tested against real captured
outputs); runners take an argument list and a timeout, and can be replaced (tests pass fixture text).

Tool output is hostile input. The default runner is the collectors' (``gpuledger.facts.runner``: own
process group killed on timeout, output capped, bytes decoded safely). A parser raises only
:class:`CommandError`, for output that cannot be read as a whole (not CSV/JSON, a header of another
format); one bad row is that GPU's reason (``GpuRow.error``) and one bad value is that metric's
(``GpuRow.missing``), never an exception. Opening a source runs its tool once, within
``timeout_s`` (:data:`CLI_PROBE_TIMEOUT_S` by default).
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from gpuledger.facts.runner import SubprocessRunner
from gpuledger.facts.tool_output import (
    ToolOutputError,
    bounded,
    csv_rows,
    excerpt,
    finite_float,
    load_json,
    small_int,
    too_many,
)
from gpuledger.records import Vendor
from gpuledger.telemetry.base import (
    MHZ,
    MIB,
    SECONDARY_DIE,
    BaseSource,
    DeviceInfo,
    Reading,
    SourceError,
)

Runner = Callable[[Sequence[str], float], str]
CLI_TIMEOUT_S = 10.0  # one reading during the window
CLI_PROBE_TIMEOUT_S = 5.0  # the one run that opens a source
CLI_MIN_INTERVAL_S = 1.0  # the tools refresh about once a second and take a while to start


class CommandError(SourceError):
    """A CLI could not be run, timed out, exited non-zero, or printed something we cannot parse."""


def run_command(args: Sequence[str], timeout: float) -> str:
    """Run ``args`` (never through a shell, in its own process group, output capped) and return
    stdout. Raises :class:`CommandError` saying how it failed."""
    argv = [str(a) for a in args]
    result = SubprocessRunner()(argv, timeout_s=timeout)
    if result.ok:
        return result.stdout
    if result.not_found:
        raise CommandError(f"{argv[0]}: not found on PATH")
    if result.note is not None:
        raise CommandError(f"{argv[0]}: not run: {result.note}")
    if result.timed_out:
        raise CommandError(f"{argv[0]}: timed out after {timeout:g} s (killed with its process group)")
    if result.error is not None:
        raise CommandError(f"{argv[0]}: {result.error}")
    said = result.output_lines(1)
    raise CommandError(f"{argv[0]} exited with {result.rc}" + (f": {said[0][:200]}" if said else ""))


@dataclass(slots=True)
class GpuRow:
    """One GPU in one CLI output: identity, metric values in base units, and what was N/A."""

    vendor: Vendor
    index: int
    name: str = ""
    uuid: str | None = None
    bus_id: str | None = None
    values: dict[str, float] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    error: str | None = None  # the tool's line for this GPU could not be read at all

    def device(self) -> DeviceInfo:
        return DeviceInfo(key=f"{self.vendor}:{self.index}", vendor=self.vendor, index=self.index,
                          name=self.name or f"{self.vendor.upper()} GPU {self.index}", uuid=self.uuid)


def _finite(text: str) -> float | None:
    return finite_float(text)


def _value_reason(tool: str, what: str, raw: object, value: float) -> str | None:
    """Why a parsed number is not a plausible reading (negative), else None."""
    if value < 0 and not what.startswith("temperature"):
        shown = excerpt(raw, 40) if isinstance(raw, str) else f"{value:g}"
        return f"{tool} {what}: {shown} is negative"
    return None


# --------------------------------------------------------------------------- nvidia-smi

# query field -> (metric, unit nvidia-smi uses, factor to the base unit)
NVIDIA_FIELDS: dict[str, tuple[str, str, float]] = {
    "utilization.gpu": ("util_ratio", "%", 0.01),
    "utilization.memory": ("mem_util_ratio", "%", 0.01),
    "memory.used": ("memory_used_bytes", "MiB", MIB),
    "memory.total": ("memory_total_bytes", "MiB", MIB),
    "power.draw": ("power_w", "W", 1.0),
    "temperature.gpu": ("temperature_c", "", 1.0),
    "clocks.current.sm": ("sm_clock_hz", "MHz", MHZ),
    "clocks.sm": ("sm_clock_hz", "MHz", MHZ),
    "clocks.current.memory": ("mem_clock_hz", "MHz", MHZ),
    "clocks.mem": ("mem_clock_hz", "MHz", MHZ),
    "power.limit": ("power_limit_w", "W", 1.0),
    "enforced.power.limit": ("power_limit_w", "W", 1.0),
}
_NV_IDENTITY = {"index", "name", "gpu_name", "uuid", "gpu_uuid", "pci.bus_id", "gpu_bus_id"}
# What gpuledger asks for (every field is in `nvidia-smi --help-query-gpu` since driver 4xx).
NVIDIA_QUERY = ("index", "uuid", "name", "pci.bus_id", "utilization.gpu", "utilization.memory",
                "memory.used", "memory.total", "power.draw", "temperature.gpu", "clocks.current.sm",
                "clocks.current.memory", "enforced.power.limit")


def nvidia_smi_args() -> list[str]:
    return ["nvidia-smi", f"--query-gpu={','.join(NVIDIA_QUERY)}", "--format=csv,noheader,nounits"]


def _not_available(text: str) -> bool:
    t = text.strip()
    return t in ("N/A", "") or (t.startswith("[") and t.endswith("]"))


def parse_nvidia_smi_csv(text: str, fields: Sequence[str] | None = None) -> list[GpuRow]:
    """Parse ``nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]``.

    With a header row (``fields`` None) the field names and units come from it
    (``memory.used [MiB]``); with ``noheader`` pass the queried ``fields``. Values may carry their
    unit (``16280 MiB``) or not (``nounits``); ``[N/A]``/``[Not Supported]`` become ``missing``, and
    so does a value that is not a number in the expected unit (with the reason). A row with the
    wrong number of values is kept with its ``error``. :class:`CommandError` only when the text is
    not CSV at all or its header is not a ``--query-gpu`` header."""
    try:
        rows = csv_rows(text, "nvidia-smi")
    except ToolOutputError as exc:
        raise CommandError(str(exc)) from None
    if not rows:
        return []
    units: dict[str, str] = {}
    if fields is None:
        header, rows = rows[0], rows[1:]
        names = []
        for cell in header:
            m = re.fullmatch(r"\s*([\w.]{1,64})\s*(?:\[(.{1,16})\])?\s*", cell)
            if not m:
                raise CommandError(f"nvidia-smi: unexpected csv header cell {excerpt(cell)}")
            names.append(m.group(1))
            if m.group(2):
                units[m.group(1)] = m.group(2)
            if m.group(1) in NVIDIA_FIELDS and m.group(2) and m.group(2) != NVIDIA_FIELDS[m.group(1)][1]:
                raise CommandError(f"nvidia-smi: {m.group(1)} in {m.group(2)!r}, "
                                   f"expected {NVIDIA_FIELDS[m.group(1)][1]!r}")
    else:
        names = list(fields)
    out = []
    for pos, cells in enumerate(rows):
        row = GpuRow(vendor="nvidia", index=pos)
        if len(cells) != len(names):
            if names and names[0] == "index" and (idx := small_int(cells[0], max_digits=4)) is not None:
                row.index = idx
            row.error = (f"nvidia-smi: row {pos + 1} has {len(cells)} values for {len(names)} fields: "
                         f"{excerpt(','.join(cells))}")
            out.append(row)
            continue
        for name, raw in zip(names, cells, strict=True):
            raw = raw.strip()
            if name == "index":
                idx = small_int(raw, max_digits=4)
                if idx is not None:
                    row.index = idx
            elif name in ("name", "gpu_name"):
                row.name = bounded(raw) or ""
            elif name in ("uuid", "gpu_uuid"):
                row.uuid = None if _not_available(raw) else bounded(raw)
            elif name in ("pci.bus_id", "gpu_bus_id"):
                row.bus_id = None if _not_available(raw) else bounded(raw)
            elif name in NVIDIA_FIELDS:
                metric, unit, factor = NVIDIA_FIELDS[name]
                if _not_available(raw):
                    row.missing[metric] = f"nvidia-smi {name}: {bounded(raw.strip('[]'), 60) or 'empty'}"
                    continue
                number, _, shown = raw.partition(" ")
                value = _finite(number)
                if shown and shown != unit:
                    row.missing[metric] = (f"nvidia-smi {name}: value {excerpt(raw, 40)}, "
                                           f"expected unit {unit!r}")
                elif value is None:
                    row.missing[metric] = f"nvidia-smi {name}: {excerpt(raw, 40)} is not a number"
                elif (why := _value_reason("nvidia-smi", name, raw, value)) is not None:
                    row.missing[metric] = why
                else:
                    row.values[metric] = value * factor
        out.append(row)
    return out


# --------------------------------------------------------------------------- amd-smi

AmdSmiKind = Literal["metric", "static", "topology", "unknown"]

_UNIT_FACTORS: dict[str, float] = {
    "%": 0.01, "W": 1.0, "mW": 1e-3, "uW": 1e-6, "µW": 1e-6, "J": 1.0, "mJ": 1e-3, "uJ": 1e-6,
    "µJ": 1e-6, "kJ": 1e3, "C": 1.0, "°C": 1.0, "mC": 1e-3, "Hz": 1.0, "kHz": 1e3, "MHz": MHZ,
    "GHz": 1e9, "B": 1.0, "KB": 1024.0, "MB": float(MIB), "GB": 1024.0**3,
    # amd-smi prints memory in "MB" meaning MiB (bytes // 2**20): 8176 "MB" on an 8 GiB RX 6600.
}


def load_amd_smi_json(text: str) -> list[dict[str, Any]]:
    """The per-GPU objects of any ``amd-smi ... --json`` output: a bare list (amd-smi 24.x) or
    ``{"gpu_data": [...]}`` (ROCm 6.4+), or one object."""
    try:
        doc = load_json(text, "amd-smi")
        if isinstance(doc, dict) and isinstance(doc.get("gpu_data"), list):
            doc = doc["gpu_data"]
        if isinstance(doc, dict):
            doc = [doc]
        if not isinstance(doc, list) or not all(isinstance(d, dict) for d in doc):
            raise CommandError("amd-smi: expected a list of GPU objects")
        too_many(len(doc), "amd-smi")
    except ToolOutputError as exc:
        raise CommandError(str(exc)) from None
    return doc


def classify_amd_smi(items: Sequence[Mapping[str, Any]]) -> AmdSmiKind:
    """Which ``amd-smi`` sub-command produced these objects."""
    keys = set().union(*(set(i) for i in items)) if items else set()
    if keys & {"usage", "power", "mem_usage", "energy", "temperature", "clock"}:
        return "metric"
    if keys & {"asic", "vbios", "bus", "limit", "board"}:
        return "static"
    if "links" in keys:
        return "topology"
    return "unknown"


def _shown(obj: object) -> str:
    """A tool's non-numeric value as a short text for a reason ("N/A", or an excerpt of garbage)."""
    if isinstance(obj, str):
        return obj if len(obj) <= 40 else excerpt(obj, 40)
    if isinstance(obj, int) and not isinstance(obj, bool) and abs(obj) >= 10**18:
        return "a number out of range"
    if isinstance(obj, bool | int | float) or obj is None:
        return str(obj)
    return f"a JSON {type(obj).__name__}, not a value"


def _value_unit(obj: object) -> tuple[float, str] | str:
    """``{"value": 6, "unit": "W"}`` / bare number -> (value, unit); "N/A" and the like -> the text."""
    if isinstance(obj, dict) and "value" in obj:
        inner = obj["value"]
        unit = obj.get("unit", "")
        if (v := finite_float(inner)) is not None:
            return v, unit if isinstance(unit, str) else repr(unit)
        return _shown(inner)
    if (v := finite_float(obj)) is not None:
        return v, ""
    return "missing" if obj is None else _shown(obj)


def _to_base(value: float, unit: str, default_unit: str, what: str) -> float | str:
    """``value`` in the base unit, or the reason it cannot be (an unknown unit, a negative reading)."""
    u = unit or default_unit
    if u not in _UNIT_FACTORS:
        return f"amd-smi {what}: unknown unit {excerpt(u, 20)}"
    if (why := _value_reason("amd-smi", what, value, value)) is not None:
        return why
    return value * _UNIT_FACTORS[u]


def _dig(obj: Mapping[str, Any], *path: str) -> object:
    cur: object = obj
    for key in path:
        if not isinstance(cur, Mapping) or key not in cur:
            return None
        cur = cur[key]
    return cur


# metric -> candidate paths in an `amd-smi metric --json` GPU object, and the unit when none is given
_AMD_SMI_PATHS: list[tuple[str, list[tuple[str, ...]], str]] = [
    ("util_ratio", [("usage", "gfx_activity")], "%"),
    ("mem_util_ratio", [("usage", "umc_activity")], "%"),
    ("power_w", [("power", "socket_power"), ("power", "current_socket_power"),
                 ("power", "average_socket_power")], "W"),
    ("energy_j", [("energy", "total_energy_consumption")], "J"),
    ("temperature_c", [("temperature", "edge")], "C"),
    ("temperature_hotspot_c", [("temperature", "hotspot"), ("temperature", "junction")], "C"),
    ("sm_clock_hz", [("clock", "gfx_0", "clk"), ("clock", "gfx", "clk")], "MHz"),
    ("mem_clock_hz", [("clock", "mem_0", "clk"), ("clock", "mem", "clk")], "MHz"),
    ("memory_used_bytes", [("mem_usage", "used_vram")], "MB"),
    ("memory_total_bytes", [("mem_usage", "total_vram")], "MB"),
]


def parse_amd_smi_metric(text: str) -> list[GpuRow]:
    """Parse ``amd-smi metric --json`` (either shape; values as ``{"value","unit"}`` or "N/A")."""
    items = load_amd_smi_json(text)
    kind = classify_amd_smi(items)
    if kind != "metric":
        raise CommandError(f"amd-smi: expected `amd-smi metric` output, got {kind} output")
    out = []
    for pos, item in enumerate(items):
        idx = small_int(item.get("gpu", pos), max_digits=4)
        row = GpuRow(vendor="amd", index=pos if idx is None else idx)
        for metric, paths, default_unit in _AMD_SMI_PATHS:
            seen: str | None = None
            for path in paths:
                got = _value_unit(_dig(item, *path))
                if isinstance(got, tuple):
                    value = _to_base(got[0], got[1], default_unit, ".".join(path))
                    if isinstance(value, str):
                        seen = seen or value
                        continue
                    if metric == "power_w" and value == 0:
                        seen = SECONDARY_DIE
                        continue
                    row.values[metric] = value
                    break
                if got != "missing" and seen is None:
                    seen = f"amd-smi {'.'.join(path)}: {got}"
            if metric not in row.values:
                row.missing[metric] = seen or "amd-smi: not in output"
        out.append(row)
    return out


@dataclass(slots=True)
class AmdStatic:
    """The identity part of ``amd-smi static --json`` for one GPU."""

    index: int
    name: str
    bdf: str | None
    device_id: str | None
    vram_total_bytes: float | None
    power_limit_w: float | None


def parse_amd_smi_static(text: str) -> list[AmdStatic]:
    items = load_amd_smi_json(text)
    kind = classify_amd_smi(items)
    if kind != "static":
        raise CommandError(f"amd-smi: expected `amd-smi static` output, got {kind} output")
    out = []
    for pos, item in enumerate(items):
        idx = small_int(item.get("gpu", pos), max_digits=4)
        name = _dig(item, "asic", "market_name")
        bdf = _dig(item, "bus", "bdf")
        dev_id = _dig(item, "asic", "device_id")
        vram = _value_unit(_dig(item, "vram", "size"))
        limit: tuple[float, str] | str = "missing"
        for path in (("limit", "socket_power"), ("limit", "max_power"), ("limit", "power")):
            limit = _value_unit(_dig(item, *path))
            if isinstance(limit, tuple):
                break
        vram_b = _to_base(vram[0], vram[1], "MB", "vram.size") if isinstance(vram, tuple) else None
        limit_w = _to_base(limit[0], limit[1], "W", "limit") if isinstance(limit, tuple) else None
        label = name if isinstance(name, str) and name not in ("", "N/A") else f"AMD GPU {pos}"
        out.append(AmdStatic(
            index=pos if idx is None else idx,
            name=bounded(label) or label,
            bdf=bounded(bdf) if isinstance(bdf, str) and bdf != "N/A" else None,
            device_id=bounded(dev_id) if isinstance(dev_id, str) and dev_id != "N/A" else None,
            vram_total_bytes=vram_b if isinstance(vram_b, float) else None,
            power_limit_w=limit_w if isinstance(limit_w, float) else None,
        ))
    return out


# --------------------------------------------------------------------------- rocm-smi

ROCM_SMI_ARGS = ["rocm-smi", "--showuse", "--showmemuse", "--showpower", "--showmaxpower", "--showtemp",
                 "--showclocks", "--showmeminfo", "vram", "--showenergycounter", "--showproductname",
                 "--showuniqueid", "--showbus", "--json"]

# metric -> (keys in order of preference, factor). Key names as rocm-smi 4.3 .. 6.1 print them.
_ROCM_KEYS: list[tuple[str, tuple[str, ...], float]] = [
    ("util_ratio", ("GPU use (%)",), 0.01),
    # "GPU memory use (%)" (before ROCm 6.1) is the memory controller's busy percent, renamed
    # "GPU Memory Read/Write Activity (%)" in 6.1; "GPU Memory Allocated (VRAM%)" is occupancy.
    ("mem_util_ratio", ("GPU Memory Read/Write Activity (%)", "GPU memory use (%)"), 0.01),
    ("power_w", ("Current Socket Graphics Package Power (W)", "Average Graphics Package Power (W)"), 1.0),
    ("power_limit_w", ("Max Graphics Package Power (W)",), 1.0),
    ("temperature_c", ("Temperature (Sensor edge) (C)",), 1.0),
    ("temperature_hotspot_c", ("Temperature (Sensor junction) (C)",), 1.0),
    ("sm_clock_hz", ("sclk clock speed:",), MHZ),
    ("mem_clock_hz", ("mclk clock speed:",), MHZ),
    ("memory_used_bytes", ("VRAM Total Used Memory (B)",), 1.0),
    ("memory_total_bytes", ("VRAM Total Memory (B)",), 1.0),
    ("energy_j", ("Accumulated Energy (uJ)",), 1e-6),
]
_CLOCK = re.compile(r"^\(?\s*([0-9.]+)\s*Mhz\s*\)?$", re.IGNORECASE)


def _rocm_name(card: Mapping[str, Any], n: int) -> str:
    for key in ("Device Name", "Card Series", "Card series"):
        v = card.get(key)
        if isinstance(v, str) and v and v != "N/A" and not re.fullmatch(r"0x[0-9a-fA-F]+", v):
            return bounded(v) or v[:1]
    return f"AMD GPU {n}"


def parse_rocm_smi_json(text: str) -> list[GpuRow]:
    """Parse ``rocm-smi ... --json``: ``{"card0": {...}, "system": {...}}`` with string values."""
    try:
        doc = load_json(text, "rocm-smi")
        if not isinstance(doc, dict):
            raise CommandError("rocm-smi: expected a JSON object keyed by card")
        cards = sorted((k for k in doc if re.fullmatch(r"card\d{1,4}", k)), key=lambda k: int(k[4:]))
        too_many(len(cards), "rocm-smi")
    except ToolOutputError as exc:
        raise CommandError(str(exc)) from None
    out = []
    for key in cards:
        card = doc[key]
        if not isinstance(card, dict):
            continue
        n = int(key[4:])
        uuid = card.get("Unique ID")
        bus = card.get("PCI Bus")
        row = GpuRow(vendor="amd", index=n, name=_rocm_name(card, n),
                     uuid=bounded(uuid) if isinstance(uuid, str) and uuid != "N/A" else None,
                     bus_id=bounded(bus) if isinstance(bus, str) and bus != "N/A" else None)
        for metric, keys, factor in _ROCM_KEYS:
            present = [k for k in keys if k in card]
            if not present:
                continue
            for k in present:
                shown = card[k]
                raw = shown.strip() if isinstance(shown, str) else _shown(shown)
                m = _CLOCK.match(raw) if metric.endswith("clock_hz") and len(raw) <= 64 else None
                value = _finite(m.group(1)) if m else _finite(raw)
                if value is None:
                    row.missing.setdefault(metric, f"rocm-smi {k}: {_shown(raw)}")
                    continue
                if (why := _value_reason("rocm-smi", k, raw, value)) is not None:
                    row.missing.setdefault(metric, why)
                    continue
                if metric == "power_w" and value == 0:
                    row.missing.setdefault(metric, SECONDARY_DIE)
                    continue
                row.values[metric] = value * factor
                row.missing.pop(metric, None)
                break
        out.append(row)
    return out


# --------------------------------------------------------------------------- CLI sources


class _CliSource(BaseSource):
    """A vendor CLI polled once a second; ``parse`` turns its stdout into rows.

    Opening runs the tool once, within ``timeout_s``; a tool that cannot be run, hangs, prints too much
    or prints something unreadable leaves the source unavailable with that reason. A GPU whose row is
    unreadable is not measured (its reason is kept); during the window an unreadable row is a reason
    for that GPU's metrics, and a failed run of the tool drops the source (``SourceError``)."""

    def __init__(self, name: str, vendor: Vendor, provides: frozenset[str], args: list[str],
                 runner: Runner | None, timeout_s: float = CLI_PROBE_TIMEOUT_S) -> None:
        super().__init__(name, vendor, provides, min_interval_s=CLI_MIN_INTERVAL_S)
        self.args = args
        self._by_index: dict[int, DeviceInfo] = {}
        self._runner: Runner = runner or run_command
        self._probe_timeout_s = timeout_s
        if runner is None and shutil.which(args[0]) is None:
            self.reason = f"{args[0]}: not found on PATH"
            return
        if timeout_s < 0.05:
            self.reason = f"{args[0]}: not run: the time allowed for opening telemetry was spent"
            return
        try:
            rows = self._rows(timeout_s)
        except CommandError as exc:
            self.reason = exc.message
            return
        bad: list[str] = []
        for row in rows:
            if row.error is None and row.index in self._by_index:
                row.error = f"{args[0]}: GPU index {row.index} listed twice"
            if row.error is not None:
                bad.append(row.error)
                continue
            dev = row.device()
            self._by_index[row.index] = dev
            self._devices.append(dev)
        if not self._devices:
            self.reason = bad[0] if bad else f"{args[0]}: lists no GPU"
            return
        if bad:
            more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
            self.reason = f"{len(bad)} of {len(rows)} GPUs not measured: {bad[0]}{more}"
        self.available = True

    def parse(self, text: str) -> list[GpuRow]:
        """Rows from the tool's stdout (each subclass binds its parser)."""
        return self._parser(text)

    _parser: Callable[[str], list[GpuRow]]

    def _rows(self, timeout_s: float | None = None) -> list[GpuRow]:
        return self.parse(self._runner(self.args, CLI_TIMEOUT_S if timeout_s is None else timeout_s))

    def read(self, now: float) -> list[Reading]:
        out = []
        garbled: dict[str, str] = {}
        for row in self._rows():
            dev = self._by_index.get(row.index)
            if dev is None:
                continue  # appeared after the window started: not part of this window
            if row.error is not None:
                garbled.setdefault(dev.key, row.error)
                for metric in sorted(self.provides):
                    self._mark_unavailable(dev.key, metric, row.error, permanent=False)
                continue
            for metric, value in row.values.items():
                out.append(Reading(now, dev, metric, value, self.name))
            for metric, why in row.missing.items():
                self._mark_unavailable(dev.key, metric, why, permanent=False)
        seen = {r.device.key for r in out} | set(garbled)
        for dev in self._devices:
            if dev.key not in seen and dev.key not in self._device_errors:
                self._device_errors[dev.key] = f"{self.args[0]} stopped listing this GPU"
        return out


NVIDIA_SMI_METRICS = frozenset(m for m, _, _ in NVIDIA_FIELDS.values())
AMD_SMI_METRICS = frozenset(m for m, _, _ in _AMD_SMI_PATHS) | {"power_limit_w"}
ROCM_SMI_METRICS = frozenset(m for m, _, _ in _ROCM_KEYS)


def _nvidia_rows(text: str) -> list[GpuRow]:
    return parse_nvidia_smi_csv(text, NVIDIA_QUERY)


class NvidiaSmiSource(_CliSource):
    _parser = staticmethod(_nvidia_rows)

    def __init__(self, runner: Runner | None = None, *, timeout_s: float = CLI_PROBE_TIMEOUT_S) -> None:
        super().__init__("nvidia-smi", "nvidia", NVIDIA_SMI_METRICS, nvidia_smi_args(), runner, timeout_s)


class AmdSmiCliSource(_CliSource):
    """``amd-smi metric --json`` each tick; ``amd-smi static --json`` once for names and the power cap."""

    static_args = ["amd-smi", "static", "--json"]

    def __init__(self, runner: Runner | None = None, *, timeout_s: float = CLI_PROBE_TIMEOUT_S) -> None:
        self._static: dict[int, AmdStatic] | None = None
        self._probe_timeout_s = timeout_s
        super().__init__("amd-smi", "amd", AMD_SMI_METRICS, ["amd-smi", "metric", "--json"], runner,
                         timeout_s)

    def parse(self, text: str) -> list[GpuRow]:
        rows = parse_amd_smi_metric(text)
        if self._static is None:  # first call: learn names and limits once
            self._static = {}
            try:
                static_text = self._runner(self.static_args, min(CLI_TIMEOUT_S, self._probe_timeout_s))
                self._static = {s.index: s for s in parse_amd_smi_static(static_text)}
            except CommandError as exc:
                self.reason = f"GPU names unknown: {exc.message}"
        for row in rows:
            st = self._static.get(row.index)
            if st is None:
                continue
            row.name, row.bus_id = st.name, st.bdf
            if st.power_limit_w is not None:
                row.values.setdefault("power_limit_w", st.power_limit_w)
            if "memory_total_bytes" not in row.values and st.vram_total_bytes is not None:
                row.values["memory_total_bytes"] = st.vram_total_bytes
        return rows


class RocmSmiSource(_CliSource):
    _parser = staticmethod(parse_rocm_smi_json)

    def __init__(self, runner: Runner | None = None, *, timeout_s: float = CLI_PROBE_TIMEOUT_S) -> None:
        super().__init__("rocm-smi", "amd", ROCM_SMI_METRICS, list(ROCM_SMI_ARGS), runner, timeout_s)
