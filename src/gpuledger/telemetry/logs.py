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

Units are read, not assumed: the unit of a column's header (nvidia-smi's ``power.draw [mW]``, ``memory.used
[GiB]``; amd-smi's ``socket_power (uW)``; the units line under dcgmi dmon's ``#Entity`` header, ``W mJ %
MB``) and the unit a cell carries (``312.45 W``, ``135000000 uW``) are converted to the base unit
(``gpuledger.telemetry.base.UNITS``); a column in a unit that is not one of its quantity is an
InvalidInputError naming it, a cell in one is a malformed row. A value beyond what one device can read
(``base.PHYSICAL_MAX``: 100 kW, 1 PB, 100 %, 500 °C) is a malformed row too; power is held much closer,
against the device's TDP, when the energy is computed (``telemetry.bounds``).

A row that cannot be read (wrong number of cells, a timestamp or number that does not parse) is counted
and the first one reported; a file without a power column is an InvalidInputError (exit 4).

Read as a stream of lines (``parse_log`` takes any iterable: ``attach`` gives the file's lines through
``gpuledger.boundedio.iter_lines``), and only the readings ``keep`` accepts are kept (those near the run's
window), as arrays of floats per GPU and metric: memory holds what is kept (16 bytes a reading, at most
``MAX_READINGS``) and one line, not the file. At most ``MAX_DEVICES`` (1,024) GPUs.
"""

from __future__ import annotations

import csv
import math
import re
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from itertools import chain, islice
from typing import Literal

from gpuledger.errors import InvalidInputError
from gpuledger.records import Vendor
from gpuledger.telemetry.base import MAX_DEVICES, PHYSICAL_MAX, UNITS, unit_factor

LogFormat = Literal["nvidia-smi", "amd-smi", "dcgm"]
FORMATS: tuple[LogFormat, ...] = ("nvidia-smi", "amd-smi", "dcgm")
MAX_LINE = 64 * 1024
# Readings kept (near the run's window): 32 MB of arrays, and what summarising one GPU of them costs (about
# 160 bytes a reading while its summary is made): ~300 MB at worst, whatever the file's size.
MAX_READINGS = 2_000_000


@dataclass(frozen=True, slots=True)
class Column:
    """What a column reads: our metric, its base unit (a key of ``UNITS``) and the tool's own unit."""

    metric: str
    base: str
    unit: str


# nvidia-smi query field -> what it reads; power: the first present wins.
_NVIDIA: dict[str, Column] = {
    "power.draw": Column("power_w", "W", "W"), "power.draw.instant": Column("power_w", "W", "W"),
    "power.draw.average": Column("power_w", "W", "W"), "utilization.gpu": Column("util_ratio", "ratio", "%"),
    "utilization.memory": Column("mem_util_ratio", "ratio", "%"),
    "memory.used": Column("memory_used_bytes", "B", "MiB"),
    "memory.total": Column("memory_total_bytes", "B", "MiB"),
    "temperature.gpu": Column("temperature_c", "°C", "C"), "clocks.sm": Column("sm_clock_hz", "Hz", "MHz"),
    "clocks.current.sm": Column("sm_clock_hz", "Hz", "MHz"), "power.limit": Column("power_limit_w", "W", "W"),
}
_AMD: dict[str, Column] = {
    "socket_power": Column("power_w", "W", "W"), "current_socket_power": Column("power_w", "W", "W"),
    "average_socket_power": Column("power_w", "W", "W"), "power_usage": Column("power_w", "W", "W"),
    "gfx_activity": Column("util_ratio", "ratio", "%"), "gfx_usage": Column("util_ratio", "ratio", "%"),
    "umc_activity": Column("mem_util_ratio", "ratio", "%"),
    "used_vram": Column("memory_used_bytes", "B", "MB"),
    "total_vram": Column("memory_total_bytes", "B", "MB"),
    "total_energy_consumption": Column("energy_j", "J", "J"), "edge": Column("temperature_c", "°C", "C"),
    "hotspot": Column("temperature_hotspot_c", "°C", "C"),
}
_DCGM: dict[str, Column] = {
    "POWER": Column("power_w", "W", "W"), "TOTEC": Column("energy_j", "J", "mJ"),
    "GPUTL": Column("util_ratio", "ratio", "%"), "MCUTL": Column("mem_util_ratio", "ratio", "%"),
    "FBUSD": Column("memory_used_bytes", "B", "MiB"), "FBTTL": Column("memory_total_bytes", "B", "MiB"),
    "TMPTR": Column("temperature_c", "°C", "C"), "SMCLK": Column("sm_clock_hz", "Hz", "MHz"),
}
_QUANTITY = {"W": "power", "J": "energy", "B": "memory", "ratio": "a share", "°C": "temperature",
             "Hz": "a clock"}
