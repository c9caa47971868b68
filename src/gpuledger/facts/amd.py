"""AMD facts: amd-smi (both JSON shapes), rocm-smi ``--json``, rocminfo text, the ROCm version
(``/opt/rocm/.info/version``), the KFD topology, ``/dev/kfd`` and render nodes, HSA overrides."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from gpuledger.catalog.amd import gfx_from_target_version
from gpuledger.facts.fs import RootFS
from gpuledger.facts.model import AmdFacts, AmdGpu, CommandFact, DeviceNode, Identity, KfdNode
from gpuledger.facts.runner import Runner

TOOL_TIMEOUT_S = 10.0
KFD_NODES = "sys/class/kfd/kfd/topology/nodes"
OVERRIDE_ENV = re.compile(r"^HSA_OVERRIDE_GFX_VERSION(_\d+)?$")
MIB = 1024 * 1024


class AmdParseError(ValueError):
    """A ROCm tool printed something that is not the format asked for."""


def normalise_bdf(text: str | None) -> str | None:
    """``0000:0B:00.0`` / ``0b:00.0`` -> ``0000:0b:00.0``."""
    if not text:
        return None
    value = text.strip().lower()
    match = re.fullmatch(r"(?:([0-9a-f]{4,8}):)?([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])", value)
    if match is None:
        return None
    domain = int(match.group(1) or "0", 16)
    return f"{domain:04x}:{match.group(2)}:{match.group(3)}.{match.group(4)}"


def _hex_id(value: Any) -> int | None:
    """``"0x73ff"`` / ``"73ff"`` / ``29695`` -> int."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip(), 16)
        except ValueError:
            return None
    return None


