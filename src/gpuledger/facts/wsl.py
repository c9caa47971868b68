"""WSL2 facts: Microsoft's kernel in /proc/version, /dev/dxg, the Windows driver's libraries in
/usr/lib/wsl/lib, and Linux NVIDIA driver packages or libraries installed inside the distribution."""

from __future__ import annotations

import re
from collections.abc import Mapping

from gpuledger.facts.fs import RootFS
from gpuledger.facts.model import WslFacts

LINUX_DRIVER_PACKAGE = re.compile(
    r"^(nvidia-driver-\d+\S*|nvidia-dkms-\d+\S*|libnvidia-compute-\d+\S*|nvidia-kernel-common-\d+\S*)$"
)
LIB_DIRS = ("usr/lib/x86_64-linux-gnu", "usr/lib64", "usr/lib/aarch64-linux-gnu")


def installed_packages(status_text: str, pattern: re.Pattern[str]) -> list[str]:
    """dpkg ``/var/lib/dpkg/status`` stanzas whose Package matches and Status is installed."""
    found: list[str] = []
    for stanza in status_text.split("\n\n"):
        name = re.search(r"^Package:\s*(\S+)", stanza, re.MULTILINE)
        status = re.search(r"^Status:\s*(.+)$", stanza, re.MULTILINE)
        if (
            name
            and status
            and status.group(1).strip().endswith(" installed")
            and pattern.match(name.group(1))
        ):
            version = re.search(r"^Version:\s*(\S+)", stanza, re.MULTILINE)
            found.append(f"{name.group(1)} {version.group(1) if version else ''}".strip())
    return found


def collect_wsl(fs: RootFS, env: Mapping[str, str], kernel_proc_version: str | None) -> WslFacts:
    facts = WslFacts()
    proc_version = kernel_proc_version or fs.read_first_line("proc/version") or ""
    if re.search(r"microsoft|WSL", proc_version, re.IGNORECASE):
        facts.evidence.append(f"/proc/version: {proc_version[:160]}")
    facts.dev_dxg = fs.exists("dev/dxg")
    if facts.dev_dxg:
        facts.evidence.append("/dev/dxg exists (GPU paravirtualisation)")
    if env.get("WSL_DISTRO_NAME"):
        facts.evidence.append(f"WSL_DISTRO_NAME={env['WSL_DISTRO_NAME']}")
    facts.is_wsl = bool(facts.evidence)
    facts.wsl_lib_dir = fs.is_dir("usr/lib/wsl/lib")
    facts.libcuda = [n for n in fs.listdir("usr/lib/wsl/lib") if n.startswith("libcuda.so")]
    facts.wsl_nvidia_smi = fs.exists("usr/lib/wsl/lib/nvidia-smi")
    if not facts.is_wsl:
        return facts
    status = fs.read_text("var/lib/dpkg/status")
    if status:
        facts.linux_driver_evidence.extend(
            f"dpkg: {p} installed" for p in installed_packages(status, LINUX_DRIVER_PACKAGE)
        )
    for folder in LIB_DIRS:
        for name in fs.listdir(folder):
            if name.startswith("libcuda.so") or name.startswith("libnvidia-ml.so"):
                facts.linux_driver_evidence.append(
                    f"/{folder}/{name} (a Linux driver library outside /usr/lib/wsl/lib)"
                )
    for release in fs.listdir("lib/modules"):
        for rel in ("updates/dkms", "kernel/drivers/video"):
            for name in fs.listdir(f"lib/modules/{release}/{rel}"):
                if name.startswith("nvidia.ko"):
                    facts.linux_driver_evidence.append(f"/lib/modules/{release}/{rel}/{name}")
    return facts
