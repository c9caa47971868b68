"""NVIDIA facts: nvidia-smi in every format it prints (``-q -x`` XML, ``-q`` text, the default table,
``-L``, ``--query-gpu ... --format=csv``), its error texts, and NVML through
``gpuledger.facts.nvml.nvml_inventory()`` (the one module that imports pynvml)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from gpuledger.facts.model import CommandFact, NvidiaFacts, NvidiaGpu, NvmlFacts, SmiFormat, SmiStatus
from gpuledger.facts.nvml import nvml_inventory
from gpuledger.facts.runner import CommandResult, Runner
from gpuledger.facts.tool_output import ToolOutputError, bounded, bounded_text, csv_rows, small_int, too_many

SMI_TIMEOUT_S = 10.0

# Error texts nvidia-smi prints (matched on lowercase text; the apostrophe varies between builds and
# copies: ' and ‘ are both seen).
_CANNOT_COMMUNICATE = re.compile(r"couldn.t communicate with the nvidia driver")
_MISMATCH = re.compile(r"driver/library version mismatch")
_NVML_LIB_VERSION = re.compile(r"NVML library version:\s*([\d.]+)", re.IGNORECASE)


class SmiParseError(ToolOutputError):
    """nvidia-smi printed something that is not the format asked for (truncated, garbled, hostile).
    Every parser below raises only this for bad input; long lines and values are bounded first."""


def _mib_to_bytes(text: str | None) -> int | None:
    if not text:
        return None
    match = re.search(r"(\d{1,12}(?:\.\d{1,6})?)\s*MiB", text[:64])
    return int(float(match.group(1)) * 1024 * 1024) if match else None


def _clean(text: str | None) -> str | None:
    if text is None:
        return None
    value = text.strip()
    return None if value in ("", "N/A", "[N/A]", "Not Available") else bounded(value)


def _pci_device_id(text: str | None) -> int | None:
    """nvidia-smi's ``pci_device_id`` is ``0x20B210DE`` / ``20B210DE``: device << 16 | vendor."""
    full = small_int(_clean(text), base=16, max_digits=8)
    if full is None:
        return None
    return full >> 16 if full > 0xFFFF else full


def parse_smi_xml(text: str) -> tuple[str | None, str | None, list[NvidiaGpu]]:
    """``nvidia-smi -q -x`` -> (driver version, CUDA version, GPUs). SmiParseError on bad XML."""
    body = text.strip()
    if not body:
        raise SmiParseError("empty output")
    if body.count("<gpu>") + body.count("<gpu ") > 1024:
        raise SmiParseError("lists more than 1024 GPUs; not a real listing")
    # A str with an encoding declaration is fine for ElementTree; drop a BOM or garbage before it.
    start = body.find("<?xml")
    if start < 0:
        start = body.find("<nvidia_smi_log")
    if start < 0:
        raise SmiParseError("no <nvidia_smi_log> element")
    try:
        root = ET.fromstring(body[start:])
    except ET.ParseError as exc:
        raise SmiParseError(f"XML does not parse: {exc}") from exc
    if root.tag != "nvidia_smi_log":
        raise SmiParseError(f"unexpected root element <{root.tag}>")
    gpus: list[NvidiaGpu] = []
    for index, gpu in enumerate(root.findall("gpu")):
        gpus.append(
            NvidiaGpu(
                index=index,
                name=_clean(gpu.findtext("product_name")),
                uuid=_clean(gpu.findtext("uuid")),
                pci_bus_id=_clean(gpu.findtext("pci/pci_bus_id")) or _clean(gpu.get("id")),
                pci_device_id=_pci_device_id(gpu.findtext("pci/pci_device_id")),
                vbios=_clean(gpu.findtext("vbios_version")),
                memory_total_bytes=_mib_to_bytes(gpu.findtext("fb_memory_usage/total")),
                architecture=_clean(gpu.findtext("product_architecture")),
                mig_mode=_clean(gpu.findtext("mig_mode/current_mig")),
            )
        )
    return _clean(root.findtext("driver_version")), _clean(root.findtext("cuda_version")), gpus


def _kv(line: str) -> tuple[int, str, str | None]:
    indent = len(line) - len(line.lstrip(" "))
    if ":" in line:
        key, value = line.split(":", 1)
        return indent, key.strip(), value.strip()
    return indent, line.strip(), None


