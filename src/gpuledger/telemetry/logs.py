"""Power / utilisation logs taken on the server's node, read after the run (``gpuledger telemetry import``):

- **nvidia-smi**: ``nvidia-smi --query-gpu=timestamp,index,power.draw,utilization.gpu,memory.used
  --format=csv -lms 100`` — a header such as ``timestamp, index, power.draw [W], utilization.gpu [%],
  memory.used [MiB]``, cells with their unit (``312.45 W``, ``87 %``, ``40123 MiB``; ``nounits`` drops it),
  timestamps ``2026/11/30 14:02:11.123`` in the node's local time (read in this machine's zone: set ``TZ``
  or pass ``--clock-offset`` when they differ), ``[N/A]`` / ``[Not Supported]`` for a missing value.
  ``power.draw.instant`` / ``power.draw.average``, ``uuid`` and ``name`` columns are read too.
- **amd-smi**: ``amd-smi metric --power --usage --mem-usage --watch 1 --csv`` (CSV columns ``timestamp``
  (epoch seconds, as amd-smi's watch mode writes it, or ISO 8601), ``gpu``, ``socket_power`` (W),
  ``gfx_activity`` (%), ``used_vram`` (MB = MiB), ``total_energy_consumption`` (J)); bare numbers, ``N/A``;
  the "'CTRL' + 'C' to stop" line and the header repeated by each tick are skipped.
- **dcgm**: ``dcgmi dmon -e 155,156,203,252 -d 100`` with each line prefixed by the wall clock (dmon prints
  none: ``… | ts '%.s'`` from moreutils, or ``while read -r l; do echo "$(date +%s.%N) $l"; done``): the
  ``#Entity POWER TOTEC GPUTL FBUSD`` header, the units line, rows ``GPU 0 120.5 …`` — POWER (W), TOTEC
  (mJ), GPUTL (%), FBUSD (MiB), also FBTTL, MCUTL, TMPTR, SMCLK.

A row that cannot be read (wrong number of cells, a timestamp or number that does not parse) is counted
and the first one reported; a file without a power column is an InvalidInputError (exit 4).
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from gpuledger.errors import InvalidInputError
from gpuledger.telemetry.base import MAX_DEVICES, PHYSICAL_MAX, UNITS, Vendor, unit_factor

LogFormat = Literal["nvidia-smi", "amd-smi", "dcgm"]
FORMATS: tuple[LogFormat, ...] = ("nvidia-smi", "amd-smi", "dcgm")
MAX_LINE = 64 * 1024

# nvidia-smi query field -> (our metric, scale); power: the first present wins.
_NVIDIA: dict[str, tuple[str, float]] = {
    "power.draw": ("power_w", 1.0), "power.draw.instant": ("power_w", 1.0),
    "power.draw.average": ("power_w", 1.0), "utilization.gpu": ("util_ratio", 0.01),
    "utilization.memory": ("mem_util_ratio", 0.01), "memory.used": ("memory_used_bytes", float(MIB)),
    "memory.total": ("memory_total_bytes", float(MIB)), "temperature.gpu": ("temperature_c", 1.0),
    "clocks.sm": ("sm_clock_hz", MHZ), "clocks.current.sm": ("sm_clock_hz", MHZ),
    "power.limit": ("power_limit_w", 1.0),
}
_AMD: dict[str, tuple[str, float]] = {
    "socket_power": ("power_w", 1.0), "current_socket_power": ("power_w", 1.0),
    "average_socket_power": ("power_w", 1.0), "power_usage": ("power_w", 1.0),
    "gfx_activity": ("util_ratio", 0.01), "gfx_usage": ("util_ratio", 0.01),
    "umc_activity": ("mem_util_ratio", 0.01), "used_vram": ("memory_used_bytes", float(MIB)),
    "total_vram": ("memory_total_bytes", float(MIB)), "total_energy_consumption": ("energy_j", 1.0),
    "edge": ("temperature_c", 1.0), "hotspot": ("temperature_hotspot_c", 1.0),
}
_DCGM: dict[str, tuple[str, float]] = {
    "POWER": ("power_w", 1.0), "TOTEC": ("energy_j", 1e-3), "GPUTL": ("util_ratio", 0.01),
    "MCUTL": ("mem_util_ratio", 0.01), "FBUSD": ("memory_used_bytes", float(MIB)),
    "FBTTL": ("memory_total_bytes", float(MIB)), "TMPTR": ("temperature_c", 1.0),
    "SMCLK": ("sm_clock_hz", MHZ),
}
_NA = {"", "n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]", "na", "-", "nan"}
_NUMBER = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z%]*)\s*$")
_EPOCH = re.compile(r"^\d{9,11}(?:\.\d+)?$")
_EPOCH_MS = re.compile(r"^\d{12,14}(?:\.\d+)?$")


@dataclass(slots=True)
class ParsedLog:
    """What a log holds: readings ``(wall time, GPU index, metric, value)`` and what was left out."""

    format: LogFormat
    vendor: Vendor
    readings: list[tuple[float, int, str, float]] = field(default_factory=list)
    names: dict[int, str] = field(default_factory=dict)
    uuids: dict[int, str] = field(default_factory=dict)
    rows: int = 0
    malformed: int = 0
    first_malformed: str | None = None
    columns: list[str] = field(default_factory=list)

    def bad(self, line_no: int, why: str) -> None:
        self.malformed += 1
        if self.first_malformed is None:
            self.first_malformed = f"line {line_no}: {why}"[:300]

    @property
    def gpus(self) -> list[int]:
        return sorted({g for _, g, _, _ in self.readings})


def parse_wall(text: str) -> float:
    """Seconds since the epoch from an epoch number (s or ms), an ISO 8601 time, or nvidia-smi's
    ``YYYY/MM/DD HH:MM:SS.mmm``; a time without a zone is local. ValueError otherwise."""
    raw = text.strip()
    if _EPOCH.match(raw):
        return float(raw)
    if _EPOCH_MS.match(raw):
        return float(raw) / 1000.0
    for fmt in ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S"):
        try:
            return datetime.strptime(raw, fmt).timestamp()
        except ValueError:
            continue
    when = datetime.fromisoformat(raw)
    return when.timestamp()


def _number(cell: str, unit: str | None) -> float | None:
    """A cell's value (None: not available); ValueError for text that is not a reading in ``unit``."""
    text = cell.strip()
    if text.lower() in _NA:
        return None
    m = _NUMBER.match(text)
    if not m:
        raise ValueError(f"{text[:40]!r} is not a number")
    if m.group(2) and unit and m.group(2).lower() != unit.lower():
        raise ValueError(f"{text[:40]!r} is not in {unit}")
    value = float(m.group(1))
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{text[:40]!r} is not a reading")
    return value


