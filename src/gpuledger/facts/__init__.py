"""Collectors that READ the machine and never judge, producing one :class:`Facts` value.

``collect_facts(root, runner=..., env=...)`` reads every file under ``root`` (``/`` on a real machine,
a fake tree in tests) and runs commands found on ``env["PATH"]`` through ``runner``. Collectors run
concurrently; each one that fails on unexpected input is recorded in ``Facts.collector_errors`` and the
others still report. NVML (an in-process library talking to the live kernel) is only consulted when
``root`` is ``/`` unless ``use_nvml`` says otherwise. PyTorch is read from its files (fast); the child
process that imports it runs when a GPU is present, the torch build is a GPU build, or ``deep``.
"""

from __future__ import annotations

import os
import platform
import re
import socket
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from json import JSONDecodeError
from pathlib import Path
from typing import TypeVar

from gpuledger.catalog.amd import amd_reference
from gpuledger.facts.amd import collect_amd, normalise_bdf
from gpuledger.facts.containers import collect_containers
from gpuledger.facts.cpu import cpu_model_from_cpuinfo
from gpuledger.facts.frameworks import collect_frameworks, torch_from_files
from gpuledger.facts.fs import RootFS
from gpuledger.facts.kernel import collect_kernel
from gpuledger.facts.model import (
    AmdFacts,
    AmdGpu,
    CollectorError,
    ContainerFacts,
    Facts,
    FrameworkFacts,
    GpuSummary,
    Identity,
    KernelFacts,
    NvidiaFacts,
    OllamaFacts,
    PciFacts,
    SystemFacts,
    WslFacts,
)
from gpuledger.facts.naming import catalog_spec_for_pci, name_gpu
from gpuledger.facts.nvidia import collect_nvidia
from gpuledger.facts.ollama import DEFAULT_OLLAMA_URL, collect_ollama
from gpuledger.facts.pci import collect_pci
from gpuledger.facts.runner import CappedRunner, CommandResult, Runner, SubprocessRunner
from gpuledger.facts.wsl import collect_wsl
from gpuledger.urls import redact_env

__all__ = [
    "DEFAULT_OLLAMA_URL",
    "CommandResult",
    "Facts",
    "Runner",
    "SubprocessRunner",
    "collect_facts",
    "machine_name",
]

T = TypeVar("T")

# What bad input can raise inside a collector. Anything else is a bug and propagates.
COLLECTOR_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    ValueError,
    LookupError,
    TypeError,
    UnicodeError,
    ET.ParseError,
    JSONDecodeError,
)
RELEVANT_ENV = re.compile(
    r"^(HSA_OVERRIDE_GFX_VERSION(_\d+)?|CUDA_VISIBLE_DEVICES|HIP_VISIBLE_DEVICES|ROCR_VISIBLE_DEVICES|"
    r"NVIDIA_VISIBLE_DEVICES|WSL_DISTRO_NAME|OLLAMA_HOST|ROCM_PATH|CUDA_HOME)$"
)


def parse_id_output(text: str) -> Identity | None:
    """``uid=1000(alice) gid=1000(alice) groups=1000(alice),27(sudo),44(video)`` -> Identity."""
    uid = re.search(r"uid=(\d+)(?:\(([^)]*)\))?", text)
    if uid is None:
        return None
    ident = Identity(uid=int(uid.group(1)), user=uid.group(2), source="id")
    groups = re.search(r"groups=(\S+)", text)
    gid = re.search(r"gid=(\d+)(?:\(([^)]*)\))?", text)
    if gid:
        ident.gids.append(int(gid.group(1)))
        if gid.group(2):
            ident.groups.append(gid.group(2))
    if groups:
        for item in groups.group(1).split(","):
            match = re.fullmatch(r"(\d+)(?:\(([^)]*)\))?", item)
            if match:
                if int(match.group(1)) not in ident.gids:
                    ident.gids.append(int(match.group(1)))
                if match.group(2) and match.group(2) not in ident.groups:
                    ident.groups.append(match.group(2))
    return ident


def collect_identity(runner: Runner) -> Identity:
    result = runner(["id"], timeout_s=5.0)
    if result.ok:
        parsed = parse_id_output(result.stdout)
        if parsed is not None:
            return parsed
    return Identity(uid=os.getuid(), gids=sorted(set(os.getgroups()) | {os.getgid()}), source="process")