def parse_smi_q(text: str) -> tuple[str | None, str | None, list[NvidiaGpu]]:
    """``nvidia-smi -q`` text -> (driver version, CUDA version, GPUs)."""
    text = bounded_text(text)
    if "Driver Version" not in text and "NVSMI LOG" not in text:
        raise SmiParseError("not nvidia-smi -q output")
    driver = cuda = None
    gpus: list[NvidiaGpu] = []
    current: dict[str, str | None] | None = None
    section: list[tuple[int, str]] = []

    def close() -> None:
        if current is not None:
            gpus.append(
                NvidiaGpu(
                    index=len(gpus),
                    name=_clean(current.get("Product Name")),
                    uuid=_clean(current.get("GPU UUID")),
                    pci_bus_id=_clean(current.get("PCI/Bus Id")) or _clean(current.get("_bus")),
                    pci_device_id=_pci_device_id(current.get("PCI/Device Id")),
                    vbios=_clean(current.get("VBIOS Version")),
                    memory_total_bytes=_mib_to_bytes(current.get("FB Memory Usage/Total")),
                    architecture=_clean(current.get("Product Architecture")),
                    mig_mode=_clean(current.get("MIG Mode/Current")),
                )
            )

    for raw in text.splitlines():
        if not raw.strip():
            continue
        indent, key, value = _kv(raw)
        gpu_head = re.fullmatch(r"GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])", raw.strip())
        if indent == 0 and gpu_head:
            close()
            if len(gpus) >= 1024:
                raise SmiParseError("lists more than 1024 GPUs; not a real listing")
            current = {"_bus": gpu_head.group(1)}
            section = []
            continue
        if indent == 0:
            if key == "Driver Version":
                driver = _clean(value)
            elif key == "CUDA Version":
                cuda = _clean(value)
            continue
        if current is None:
            continue
        while section and section[-1][0] >= indent:
            section.pop()
        if value is None or value == "":
            section.append((indent, key))
            continue
        if len(section) > 16:  # deeper than any real section: garbage
            continue
        path = "/".join([s for _, s in section] + [key])
        if len(current) < 4096:
            current.setdefault(path, value)
    close()
    if driver is None and not gpus:
        raise SmiParseError("no driver version and no GPU in nvidia-smi -q output")
    return driver, cuda, gpus


_TABLE_HEAD = re.compile(r"Driver Version:\s*([\d.]+)\s+CUDA Version:\s*([\d.]+|N/A)")
_TABLE_ROW = re.compile(
    r"^\|\s+(\d{1,4})\s+(.+?)\s+(On|Off)\s+\|\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])"
)
_TABLE_MEM = re.compile(r"(\d{1,12})MiB\s*/\s*(\d{1,12})MiB")


def parse_smi_table(text: str) -> tuple[str | None, str | None, list[NvidiaGpu]]:
    """The default ``nvidia-smi`` table (both the pre-535 79-column and the newer wide layout)."""
    text = bounded_text(text)
    head = _TABLE_HEAD.search(text)
    if head is None:
        raise SmiParseError("no 'Driver Version: ... CUDA Version: ...' header")
    gpus: list[NvidiaGpu] = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        row = _TABLE_ROW.match(line)
        if row is None:
            continue
        name = bounded(row.group(2).strip()) or ""
        mem = _TABLE_MEM.search(lines[i + 1]) if i + 1 < len(lines) else None
        too_many(len(gpus) + 1, "the nvidia-smi table")
        gpus.append(
            NvidiaGpu(
                index=int(row.group(1)),
                name=name,
                pci_bus_id=row.group(4),
                memory_total_bytes=int(mem.group(2)) * 1024 * 1024 if mem else None,
                name_truncated=name.endswith("..."),
            )
        )
    cuda = None if head.group(2) == "N/A" else head.group(2)
    return head.group(1), cuda, gpus


_L_LINE = re.compile(r"^GPU (\d{1,4}): (.+?) \(UUID: ([^)]+)\)\s*$")