def _lines(data: str) -> Iterator[tuple[int, str]]:
    for n, line in enumerate(data.splitlines(), 1):
        yield n, line[:MAX_LINE]


def _no_power(fmt: str, columns: Iterable[str], hint: str) -> InvalidInputError:
    shown = ", ".join(list(columns)[:12]) or "none"
    return InvalidInputError(f"the {fmt} log has no power column (columns: {shown})", hint=hint)


def _csv_rows(data: str) -> Iterator[tuple[int, list[str]]]:
    for n, line in _lines(data):
        if not line.strip() or "\x00" in line:
            if line.strip():
                yield n, ["\x00"]
            continue
        yield n, next(csv.reader([line], skipinitialspace=True))


def parse_nvidia_smi(data: str) -> ParsedLog:
    log = ParsedLog("nvidia-smi", "nvidia")
    header: list[str] | None = None
    cols: dict[int, tuple[str, str | None]] = {}
    ts_col = idx_col = uuid_col = name_col = -1
    for n, cells in _csv_rows(data):
        if header is None:
            header = [c.strip() for c in cells]
            for i, h in enumerate(header):
                m = re.match(r"^([a-z0-9_.]+)\s*(?:\[([^\]]*)\])?$", h.strip().lower())
                key, unit = (m.group(1), m.group(2)) if m else (h.lower(), None)
                if key == "timestamp":
                    ts_col = i
                elif key == "index":
                    idx_col = i
                elif key in ("uuid", "gpu_uuid"):
                    uuid_col = i
                elif key in ("name", "gpu_name"):
                    name_col = i
                elif key in _NVIDIA:
                    cols[i] = (key, unit)
            log.columns = header
            if not any(_NVIDIA[k][0] == "power_w" for k, _ in cols.values()):
                raise _no_power("nvidia-smi", header, "query power.draw: nvidia-smi --query-gpu=timestamp,"
                                "index,power.draw,utilization.gpu,memory.used --format=csv -lms 100")
            if ts_col < 0:
                raise InvalidInputError("the nvidia-smi log has no timestamp column",
                                        hint="put timestamp first in --query-gpu")
            if idx_col < 0 and uuid_col < 0:
                raise InvalidInputError("the nvidia-smi log has neither an index nor a uuid column: its GPUs "
                                        "cannot be told apart", hint="add index to --query-gpu")
            continue
        if [c.strip() for c in cells] == header:
            continue  # a header repeated (logs appended to one file)
        log.rows += 1
        if len(cells) != len(header):
            log.bad(n, f"{len(cells)} cells, the header has {len(header)}")
            continue
        try:
            t = parse_wall(cells[ts_col])
            uuid = cells[uuid_col].strip() if uuid_col >= 0 else None
            if idx_col >= 0:
                gpu = _gpu_index(cells[idx_col])
            else:
                gpu = _index_for(log, uuid or "")
            values = [(_NVIDIA[key], _number(cells[i], unit)) for i, (key, unit) in cols.items()]
        except ValueError as exc:
            log.bad(n, str(exc))
            continue
        if uuid:
            log.uuids.setdefault(gpu, uuid)
        if name_col >= 0 and cells[name_col].strip():
            log.names.setdefault(gpu, cells[name_col].strip()[:200])
        seen: set[str] = set()
        for (metric, scale), value in values:
            if value is not None and metric not in seen:
                seen.add(metric)
                log.readings.append((t, gpu, metric, value * scale))
    if header is None:
        raise InvalidInputError("the nvidia-smi log is empty")
    return log