def collect_system(fs: RootFS, env: Mapping[str, str], identity: Identity, live: bool) -> SystemFacts:
    facts = SystemFacts(identity=identity)
    facts.hostname = fs.read_first_line("etc/hostname") or (socket.gethostname() if live else None)
    for rel in ("etc/os-release", "usr/lib/os-release"):
        text = fs.read_text(rel)
        if text:
            match = re.search(r'^PRETTY_NAME="?([^"\n]*)"?', text, re.MULTILINE)
            if match:
                facts.os_name = match.group(1)
                break
    facts.arch = platform.machine() if live else None
    cpuinfo = fs.read_text("proc/cpuinfo") or ""
    facts.cpu_model = cpu_model_from_cpuinfo(cpuinfo)
    count = len(re.findall(r"^processor\s*:", cpuinfo, re.MULTILINE))
    facts.cpu_count = count or (os.cpu_count() if live else None)
    meminfo = re.search(r"^MemTotal:\s*(\d+)\s*kB", fs.read_text("proc/meminfo") or "", re.MULTILINE)
    facts.memory_total_bytes = int(meminfo.group(1)) * 1024 if meminfo else None
    facts.env = {k: redact_env(k, v) for k, v in sorted(env.items()) if RELEVANT_ENV.match(k)}
    return facts


def machine_name(facts: Facts) -> str:
    """The name doctor runs are filed under (the host name)."""
    return facts.system.hostname or "unknown-machine"


def _nvidia_summaries(facts: Facts, fs: RootFS) -> list[GpuSummary]:
    nv = facts.nvidia
    devices = nv.gpus if nv.smi_status == "ok" and nv.gpus else (nv.nvml.devices if nv.nvml.ok else [])
    source = f"nvidia-smi ({nv.smi_format})" if nv.smi_status == "ok" and nv.gpus else "nvml"
    out: list[GpuSummary] = []
    for gpu in devices:
        name = gpu.name
        if (name is None or gpu.name_truncated) and gpu.pci_device_id is not None:
            name = name_gpu(fs, 0x10DE, gpu.pci_device_id)[0]
        out.append(
            GpuSummary(
                vendor="nvidia",
                index=gpu.index,
                name=name or "NVIDIA GPU",
                pci_bus_id=normalise_bdf(gpu.pci_bus_id),
                uuid=gpu.uuid,
                memory_total_bytes=gpu.memory_total_bytes,
                vbios=gpu.vbios,
                source=source,
            )
        )
    if not out:
        for i, dev in enumerate(d for d in facts.pci.gpus if d.vendor == "nvidia"):
            out.append(
                GpuSummary(
                    vendor="nvidia",
                    index=i,
                    name=dev.name,
                    pci_bus_id=dev.address,
                    source=f"sysfs PCI ({dev.name_source})",
                )
            )
    return out


def _complete_amd(gpu: AmdGpu, facts: Facts, fs: RootFS) -> None:
    reference = amd_reference()
    if gpu.gfx_target is None:
        node = next(
            (n for n in facts.amd.kfd_nodes if gpu.pci_bus_id and n.pci_bus_id == gpu.pci_bus_id), None
        )
        if node is not None:
            gpu.gfx_target, gpu.gfx_source = node.gfx_target, "kfd topology"
    if gpu.device_id is not None:
        spec = catalog_spec_for_pci(0x1002, gpu.device_id)
        known = reference.amd_device(gpu.device_id)
        if gpu.gfx_target is None and spec is not None and spec.gfx_target:
            gpu.gfx_target, gpu.gfx_source = spec.gfx_target, "catalog (PCI id)"
        if gpu.gfx_target is None and known is not None:
            gpu.gfx_target, gpu.gfx_source = known.gfx, "AMD reference data (PCI id)"
        if gpu.name is None:
            gpu.name, gpu.name_source = name_gpu(fs, 0x1002, gpu.device_id)


def _amd_summaries(facts: Facts, fs: RootFS) -> list[GpuSummary]:
    gpus = [g.model_copy(deep=True) for g in facts.amd.gpus]
    if not gpus:
        pci_amd = [d for d in facts.pci.gpus if d.vendor == "amd"]
        for i, dev in enumerate(pci_amd):
            gpus.append(
                AmdGpu(
                    index=i,
                    pci_bus_id=dev.address,
                    device_id=dev.device_id,
                    name=dev.name,
                    name_source=dev.name_source,
                    sources=["sysfs PCI"],
                )
            )
        if not gpus:
            for i, node in enumerate(facts.amd.kfd_nodes):
                gpus.append(
                    AmdGpu(
                        index=i,
                        pci_bus_id=node.pci_bus_id,
                        device_id=node.device_id,
                        gfx_target=node.gfx_target,
                        gfx_source="kfd topology",
                        sources=["kfd topology"],
                    )
                )
    for gpu in gpus:
        _complete_amd(gpu, facts, fs)
    facts.amd.gpus = gpus
    return [
        GpuSummary(
            vendor="amd",
            index=g.index,
            name=g.name or "AMD GPU",
            pci_bus_id=g.pci_bus_id,
            uuid=g.uuid,
            memory_total_bytes=g.memory_total_bytes,
            gfx_target=g.gfx_target,
            vbios=g.vbios,
            source=", ".join(g.sources),
        )
        for g in gpus
    ]