def parse_smi_list(text: str) -> list[NvidiaGpu]:
    """``nvidia-smi -L`` -> GPUs (index, name, uuid)."""
    gpus = [
        NvidiaGpu(index=int(m.group(1)), name=bounded(m.group(2).strip()), uuid=bounded(m.group(3).strip()))
        for m in (_L_LINE.match(line) for line in bounded_text(text).splitlines())
        if m
    ]
    if len(gpus) > 1024:
        raise SmiParseError("lists more than 1024 GPUs; not a real listing")
    if not gpus:
        raise SmiParseError("no 'GPU n: NAME (UUID: ...)' line")
    return gpus


def parse_smi_csv(text: str) -> list[dict[str, str | None]]:
    """``--query-gpu=... --format=csv``: rows keyed by field name (the ``[unit]`` suffix dropped,
    ``[N/A]`` -> None). Values keep their text (units are in the header, e.g. ``memory.used [MiB]``)."""
    try:
        rows = csv_rows(text.strip(), "CSV")
    except ToolOutputError as exc:
        raise SmiParseError(str(exc)) from None
    if len(rows) < 1:
        raise SmiParseError("empty CSV")
    header = [re.sub(r"\s*\[[^\]]*\]$", "", h.strip()) for h in rows[0]]
    if not all(re.fullmatch(r"[a-z][a-z0-9_.]{0,63}", h) for h in header):
        raise SmiParseError("the first line is not a --query-gpu CSV header")
    out: list[dict[str, str | None]] = []
    for row in rows[1:]:
        if len(row) != len(header):
            raise SmiParseError(f"CSV row has {len(row)} fields, header has {len(header)}")
        out.append({k: _clean(v) for k, v in zip(header, row, strict=True)})
    return out


# The last fallback: fields every driver since the 3xx series knows (checked against the real
# `nvidia-smi --help-query-gpu` fixture in the tests).
CSV_FIELDS = ("index", "name", "uuid", "pci.bus_id", "driver_version", "memory.total", "vbios_version")


def _csv_mib(text: str | None) -> int | None:
    """``"24564 MiB"`` (csv) or ``"24564"`` (csv,nounits; the header says ``[MiB]``) -> bytes."""
    if text is None:
        return None
    return _mib_to_bytes(text if "MiB" in text else f"{text} MiB")


def gpus_from_csv(rows: list[dict[str, str | None]]) -> tuple[str | None, str | None, list[NvidiaGpu]]:
    """Rows of a ``--query-gpu`` CSV (any subset of :data:`CSV_FIELDS`) -> (driver, CUDA, GPUs)."""
    if not rows:
        raise SmiParseError("CSV has a header but no GPU row")
    if not ({"name", "uuid"} & set(rows[0])):
        raise SmiParseError("CSV has neither a name nor a uuid column")
    gpus: list[NvidiaGpu] = []
    for pos, row in enumerate(rows):
        index = small_int(row.get("index"), max_digits=4)
        gpus.append(
            NvidiaGpu(
                index=pos if index is None else index,
                name=row.get("name"),
                uuid=row.get("uuid"),
                pci_bus_id=row.get("pci.bus_id"),
                vbios=row.get("vbios_version"),
                memory_total_bytes=_csv_mib(row.get("memory.total")),
            )
        )
    return rows[0].get("driver_version"), None, gpus


def parse_help_query_gpu(text: str) -> list[str]:
    """``nvidia-smi --help-query-gpu`` -> every valid ``--query-gpu`` field name."""
    names: list[str] = []
    for line in text.splitlines():
        if line.startswith('"'):
            names.extend(re.findall(r'"([^"]+)"', line))
    return names


def classify_smi_failure(result: CommandResult) -> tuple[SmiStatus, list[str], str | None]:
    """(status, the error lines, NVML library version) for an nvidia-smi run that did not succeed."""
    if result.not_found:
        return "not_found", [], None
    if result.timed_out:
        return "timeout", [], None
    if result.error is not None:
        return "failed", [result.error], None
    text = f"{result.stdout}\n{result.stderr}"
    low = text.lower()
    lines = result.output_lines(4)
    lib = _NVML_LIB_VERSION.search(text)
    if _CANNOT_COMMUNICATE.search(low):
        return "cannot_communicate", lines, None
    if _MISMATCH.search(low):
        return "version_mismatch", lines, lib.group(1) if lib else None
    if "no devices were found" in low:
        return "no_devices", lines, None
    if "insufficient permissions" in low or "no permission" in low:
        return "no_permission", lines, None
    if "failed to initialize nvml" in low:
        return "nvml_error", lines, None
    return "failed", lines, None