def _gpu_index(cell: str) -> int:
    text = cell.strip()
    if not text.isdigit() or len(text) > 6:
        raise ValueError(f"GPU index {text[:20]!r} is not a small whole number")
    return int(text)


def _index_for(log: ParsedLog, uuid: str) -> int:
    for index, known in log.uuids.items():
        if known == uuid:
            return index
    if not uuid:
        raise ValueError("no uuid")
    return len(log.uuids)


def parse_amd_smi(data: str) -> ParsedLog:
    log = ParsedLog("amd-smi", "amd")
    header: list[str] | None = None
    cols: dict[int, str] = {}
    ts_col = gpu_col = -1
    for n, cells in _csv_rows(data):
        keys = [c.strip().lower() for c in cells]
        if header is None:
            if "gpu" not in keys:
                continue  # amd-smi's watch banner ("'CTRL' + 'C' to stop watching output:")
            header = keys
            ts_col = keys.index("timestamp") if "timestamp" in keys else -1
            gpu_col = keys.index("gpu")
            cols = {i: k for i, k in enumerate(keys) if k in _AMD}
            log.columns = header
            if not any(_AMD[k][0] == "power_w" for k in cols.values()):
                raise _no_power("amd-smi", header,
                                "amd-smi metric --power --usage --mem-usage --watch 1 --csv")
            if ts_col < 0:
                raise InvalidInputError("the amd-smi log has no timestamp column",
                                        hint="run amd-smi metric with --watch (it adds one)")
            continue
        if keys == header:
            continue  # each watch tick repeats the header
        log.rows += 1
        if len(cells) != len(header):
            log.bad(n, f"{len(cells)} cells, the header has {len(header)}")
            continue
        try:
            t = parse_wall(cells[ts_col])
            gpu = _gpu_index(cells[gpu_col])
            values = [(_AMD[key], _number(cells[i], None)) for i, key in cols.items()]
        except ValueError as exc:
            log.bad(n, str(exc))
            continue
        seen: set[str] = set()
        for (metric, scale), value in values:
            if value is not None and metric not in seen:
                seen.add(metric)
                log.readings.append((t, gpu, metric, value * scale))
    if header is None:
        raise InvalidInputError("the amd-smi log has no CSV header with a gpu column")
    return log