def _other_summaries(facts: Facts) -> list[GpuSummary]:
    return [
        GpuSummary(vendor=d.vendor, index=i, name=d.name, pci_bus_id=d.address, source="sysfs PCI")
        for i, d in enumerate(g for g in facts.pci.gpus if g.vendor in ("intel", "other"))
    ]


def collect_facts(
    root: Path = Path("/"),
    *,
    runner: Runner | None = None,
    deep: bool = False,
    ollama_url: str | None = None,
    check_ollama: bool = True,
    env: Mapping[str, str] | None = None,
    use_nvml: bool | None = None,
    probe_torch: bool | None = None,
    timeout_cap_s: float | None = None,
    python: str | None = None,
    fast: bool = False,
) -> Facts:
    """Read the machine under ``root``. See the module docstring for what runs when."""
    start = time.monotonic()
    environ: Mapping[str, str] = os.environ if env is None else env
    run: Runner = runner if runner is not None else SubprocessRunner(environ)
    if timeout_cap_s is not None:
        run = CappedRunner(run, timeout_cap_s)
    fs = RootFS(root)
    live = Path(root).resolve() == Path("/")
    facts = Facts(collected_at=datetime.now(UTC), root=str(root), deep=deep)
    errors: list[CollectorError] = []

    def guard(name: str, fn: Callable[[], T], fallback: Callable[[], T]) -> T:
        try:
            return fn()
        except COLLECTOR_ERRORS as exc:
            errors.append(CollectorError(collector=name, error=f"{type(exc).__name__}: {exc}"))
            return fallback()

    identity = guard("identity", lambda: collect_identity(run), Identity)
    facts.pci = guard("pci", lambda: collect_pci(fs), lambda: PciFacts(error="collector failed"))
    vendors = {g.vendor for g in facts.pci.gpus}
    amd_tools = "amd" in vendors or not facts.pci.readable or fs.exists("dev/kfd") or fs.is_dir("opt/rocm")
    nvml = live if use_nvml is None else use_nvml
    nvml_reason = None if nvml else "--root is not /: NVML reads the live machine, not the tree"

    with ThreadPoolExecutor(max_workers=8, thread_name_prefix="gpuledger-facts") as pool:
        f_kernel: Future[KernelFacts] = pool.submit(
            guard, "kernel", lambda: collect_kernel(fs, run), KernelFacts
        )
        f_nvidia: Future[NvidiaFacts] = pool.submit(
            guard,
            "nvidia",
            lambda: collect_nvidia(run, use_nvml=nvml, nvml_skip_reason=nvml_reason, prefer_nvml=fast),
            NvidiaFacts,
        )
        f_amd: Future[AmdFacts] = pool.submit(
            guard,
            "amd",
            lambda: collect_amd(fs, run, environ, identity, want_tools=amd_tools, fast=fast),
            AmdFacts,
        )
        f_containers: Future[ContainerFacts] = pool.submit(
            guard, "containers", lambda: collect_containers(fs, run), ContainerFacts
        )
        f_wsl: Future[WslFacts] = pool.submit(guard, "wsl", lambda: collect_wsl(fs, environ, None), WslFacts)
        f_ollama: Future[OllamaFacts] | None = None
        if check_ollama:
            f_ollama = pool.submit(
                guard,
                "ollama",
                lambda: collect_ollama(ollama_url),
                lambda: OllamaFacts(url=ollama_url or DEFAULT_OLLAMA_URL),
            )
        wsl = f_wsl.result()
        torch_build = guard("frameworks", lambda: torch_from_files(environ, python, run).build, lambda: None)
        gpu_host = bool(vendors & {"nvidia", "amd"}) or wsl.dev_dxg
        do_probe = probe_torch if probe_torch is not None else (gpu_host or torch_build in ("cuda", "rocm"))
        f_frameworks: Future[FrameworkFacts] = pool.submit(
            guard,
            "frameworks",
            lambda: collect_frameworks(run, environ, probe=do_probe, deep=deep, python=python),
            FrameworkFacts,
        )
        facts.kernel = f_kernel.result()
        facts.nvidia = f_nvidia.result()
        facts.amd = f_amd.result()
        facts.containers = f_containers.result()
        facts.wsl = wsl
        facts.frameworks = f_frameworks.result()
        facts.ollama = (
            f_ollama.result()
            if f_ollama is not None
            else OllamaFacts(url=ollama_url or DEFAULT_OLLAMA_URL, checked=False)
        )

    facts.system = guard("system", lambda: collect_system(fs, environ, identity, live), SystemFacts)
    facts.system.kernel_release = facts.kernel.release or (platform.release() if live else None)
    summaries: list[GpuSummary] = []
    summaries += guard("gpus", lambda: _nvidia_summaries(facts, fs), list)
    summaries += guard("gpus", lambda: _amd_summaries(facts, fs), list)
    summaries += _other_summaries(facts)
    facts.gpus = summaries
    facts.collector_errors = errors
    facts.duration_s = round(time.monotonic() - start, 3)
    return facts