def _try_formats(
    runner: Runner,
) -> tuple[CommandResult, SmiFormat | None, tuple[str | None, str | None, list[NvidiaGpu]] | None, list[str]]:
    """Run ``-q -x``; when it ran but cannot be parsed fall back to ``-q``, the table, then ``-L``."""
    first = runner(["nvidia-smi", "-q", "-x"], timeout_s=SMI_TIMEOUT_S)
    if not first.ok:
        return first, None, None, []
    problems: list[str] = []
    try:
        return first, "xml", parse_smi_xml(first.stdout), problems
    except ToolOutputError as exc:
        problems.append(f"nvidia-smi -q -x: {exc}")
    fallbacks: tuple[tuple[list[str], SmiFormat], ...] = (
        (["nvidia-smi", "-q"], "q"),
        (["nvidia-smi"], "table"),
        (["nvidia-smi", "-L"], "L"),
        (["nvidia-smi", f"--query-gpu={','.join(CSV_FIELDS)}", "--format=csv"], "csv"),
    )
    for argv, fmt in fallbacks:
        result = runner(argv, timeout_s=SMI_TIMEOUT_S)
        if not result.ok:
            problems.append(result.summary())
            continue
        try:
            if fmt == "q":
                return result, fmt, parse_smi_q(result.stdout), problems
            if fmt == "table":
                return result, fmt, parse_smi_table(result.stdout), problems
            if fmt == "csv":
                return result, fmt, gpus_from_csv(parse_smi_csv(result.stdout)), problems
            return result, fmt, (None, None, parse_smi_list(result.stdout)), problems
        except ToolOutputError as exc:
            problems.append(f"{result.command}: {exc}")
    return first, None, None, problems


def collect_nvml(use_nvml: bool, reason_skipped: str | None) -> NvmlFacts:
    if not use_nvml:
        return NvmlFacts(consulted=False, reason=reason_skipped)
    inv = nvml_inventory()
    devices: list[NvidiaGpu] = []
    for dev in inv.devices:
        device_id: int | None = None
        if dev.pci_device_id:
            try:
                device_id = int(dev.pci_device_id, 16)
            except ValueError:
                device_id = None
        devices.append(
            NvidiaGpu(
                index=dev.index,
                name=dev.name,
                uuid=dev.uuid,
                pci_bus_id=dev.pci_bus_id,
                pci_device_id=device_id,
                vbios=dev.vbios,
                memory_total_bytes=dev.memory_total_bytes,
            )
        )
    return NvmlFacts(
        consulted=True,
        ok=inv.ok,
        driver_version=inv.driver_version,
        cuda_driver_version=inv.cuda_driver_version,
        error_class=inv.error_class,
        error_message=inv.error_message,
        devices=devices,
    )


def collect_nvidia(
    runner: Runner, *, use_nvml: bool, nvml_skip_reason: str | None = None, prefer_nvml: bool = False
) -> NvidiaFacts:
    """nvidia-smi (all formats) and NVML. ``prefer_nvml``: when NVML answers, skip nvidia-smi (fast
    fingerprints: nvidia-smi -q -x takes a second or more on 8-GPU servers)."""
    facts = NvidiaFacts()
    if prefer_nvml and use_nvml:
        facts.nvml = collect_nvml(use_nvml, nvml_skip_reason)
        if facts.nvml.ok:
            facts.driver_version = facts.nvml.driver_version
            facts.cuda_version = facts.nvml.cuda_driver_version
            return facts
    result, fmt, parsed, problems = _try_formats(runner)
    facts.smi_found = not result.not_found
    facts.smi_command = CommandFact.from_result(result)
    if parsed is not None:
        facts.smi_status = "ok"
        facts.smi_format = fmt
        facts.driver_version, facts.cuda_version, facts.gpus = parsed
        facts.smi_command = CommandFact.from_result(result)
    elif result.ok:
        facts.smi_status = "unparsed"
        facts.smi_error_lines = problems[:6]
    else:
        facts.smi_status, facts.smi_error_lines, facts.nvml_library_version = classify_smi_failure(result)
    if not facts.nvml.consulted:
        facts.nvml = collect_nvml(use_nvml, nvml_skip_reason)
    return facts