_NA = {"", "n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]", "na", "-", "nan"}
_NUMBER = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-zµ°%]*)\s*$")
_HEADER = re.compile(r"^([a-z0-9_.]+)\s*(?:\[([^\]]*)\]|\(([^)]*)\))?$", re.IGNORECASE)
_EPOCH = re.compile(r"^\d{9,11}(?:\.\d+)?$")
_EPOCH_MS = re.compile(r"^\d{12,14}(?:\.\d+)?$")


@dataclass(slots=True)
class Unit:
    """A column as the log's header says it: what it reads and the factor from its unit to the base."""

    column: Column
    factor: float
    unit: str


def header_unit(fmt: str, header: str, column: Column, unit: str | None) -> Unit:
    """The column ``header`` in ``unit`` (None or empty: the tool's own); InvalidInputError for a unit that
    is not one of the column's quantity."""
    told = (unit or "").strip() or column.unit
    factor = unit_factor(told, column.base)
    if factor is None:
        known = ", ".join(UNITS[column.base])
        raise InvalidInputError(f"the {fmt} log's column {header[:60]!r} is in {told[:20]!r}: not a unit of "
                                f"{_QUANTITY[column.base]} ({known})")
    return Unit(column, factor, told)


@dataclass(slots=True)
class ParsedLog:
    """What a log holds: its kept readings per (GPU index, metric) as arrays of wall times and values in base
    units, and what was left out. ``keep(t)``: whether a reading at wall time ``t`` is kept (None: all)."""

    format: LogFormat
    vendor: Vendor
    keep: Callable[[float], bool] | None = None
    series: dict[tuple[int, str], tuple[array[float], array[float]]] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)
    uuids: dict[int, str] = field(default_factory=dict)
    rows: int = 0
    malformed: int = 0
    first_malformed: str | None = None
    columns: list[str] = field(default_factory=list)
    readings: int = 0  # every reading of the log, kept or not
    kept: int = 0
    first_t: float | None = None
    last_t: float | None = None
    _gpus: set[int] = field(default_factory=set)
    _by_uuid: dict[str, int] = field(default_factory=dict)

    def bad(self, line_no: int, why: str) -> None:
        self.malformed += 1
        if self.first_malformed is None:
            self.first_malformed = f"line {line_no}: {why}"[:300]

    def gpu(self, index: int) -> int:
        """``index`` as a GPU of the log; InvalidInputError past ``MAX_DEVICES`` GPUs."""
        if index not in self._gpus:
            if len(self._gpus) >= MAX_DEVICES:
                raise InvalidInputError(f"the {self.format} log names more than {MAX_DEVICES:,} GPUs: not "
                                        "one node's log")
            self._gpus.add(index)
        return index

    def add(self, t: float, gpu: int, metric: str, value: float) -> None:
        self.readings += 1
        self.first_t = t if self.first_t is None or t < self.first_t else self.first_t
        self.last_t = t if self.last_t is None or t > self.last_t else self.last_t
        if self.keep is not None and not self.keep(t):
            return
        if self.kept >= MAX_READINGS:
            raise InvalidInputError(
                f"the {self.format} log holds more than {MAX_READINGS:,} readings near the run's window",
                hint="sample less often (nvidia-smi -lms 1000) or cut the log to the run's window")
        pair = self.series.get((gpu, metric))
        if pair is None:
            pair = self.series[(gpu, metric)] = (array("d"), array("d"))
        pair[0].append(t)
        pair[1].append(value)
        self.kept += 1

    @property
    def gpus(self) -> list[int]:
        """The GPUs with kept readings."""
        return sorted({g for g, _ in self.series})

    def kept_bytes(self) -> int:
        """Bytes of the kept readings' arrays."""
        return sum(a.itemsize * len(a) + b.itemsize * len(b) for a, b in self.series.values())


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


def _number(cell: str, unit: Unit) -> float | None:
    """A cell's value in the column's base unit (None: not available); ValueError for text that is not a
    reading of the column's quantity (a unit of another, a number beyond ``PHYSICAL_MAX``)."""
    text = cell.strip()
    if text.lower() in _NA:
        return None
    m = _NUMBER.match(text)
    if not m:
        raise ValueError(f"{text[:40]!r} is not a number")
    factor = unit.factor
    if m.group(2):
        told = unit_factor(m.group(2), unit.column.base)
        if told is None:
            raise ValueError(f"{text[:40]!r} is not in a unit of {_QUANTITY[unit.column.base]}")
        factor = told
    value = float(m.group(1)) * factor
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{text[:40]!r} is not a reading")
    top = PHYSICAL_MAX[unit.column.base]
    if value > top * (1.0 + 1e-9):
        raise ValueError(f"{text[:40]!r} is not a reading of one GPU (over {top:g} {unit.column.base})")
    return value