def _na(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    return None if text in ("", "N/A", "n/a") else text


def _obj(rec: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = rec.get(key)
    return value if isinstance(value, dict) else {}


def _size_bytes(node: Any) -> int | None:
    """amd-smi ``{"value": 8176, "unit": "MB"}`` -> bytes (amd-smi's MB are MiB: 8176 MB on an 8 GiB card)."""
    if not isinstance(node, dict):
        return None
    value, unit = node.get("value"), str(node.get("unit", "")).upper()
    if not isinstance(value, int | float):
        return None
    factor = {"B": 1, "KB": 1024, "MB": MIB, "GB": 1024 * MIB}.get(unit)
    return int(value * factor) if factor else None


def amd_smi_records(text: str) -> list[dict[str, Any]]:
    """The GPU records of any ``amd-smi ... --json`` output: a bare list (older amd-smi) or
    ``{"gpu_data": [...]}`` (newer)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AmdParseError(f"amd-smi JSON does not parse: {exc}") from exc
    if isinstance(doc, dict) and isinstance(doc.get("gpu_data"), list):
        doc = doc["gpu_data"]
    if not isinstance(doc, list) or not all(isinstance(r, dict) for r in doc):
        raise AmdParseError('amd-smi JSON is neither a list of GPUs nor {"gpu_data": [...]}')
    return list(doc)


def parse_amd_smi(text: str) -> tuple[list[AmdGpu], str | None]:
    """``amd-smi static|metric|topology --json`` -> GPUs (whatever each output carries) and the
    amdgpu driver version (static)."""
    gpus: list[AmdGpu] = []
    driver: str | None = None
    for rec in amd_smi_records(text):
        asic, bus, vbios = _obj(rec, "asic"), _obj(rec, "bus"), _obj(rec, "vbios")
        drv, vram, mem = _obj(rec, "driver"), _obj(rec, "vram"), _obj(rec, "mem_usage")
        driver = driver or _na(drv.get("version"))
        gfx = _na(asic.get("target_graphics_version"))
        index = rec.get("gpu")
        gpus.append(
            AmdGpu(
                index=index if isinstance(index, int) else None,
                name=_na(asic.get("market_name")),
                name_source="amd-smi" if _na(asic.get("market_name")) else None,
                pci_bus_id=normalise_bdf(_na(bus.get("bdf")) or _na(rec.get("bdf"))),
                device_id=_hex_id(asic.get("device_id")),
                gfx_target=gfx,
                gfx_source="amd-smi" if gfx else None,
                vbios=_na(vbios.get("version")) or _na(vbios.get("part_number")),
                memory_total_bytes=_size_bytes(vram.get("size")) or _size_bytes(mem.get("total_vram")),
                uuid=_na(rec.get("uuid")),
                sources=["amd-smi"],
            )
        )
    return gpus, driver


def _series_name(card: Mapping[str, Any]) -> str | None:
    for key in ("Card Series", "Card series", "Device Name", "Card SKU"):
        value = _na(card.get(key))
        if value and not re.fullmatch(r"0x[0-9a-fA-F]+", value) and key != "Card SKU":
            return value
    return None


def parse_rocm_smi(text: str) -> tuple[list[AmdGpu], str | None]:
    """``rocm-smi ... --json`` (ROCm 4.x to 6.x key sets) -> GPUs and the driver version."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AmdParseError(f"rocm-smi JSON does not parse: {exc}") from exc
    if not isinstance(doc, dict):
        raise AmdParseError("rocm-smi JSON is not an object")
    gpus: list[AmdGpu] = []
    for key in sorted((k for k in doc if re.fullmatch(r"card\d+", k)), key=lambda k: int(k[4:])):
        card = doc[key]
        if not isinstance(card, dict):
            continue
        gfx = _na(card.get("GFX Version"))
        name = _series_name(card)
        vram = _na(card.get("VRAM Total Memory (B)"))
        gpus.append(
            AmdGpu(
                index=int(key[4:]),
                name=name,
                name_source="rocm-smi" if name else None,
                pci_bus_id=normalise_bdf(_na(card.get("PCI Bus"))),
                device_id=_hex_id(card.get("Device ID") or card.get("GPU ID")),
                gfx_target=gfx,
                gfx_source="rocm-smi" if gfx else None,
                vbios=_na(card.get("VBIOS version")),
                memory_total_bytes=int(vram) if vram and vram.isdigit() else None,
                uuid=_na(card.get("Unique ID")),
                sources=["rocm-smi"],
            )
        )
    system = _obj(doc, "system")
    if not gpus:
        raise AmdParseError("rocm-smi JSON has no cardN entries")
    return gpus, _na(system.get("Driver version"))


def parse_rocminfo(text: str) -> tuple[list[AmdGpu], str]:
    """``rocminfo`` -> GPU agents (gfx target, marketing name, chip id, BDF) and a status word:
    ``ok``, ``rock_not_loaded`` or ``hsa_error``."""
    if re.search(r"ROCk module is NOT loaded", text):
        return [], "rock_not_loaded"
    if "HSA Agents" not in text:
        if re.search(r"hsa api call failure|HSA_STATUS_ERROR", text):
            return [], "hsa_error"
        raise AmdParseError("no 'HSA Agents' section in rocminfo output")
    gpus: list[AmdGpu] = []
    for block in re.split(r"^\*{7}\s*$\n^Agent \d+\s*$\n^\*{7}\s*$", text, flags=re.MULTILINE)[1:]:
        fields: dict[str, str] = {}
        for line in block.splitlines():
            match = re.match(r"^  (\S[^:]*?):\s*(.*?)\s*$", line)  # agent-level keys are indented 2
            if match and match.group(1) not in fields:
                fields[match.group(1)] = match.group(2)
        if fields.get("Device Type") != "GPU":
            continue
        chip = re.search(r"\(0x([0-9a-fA-F]+)\)", fields.get("Chip ID", ""))
        bdfid = fields.get("BDFID", "")
        bus = None
        if bdfid.isdigit():
            value = int(bdfid)
            bus = f"0000:{value >> 8:02x}:{(value >> 3) & 0x1F:02x}.{value & 7}"
        gfx = fields.get("Name", "")
        gpus.append(
            AmdGpu(
                index=len(gpus),
                name=_na(fields.get("Marketing Name")),
                name_source="rocminfo" if _na(fields.get("Marketing Name")) else None,
                pci_bus_id=bus,
                device_id=int(chip.group(1), 16) if chip else None,
                gfx_target=gfx if re.fullmatch(r"gfx[0-9a-f]+", gfx) else None,
                gfx_source="rocminfo" if re.fullmatch(r"gfx[0-9a-f]+", gfx) else None,
                uuid=_na(fields.get("Uuid")),
                sources=["rocminfo"],
            )
        )
    return gpus, "ok"


def parse_kfd_properties(node: int, text: str) -> KfdNode | None:
    """One ``/sys/class/kfd/kfd/topology/nodes/N/properties`` file; None for CPU nodes."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            values[parts[0]] = int(parts[1])
    version = values.get("gfx_target_version", 0)
    if version <= 0:
        return None
    return KfdNode(
        node=node,
        gfx_target_version=version,
        gfx_target=gfx_from_target_version(version),
        vendor_id=values.get("vendor_id"),
        device_id=values.get("device_id"),
        location_id=values.get("location_id"),
        domain=values.get("domain"),
        drm_render_minor=values.get("drm_render_minor"),
    )


def parse_rocm_version(text: str) -> str | None:
    match = re.search(r"\d+\.\d+(?:\.\d+)?", text)
    return match.group(0) if match else None


def group_names(fs: RootFS) -> dict[int, str]:
    names: dict[int, str] = {}
    for line in (fs.read_text("etc/group") or "").splitlines():
        parts = line.split(":")
        if len(parts) >= 3 and parts[2].isdigit():
            names[int(parts[2])] = parts[0]
    return names


def device_node(fs: RootFS, rel: str, identity: Identity, groups: Mapping[int, str]) -> DeviceNode:
    """Whether ``identity`` may open ``rel`` read-write, from the mode bits (root may open anything)."""
    st = fs.stat(rel)
    node = DeviceNode(path="/" + rel, exists=st.exists, error=st.error)
    if not st.exists or st.mode is None:
        return node
    node.mode, node.owner_uid, node.group_gid = st.mode_text(), st.uid, st.gid
    node.group = groups.get(st.gid) if st.gid is not None else None
    if identity.uid is None:
        return node
    if identity.uid == 0:
        node.accessible = True
    elif st.uid == identity.uid:
        node.accessible = (st.mode & 0o600) == 0o600
    elif st.gid in identity.gids:
        node.accessible = (st.mode & 0o060) == 0o060
    else:
        node.accessible = (st.mode & 0o006) == 0o006
    return node


def _merge(into: AmdGpu, other: AmdGpu) -> None:
    for field in ("name", "pci_bus_id", "device_id", "vbios", "memory_total_bytes", "uuid"):
        if getattr(into, field) is None and getattr(other, field) is not None:
            setattr(into, field, getattr(other, field))
            if field == "name":
                into.name_source = other.name_source
    if into.gfx_target is None and other.gfx_target is not None:
        into.gfx_target, into.gfx_source = other.gfx_target, other.gfx_source
    for source in other.sources:
        if source not in into.sources:
            into.sources.append(source)


def merge_gpus(groups: list[list[AmdGpu]]) -> list[AmdGpu]:
    """One record per GPU from several tools, matched by PCI address (else by position)."""
    merged: list[AmdGpu] = []
    for gpus in groups:
        if not merged:
            merged = [g.model_copy(deep=True) for g in gpus]
            continue
        for pos, gpu in enumerate(gpus):
            target = next((m for m in merged if gpu.pci_bus_id and m.pci_bus_id == gpu.pci_bus_id), None)
            if (
                target is None
                and pos < len(merged)
                and (gpu.pci_bus_id is None or merged[pos].pci_bus_id is None)
            ):
                target = merged[pos]
            if target is None:
                merged.append(gpu.model_copy(deep=True))
            else:
                _merge(target, gpu)
    return merged


def collect_amd(
    fs: RootFS,
    runner: Runner,
    env: Mapping[str, str],
    identity: Identity,
    *,
    want_tools: bool,
    fast: bool = False,
) -> AmdFacts:
    """``fast``: skip rocminfo when amd-smi/rocm-smi or the KFD topology already told the gfx targets."""
    facts = AmdFacts()
    version = fs.read("opt/rocm/.info/version")
    if version.ok and version.text and parse_rocm_version(version.text):
        facts.rocm_version, facts.rocm_version_source = (
            parse_rocm_version(version.text),
            "/opt/rocm/.info/version",
        )
    facts.rocm_dirs = [d for d in fs.listdir("opt") if d == "rocm" or d.startswith("rocm-")]
    if facts.rocm_version is None:
        link = fs.link_target("opt/rocm")
        candidates = ([link] if link else []) + [d for d in facts.rocm_dirs if d.startswith("rocm-")]
        for candidate in candidates:
            found = parse_rocm_version(candidate)
            if found:
                facts.rocm_version, facts.rocm_version_source = found, f"/opt/{candidate.rsplit('/', 1)[-1]}"
                break

    facts.hsa_overrides = {k: v for k, v in env.items() if OVERRIDE_ENV.match(k)}

    for node_name in fs.listdir(KFD_NODES):
        if not node_name.isdigit():
            continue
        props = fs.read_text(f"{KFD_NODES}/{node_name}/properties")
        if props is None:
            continue
        node = parse_kfd_properties(int(node_name), props)
        if node is not None and node.vendor_id in (None, 0x1002):
            facts.kfd_nodes.append(node)
    facts.kfd_nodes.sort(key=lambda n: n.node)

    groups = group_names(fs)
    facts.dev_kfd = device_node(fs, "dev/kfd", identity, groups)
    facts.render_nodes = [
        device_node(fs, f"dev/dri/{n}", identity, groups)
        for n in fs.listdir("dev/dri")
        if n.startswith("renderD")
    ]

    if not want_tools:
        return facts
    sources: list[list[AmdGpu]] = []
    amd_smi = runner(["amd-smi", "static", "--json"], timeout_s=TOOL_TIMEOUT_S)
    facts.amd_smi = CommandFact.from_result(amd_smi)
    if amd_smi.ok:
        try:
            gpus, facts.driver_version = parse_amd_smi(amd_smi.stdout)
            sources.append(gpus)
        except AmdParseError as exc:
            facts.parse_errors.append(f"amd-smi static --json: {exc}")
    if not sources:
        rocm_smi = runner(["rocm-smi", "--showallinfo", "--json"], timeout_s=TOOL_TIMEOUT_S)
        facts.rocm_smi = CommandFact.from_result(rocm_smi)
        if rocm_smi.ok or (rocm_smi.ran and rocm_smi.stdout.lstrip().startswith("{")):
            try:
                gpus, driver = parse_rocm_smi(rocm_smi.stdout)
                sources.append(gpus)
                facts.driver_version = facts.driver_version or driver
            except AmdParseError as exc:
                facts.parse_errors.append(f"rocm-smi --showallinfo --json: {exc}")
    known = bool(facts.kfd_nodes) or any(g.gfx_target for group in sources for g in group)
    if fast and known:
        facts.gpus = merge_gpus(sources)
        return facts
    rocminfo = runner(["rocminfo"], timeout_s=TOOL_TIMEOUT_S)
    facts.rocminfo = CommandFact.from_result(rocminfo)
    if rocminfo.ran and not rocminfo.timed_out:
        try:
            gpus, facts.rocminfo_status = parse_rocminfo(rocminfo.stdout + "\n" + rocminfo.stderr)
            if gpus:
                sources.append(gpus)
        except AmdParseError as exc:
            facts.rocminfo_status = "unparsed"
            facts.parse_errors.append(f"rocminfo: {exc}")
    facts.gpus = merge_gpus(sources)
    return facts
