"""Fake machines for the doctor and lock tests: a root tree (sys, proc, dev, etc, opt/rocm, ...) plus a
PATH directory of small shell scripts that print REAL captured outputs (tests/fixtures/captures
and tests/doctor/data). Nothing is faked in-process except vendor libraries at their import boundary."""

from __future__ import annotations

import os
import shlex
import shutil
import stat
from pathlib import Path
from typing import Any

from gpuledger.doctor import DoctorReport, diagnose
from gpuledger.doctor.findings import Finding
from gpuledger.facts import Facts, collect_facts

DATA = Path(__file__).parent / "data"
FAKE_TORCH = Path(__file__).parent / "fake_torch"
KERNEL = "6.5.0-14-generic"
CAT = shutil.which("cat") or "/bin/cat"
SLEEP = shutil.which("sleep") or "/bin/sleep"


class FakeMachine:
    def __init__(self, base: Path, fixtures: Path) -> None:
        self.root = base / "root"
        self.bin = base / "bin"
        self.root.mkdir()
        self.bin.mkdir()
        self.fixtures = fixtures
        self.env: dict[str, str] = {"PATH": str(self.bin), "HOME": str(base)}
        self.write("proc/sys/kernel/osrelease", KERNEL + "\n")
        self.write("etc/hostname", "testbox\n")
        self.write("etc/os-release", 'PRETTY_NAME="Ubuntu 22.04.4 LTS"\nNAME="Ubuntu"\n')
        self.torch("cpu_build")

    # ------------------------------------------------------------------ files
    def write(self, rel: str, content: str | bytes, mode: int | None = None) -> Path:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
        if mode is not None:
            path.chmod(mode)
        return path

    def data(self, name: str) -> Path:
        return DATA / name

    def fixture(self, rel: str) -> Path:
        return self.fixtures / rel

    # ------------------------------------------------------------------ hardware
    def pci(
        self, address: str, vendor: int, device: int, class_code: int = 0x030200, driver: str | None = None
    ) -> None:
        base = f"sys/bus/pci/devices/{address}"
        self.write(f"{base}/vendor", f"0x{vendor:04x}\n")
        self.write(f"{base}/device", f"0x{device:04x}\n")
        self.write(f"{base}/class", f"0x{class_code:06x}\n")
        if driver:
            drv = self.root / "sys/bus/pci/drivers" / driver
            drv.mkdir(parents=True, exist_ok=True)
            os.symlink(f"../../../bus/pci/drivers/{driver}", self.root / base / "driver")

    def no_pci_gpu(self) -> None:
        self.pci("0000:00:00.0", 0x8086, 0x1237, class_code=0x060000)  # a host bridge

    def kernel_modules(self, release: str, *relpaths: str) -> None:
        (self.root / "lib/modules" / release).mkdir(parents=True, exist_ok=True)
        for rel in relpaths:
            self.write(f"lib/modules/{release}/{rel}", b"\x7fELF")

    # ------------------------------------------------------------------ commands
    def command(
        self,
        name: str,
        *,
        stdout: Path | list[Path] | None = None,
        stderr: Path | None = None,
        rc: int = 0,
        by_args: dict[str, Path] | None = None,
        sleep: float | None = None,
        mode: int = 0o755,
    ) -> Path:
        """A script on PATH that prints real captured files (``by_args``: exact "$*" -> file; a list of
        ``stdout`` files is printed one after the other)."""
        lines = ["#!/bin/sh"]
        if sleep is not None:
            lines.append(f"{SLEEP} {sleep}")
        if by_args:
            lines.append('case "$*" in')
            for args, path in by_args.items():
                lines.append(f"  {shlex.quote(args)}) {CAT} {shlex.quote(str(path))}; exit {rc};;")
            lines.append("esac")
        for out in [stdout] if isinstance(stdout, Path) else (stdout or []):
            lines.append(f"{CAT} {shlex.quote(str(out))}")
        if stderr is not None:
            lines.append(f"{CAT} {shlex.quote(str(stderr))} >&2")
        lines.append(f"exit {rc}")
        path = self.bin / name
        path.write_text("\n".join(lines) + "\n")
        path.chmod(mode)
        return path

    def lsmod(self, capture: str) -> None:
        self.command("lsmod", stdout=self.data(capture))

    def torch(self, scenario: str | None) -> None:
        if scenario is None:
            self.env.pop("PYTHONPATH", None)
            self.env["PYTHONNOUSERSITE"] = "1"
            return
        self.env["PYTHONPATH"] = str(FAKE_TORCH / scenario)

    # ------------------------------------------------------------------ ready-made stacks
    def nvidia_a100(self, *, torch: str | None = "cuda_ok", loaded: bool = True) -> None:
        """Healthy: A100 80GB on the bus, nvidia loaded, nvidia-smi -q -x = telegraf's A100 capture."""
        self.pci("0000:01:00.0", 0x10DE, 0x20B2, driver="nvidia" if loaded else None)
        self.lsmod("lsmod-nvidia-535.txt" if loaded else "lsmod-header-only.txt")
        if loaded:
            self.write("sys/module/nvidia/version", "535.54.03\n")
        for node in ("nvidia0", "nvidiactl", "nvidia-uvm"):
            self.write(f"dev/{node}", "")
        self.kernel_modules(KERNEL, "updates/dkms/nvidia.ko")
        self.command("nvidia-smi", stdout=self.fixture("nvidia-smi/telegraf-a100-sxm4-v12.xml"))
        self.command("docker", stdout=self.data("docker-runtimes-nvidia.json"))
        self.command("nvidia-container-cli", stdout=self.data("nvidia-container-cli-info-390.87.txt"))
        self.torch(torch)

    def amd_mi100(self, *, torch: str | None = "rocm_ok", rocm: str = "6.0.2") -> None:
        """Healthy: 4x MI100 (rocm-smi capture from ROCm 6.0.2), amdgpu loaded, /dev/kfd usable."""
        for bus in ("83", "a3", "c3", "e3"):
            self.pci(f"0000:{bus}:00.0", 0x1002, 0x738C, class_code=0x038000, driver="amdgpu")
        self.lsmod("lsmod-amdgpu.txt")
        self.write("dev/kfd", "", mode=0o666)
        for minor in range(128, 132):
            self.write(f"dev/dri/renderD{minor}", "", mode=0o666)
        self.write("opt/rocm/.info/version", f"{rocm}\n")
        self.command("rocm-smi", stdout=self.fixture("amd/telegraf-rocm-smi-mi100_rocm602.json"))
        self.command("docker", stdout=self.data("docker-runtimes-no-nvidia.json"))
        self.torch(torch)

    def amd_rx6700xt(
        self, rocm_file: str = "telegraf-rocm-smi-rx6700xt_rocm612.json", rocm: str = "6.1.2"
    ) -> None:
        self.pci("0000:07:00.0", 0x1002, 0x73DF, class_code=0x030000, driver="amdgpu")
        self.lsmod("lsmod-amdgpu.txt")
        self.write("dev/kfd", "", mode=0o666)
        self.write("dev/dri/renderD128", "", mode=0o666)
        self.write("opt/rocm/.info/version", f"{rocm}\n")
        self.command("rocm-smi", stdout=self.fixture(f"amd/{rocm_file}"))
        self.torch("rocm_ok")

    # ------------------------------------------------------------------ running
    def facts(self, **kwargs: Any) -> Facts:
        kwargs.setdefault("check_ollama", False)
        kwargs.setdefault("use_nvml", False)
        kwargs.setdefault("timeout_cap_s", 20.0)
        return collect_facts(self.root, env=self.env, **kwargs)

    def doctor(self, **kwargs: Any) -> DoctorReport:
        facts = self.facts(**kwargs)
        return DoctorReport(facts=facts, findings=diagnose(facts))


def ids(findings: list[Finding]) -> set[str]:
    return {f.id for f in findings}


def only(findings: list[Finding], rule_id: str) -> Finding:
    hits = [f for f in findings if f.id == rule_id]
    assert len(hits) == 1, f"expected one {rule_id}, got {[f.id for f in findings]}"
    return hits[0]


def is_root() -> bool:
    return os.geteuid() == 0


def readonly(path: Path) -> None:
    path.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
