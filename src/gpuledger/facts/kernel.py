"""Kernel facts: release, loaded GPU modules, the nvidia module's version and where it was built,
Secure Boot, nouveau blacklisting, device nodes. Reads files under the root; ``lsmod`` and
``mokutil`` come from PATH."""

from __future__ import annotations

import re
from typing import Literal

from gpuledger.facts.fs import RootFS
from gpuledger.facts.model import KernelFacts
from gpuledger.facts.runner import Runner

GPU_MODULE = re.compile(r"^(nvidia(_\w+)?|nouveau|amdgpu|amdkfd|radeon|i915|xe|vfio_pci)$")
NVIDIA_KO = re.compile(r"(^|/)nvidia\.ko(\.(xz|zst|gz))?$")
EFI_SECURE_BOOT = "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"


def parse_module_list(text: str) -> list[str]:
    """Module names from ``/proc/modules`` or ``lsmod`` output (header line skipped)."""
    names: list[str] = []
    for line in text.splitlines():
        parts = line.split()
        if not parts or parts[0] == "Module":
            continue
        if re.fullmatch(r"[\w-]+", parts[0]):
            names.append(parts[0].replace("-", "_"))
    return names


def parse_nvidia_proc_version(text: str) -> str | None:
    """``NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  ...`` (also the open module's
    ``NVIDIA UNIX Open Kernel Module for x86_64  575.57.08 ...``) -> ``550.54.14``."""
    for line in text.splitlines():
        if line.startswith("NVRM version:"):
            match = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", line)
            if match:
                return match.group(1)
    return None


def parse_mokutil(text: str) -> bool | None:
    low = text.lower()
    if "secureboot enabled" in low:
        return True
    if "secureboot disabled" in low:
        return False
    return None


ModulesSource = Literal["proc", "lsmod", "sysfs", "unknown"]


def _loaded_modules(fs: RootFS, runner: Runner) -> tuple[list[str] | None, ModulesSource, str | None]:
    proc = fs.read("proc/modules")
    if proc.ok and proc.text is not None:
        return parse_module_list(proc.text), "proc", None
    lsmod = runner(["lsmod"], timeout_s=5.0)
    if lsmod.ok:
        return parse_module_list(lsmod.stdout), "lsmod", None
    if fs.is_dir("sys/module"):
        # Without /proc/modules: sys/module/NAME exists for loaded modules (and built-in ones).
        names = fs.listdir("sys/module")
        return names, "sysfs", f"/proc/modules: {proc.error}; {lsmod.summary()}"
    return None, "unknown", f"/proc/modules: {proc.error}; {lsmod.summary()}; no sys/module"


def _module_files(fs: RootFS, release: str) -> list[str]:
    base = f"lib/modules/{release}"
    found: list[str] = []
    dep = fs.read(f"{base}/modules.dep")
    if dep.ok and dep.text is not None:
        for line in dep.text.splitlines():
            path = line.split(":", 1)[0]
            if NVIDIA_KO.search(path):
                found.append(path)
    for rel in (
        "updates/dkms",
        "kernel/drivers/video",
        "extra",
        "updates",
        "misc",
        "kernel/drivers/gpu/drm/nvidia",
    ):
        for name in fs.listdir(f"{base}/{rel}"):
            if NVIDIA_KO.search(name):
                path = f"{rel}/{name}"
                if path not in found:
                    found.append(path)
    return found


def collect_kernel(fs: RootFS, runner: Runner) -> KernelFacts:
    facts = KernelFacts()
    facts.release = fs.read_first_line("proc/sys/kernel/osrelease") or None
    facts.proc_version = fs.read_first_line("proc/version") or None
    if facts.release is None and facts.proc_version:
        match = re.match(r"Linux version (\S+)", facts.proc_version)
        facts.release = match.group(1) if match else None

    names, source, error = _loaded_modules(fs, runner)
    facts.modules_source = source
    facts.modules_error = error
    if names is not None:
        loaded = set(names)
        facts.gpu_modules = sorted(n for n in loaded if GPU_MODULE.match(n))
        facts.nvidia_loaded = "nvidia" in loaded
        facts.nouveau_loaded = "nouveau" in loaded
        facts.amdgpu_loaded = "amdgpu" in loaded

    proc_nv = fs.read("proc/driver/nvidia/version")
    if proc_nv.ok and proc_nv.text is not None:
        facts.nvidia_proc_version = proc_nv.text.strip().splitlines()[0] if proc_nv.text.strip() else None
        facts.nvidia_module_version = parse_nvidia_proc_version(proc_nv.text)
    if facts.nvidia_module_version is None:
        facts.nvidia_module_version = fs.read_first_line("sys/module/nvidia/version") or None

    facts.installed_kernels = [k for k in fs.listdir("lib/modules") if fs.is_dir(f"lib/modules/{k}")]
    facts.nvidia_module_kernels = [k for k in facts.installed_kernels if _module_files(fs, k)]
    if facts.release is not None and facts.installed_kernels:
        facts.nvidia_module_for_running_kernel = facts.release in facts.nvidia_module_kernels
    for version in fs.listdir("var/lib/dkms/nvidia"):
        if not fs.is_dir(f"var/lib/dkms/nvidia/{version}"):
            continue
        kernels = [
            k
            for k in fs.listdir(f"var/lib/dkms/nvidia/{version}")
            if fs.is_dir(f"var/lib/dkms/nvidia/{version}/{k}") and k != "source" and not k.startswith("build")
        ]
        if kernels:
            facts.dkms_nvidia.extend(f"{version}/{k}" for k in kernels)
        else:
            facts.dkms_nvidia.append(version)

    mok = runner(["mokutil", "--sb-state"], timeout_s=5.0)
    state = parse_mokutil(mok.stdout + "\n" + mok.stderr) if mok.ran else None
    if state is not None:
        facts.secure_boot = state
        facts.secure_boot_evidence = (
            f"mokutil --sb-state: {(mok.stdout or mok.stderr).strip().splitlines()[0]}"
        )
    else:
        raw = fs.read_bytes(EFI_SECURE_BOOT, limit=5)
        if raw is not None and len(raw) == 5:
            # efivarfs: 4 attribute bytes, then the variable (1 = Secure Boot on).
            facts.secure_boot = raw[4] == 1
            facts.secure_boot_evidence = f"{fs.shown(EFI_SECURE_BOOT)}: value {raw[4]}"
        elif mok.ran:
            facts.secure_boot_evidence = f"mokutil --sb-state: {' '.join(mok.output_lines(2))}"

    blacklist_files: list[str] = []
    for folder in ("etc/modprobe.d", "usr/lib/modprobe.d", "lib/modprobe.d"):
        for name in fs.listdir(folder):
            text = fs.read_text(f"{folder}/{name}") or ""
            if re.search(r"^\s*blacklist\s+nouveau\b", text, re.MULTILINE):
                blacklist_files.append(f"/{folder}/{name}")
    facts.nouveau_blacklist_files = blacklist_files
    facts.nouveau_blacklisted = bool(blacklist_files) if fs.is_dir("etc") else None
    facts.dev_nvidia = [n for n in fs.listdir("dev") if n.startswith("nvidia")]
    return facts