def _lines(lines: Iterable[str]) -> Iterator[tuple[int, str]]:
    for n, line in enumerate(lines, 1):
        yield n, line[:MAX_LINE]


def _no_power(fmt: str, columns: Iterable[str], hint: str) -> InvalidInputError:
    shown = ", ".join(list(columns)[:12]) or "none"
    return InvalidInputError(f"the {fmt} log has no power column (columns: {shown})", hint=hint)


def _csv_rows(lines: Iterable[str]) -> Iterator[tuple[int, list[str]]]:
    for n, line in _lines(lines):
        if not line.strip() or "\x00" in line:
            if line.strip():
                yield n, ["\x00"]
            continue
        yield n, next(csv.reader([line], skipinitialspace=True))


def _add_row(log: ParsedLog, t: float, gpu: int, values: list[tuple[Column, float | None]]) -> None:
    seen: set[str] = set()
    for column, value in values:
        if value is not None and column.metric not in seen:
            seen.add(column.metric)
            log.add(t, gpu, column.metric, value)


def parse_nvidia_smi(lines: Iterable[str], keep: Callable[[float], bool] | None = None) -> ParsedLog:
    log = ParsedLog("nvidia-smi", "nvidia", keep)
    header: list[str] | None = None
    cols: dict[int, Unit] = {}
    ts_col = idx_col = uuid_col = name_col = -1
    for n, cells in _csv_rows(lines):
        if header is None:
            header = [c.strip() for c in cells]
            for i, h in enumerate(header):
                m = _HEADER.match(h.strip())
                key, unit = (m.group(1).lower(), m.group(2) or m.group(3)) if m else (h.lower(), None)
                if key == "timestamp":
                    ts_col = i
                elif key == "index":
                    idx_col = i
                elif key in ("uuid", "gpu_uuid"):
                    uuid_col = i
                elif key in ("name", "gpu_name"):
                    name_col = i
                elif key in _NVIDIA:
                    cols[i] = header_unit("nvidia-smi", h, _NVIDIA[key], unit)
            log.columns = header
            if not any(u.column.metric == "power_w" for u in cols.values()):
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
            uuid = cells[uuid_col].strip()[:200] if uuid_col >= 0 else None
            gpu = _gpu_index(cells[idx_col]) if idx_col >= 0 else _index_for(log, uuid or "")
            values = [(u.column, _number(cells[i], u)) for i, u in cols.items()]
        except ValueError as exc:
            log.bad(n, str(exc))
            continue
        log.gpu(gpu)
        if uuid and gpu not in log.uuids:
            log.uuids[gpu] = uuid
            log._by_uuid.setdefault(uuid, gpu)
        if name_col >= 0 and gpu not in log.names and cells[name_col].strip():
            log.names[gpu] = cells[name_col].strip()[:200]
        _add_row(log, t, gpu, values)
    if header is None:
        raise InvalidInputError("the nvidia-smi log is empty")
    return log


def _gpu_index(cell: str) -> int:
    text = cell.strip()
    if not text.isdigit() or len(text) > 6:
        raise ValueError(f"GPU index {text[:20]!r} is not a small whole number")
    return int(text)


def _index_for(log: ParsedLog, uuid: str) -> int:
    if not uuid:
        raise ValueError("no uuid")
    known = log._by_uuid.get(uuid)
    return known if known is not None else len(log.uuids)


def parse_amd_smi(lines: Iterable[str], keep: Callable[[float], bool] | None = None) -> ParsedLog:
    log = ParsedLog("amd-smi", "amd", keep)
    header: list[str] | None = None
    cols: dict[int, Unit] = {}
    ts_col = gpu_col = -1
    for n, cells in _csv_rows(lines):
        raw = [c.strip() for c in cells]
        keys = [c.lower() for c in raw]
        if header is None:
            if "gpu" not in keys:
                continue  # amd-smi's watch banner ("'CTRL' + 'C' to stop watching output:")
            header = keys
            named = [_HEADER.match(k) for k in raw]
            ts_col = keys.index("timestamp") if "timestamp" in keys else -1
            gpu_col = keys.index("gpu")
            for i, m in enumerate(named):
                column = _AMD.get(m.group(1).lower()) if m is not None else None
                if m is not None and column is not None:
                    cols[i] = header_unit("amd-smi", raw[i], column, m.group(2) or m.group(3))
            log.columns = header
            if not any(u.column.metric == "power_w" for u in cols.values()):
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
            values = [(u.column, _number(cells[i], u)) for i, u in cols.items()]
        except ValueError as exc:
            log.bad(n, str(exc))
            continue
        log.gpu(gpu)
        _add_row(log, t, gpu, values)
    if header is None:
        raise InvalidInputError("the amd-smi log has no CSV header with a gpu column")
    return log