_DMON_ROW = re.compile(r"^(?P<ts>.*?)\s*(?P<entity>GPU)\s+(?P<id>\d{1,6})\s+(?P<rest>.*)$")


def _split_ts(prefix: str) -> float | None:
    text = prefix.strip()
    return parse_wall(text) if text else None


def parse_dcgm(data: str) -> ParsedLog:
    log = ParsedLog("dcgm", "nvidia")
    tags: list[str] | None = None
    untimed = 0
    for n, line in _lines(data):
        if not line.strip():
            continue
        if "#Entity" in line:
            found = line.split("#Entity", 1)[1].split()
            if tags is None:
                tags = found
                log.columns = tags
                if "POWER" not in tags:
                    raise _no_power("dcgmi dmon", tags, "dcgmi dmon -e 155,156,203,252 (155 = POWER)")
            continue
        if tags is None:
            continue
        m = _DMON_ROW.match(line)
        if m is None:
            if re.search(r"\bID\b", line):
                continue  # the units line
            log.rows += 1
            log.bad(n, "not a dcgmi dmon row")
            continue
        log.rows += 1
        try:
            t = _split_ts(m["ts"])
        except ValueError as exc:
            log.bad(n, f"timestamp: {exc}")
            continue
        if t is None:
            untimed += 1
            continue
        cells = m["rest"].split()
        if len(cells) != len(tags):
            log.bad(n, f"{len(cells)} values, the header has {len(tags)}")
            continue
        gpu = int(m["id"])
        try:
            values = [(_DCGM[tag], _number(cell, None)) for tag, cell in zip(tags, cells, strict=True)
                      if tag in _DCGM]
        except ValueError as exc:
            log.bad(n, str(exc))
            continue
        for (metric, scale), value in values:
            if value is not None:
                log.readings.append((t, gpu, metric, value * scale))
    if tags is None:
        raise InvalidInputError("the dcgm log has no '#Entity' header line (dcgmi dmon output)")
    if untimed and not log.readings:
        raise InvalidInputError(
            "the dcgm log has no timestamps: dcgmi dmon prints none",
            hint="prefix each line with the wall clock: "
                 "dcgmi dmon -e 155,156,203,252 -d 100 | ts '%.s' > dcgm.log",
        )
    return log


def detect_format(data: str) -> LogFormat:
    head = "\n".join(data.splitlines()[:5])
    if "#Entity" in head:
        return "dcgm"
    if re.search(r"power\.draw|utilization\.gpu|memory\.used", head):
        return "nvidia-smi"
    if re.search(r"socket_power|gfx_activity|\bgpu\b", head):
        return "amd-smi"
    raise InvalidInputError("cannot tell the log's format from its first lines",
                            hint="pass --format nvidia-smi, amd-smi or dcgm")


def parse_log(data: str, fmt: LogFormat | None = None) -> ParsedLog:
    """The readings of a log (module docstring); ``fmt`` None: told from its first lines."""
    data = data.removeprefix("\ufeff")  # a byte-order mark (a log saved by an editor)
    chosen = fmt or detect_format(data)
    parser = {"nvidia-smi": parse_nvidia_smi, "amd-smi": parse_amd_smi, "dcgm": parse_dcgm}[chosen]
    return parser(data)