_DMON_ROW = re.compile(r"^(?P<ts>.*?)\s*(?P<entity>GPU)\s+(?P<id>\d{1,6})\s+(?P<rest>.*)$")
_DMON_UNITS = re.compile(r"(?:^|\s)ID(?:\s|$)")


def _split_ts(prefix: str) -> float | None:
    text = prefix.strip()
    return parse_wall(text) if text else None


def _dcgm_units(tags: list[str], line: str) -> dict[str, Unit]:
    """The units line under dmon's header (``ID  W  mJ  %  MB``), one unit per tag; a tag whose unit is
    not given keeps the field's own."""
    tokens = line.split("ID", 1)[1].split()
    told = dict(zip(tags, tokens, strict=False)) if len(tokens) == len(tags) else {}
    return {tag: header_unit("dcgm", f"{tag} [{told.get(tag, '')}]", col,
                             told.get(tag) if told.get(tag, "-") not in ("-", "") else None)
            for tag, col in _DCGM.items() if tag in tags}


def parse_dcgm(lines: Iterable[str], keep: Callable[[float], bool] | None = None) -> ParsedLog:
    log = ParsedLog("dcgm", "nvidia", keep)
    tags: list[str] | None = None
    units: dict[str, Unit] = {}
    units_read = False
    untimed = 0
    for n, line in _lines(lines):
        if not line.strip():
            continue
        if "#Entity" in line:
            found = line.split("#Entity", 1)[1].split()
            if tags is None:
                tags = found
                log.columns = tags
                if "POWER" not in tags:
                    raise _no_power("dcgmi dmon", tags, "dcgmi dmon -e 155,156,203,252 (155 = POWER)")
                units = _dcgm_units(tags, "ID")
            continue
        if tags is None:
            continue
        m = _DMON_ROW.match(line)
        if m is None:
            if _DMON_UNITS.search(line):
                if not units_read:  # the units line (repeated with the header)
                    units = _dcgm_units(tags, line)
                    units_read = True
                continue
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
            values = [(units[tag].column, _number(cell, units[tag]))
                      for tag, cell in zip(tags, cells, strict=True) if tag in units]
        except ValueError as exc:
            log.bad(n, str(exc))
            continue
        log.gpu(gpu)
        for column, value in values:
            if value is not None:
                log.add(t, gpu, column.metric, value)
    if tags is None:
        raise InvalidInputError("the dcgm log has no '#Entity' header line (dcgmi dmon output)")
    if untimed and not log.readings:
        raise InvalidInputError(
            "the dcgm log has no timestamps: dcgmi dmon prints none",
            hint="prefix each line with the wall clock: "
                 "dcgmi dmon -e 155,156,203,252 -d 100 | ts '%.s' > dcgm.log",
        )
    return log


def detect_format(head: list[str]) -> LogFormat:
    """The format of a log from its first lines."""
    text = "\n".join(head[:5])
    if "#Entity" in text:
        return "dcgm"
    if re.search(r"power\.draw|utilization\.gpu|memory\.used", text):
        return "nvidia-smi"
    if re.search(r"socket_power|gfx_activity|\bgpu\b", text):
        return "amd-smi"
    raise InvalidInputError("cannot tell the log's format from its first lines",
                            hint="pass --format nvidia-smi, amd-smi or dcgm")


def parse_log(data: str | Iterable[str], fmt: LogFormat | None = None, *,
              keep: Callable[[float], bool] | None = None) -> ParsedLog:
    """The readings of a log (module docstring): ``data`` its text or its lines; ``fmt`` None: told from
    its first lines; ``keep``: which wall times to keep (None: all)."""
    lines: Iterator[str] = iter(data.splitlines()) if isinstance(data, str) else iter(data)
    head = list(islice(lines, 5))
    if not head:
        raise InvalidInputError("the log is empty (no lines: a FIFO nobody writes to reads as empty)")
    if head:
        head[0] = head[0].removeprefix("\ufeff")  # a byte-order mark (a log saved by an editor)
    chosen = fmt or detect_format(head)
    parser = {"nvidia-smi": parse_nvidia_smi, "amd-smi": parse_amd_smi, "dcgm": parse_dcgm}[chosen]
    return parser(chain(head, lines), keep)
