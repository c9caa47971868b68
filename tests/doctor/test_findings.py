"""Each finding id named in issue 3 is produced by a fake root + PATH built from real captures, and is
absent on the healthy NVIDIA and AMD trees (which exit 0)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from doctor_fake_pynvml import make as fake_pynvml
from doctor_harness import KERNEL, FakeMachine, ids, is_root, only

ISSUE_IDS = [
    "gpu.none_found",
    "nvidia.nouveau_loaded",
    "nvidia.secure_boot_blocks_module",
    "nvidia.driver_library_mismatch",
    "nvidia.module_not_built_for_kernel",
    "nvidia.module_not_loaded",
    "nvidia.driver_not_installed",
    "amd.amdgpu_not_loaded",
    "amd.kfd_missing",
    "amd.kfd_permission",
    "nvidia.smi_cannot_communicate",
    "nvidia.nvml_library_not_found",
    "nvidia.nvml_driver_not_loaded",
    "nvidia.nvml_no_permission",
    "nvidia.nvml_error",
    "amd.gfx_unsupported",
    "amd.hsa_override_suggested",
    "amd.hsa_override_mismatch",
    "amd.hsa_override_malformed",
    "torch.cpu_build_on_gpu_host",
    "torch.cuda_build_on_amd_host",
    "torch.rocm_build_on_nvidia_host",
    "container.nvidia_runtime_missing",
    "wsl.linux_driver_installed",
    "ollama.running_on_cpu",
]


# ---------------------------------------------------------------------------------------- healthy
def test_healthy_nvidia_tree_is_all_ok(machine: FakeMachine) -> None:
    machine.nvidia_a100()
    report = machine.doctor()
    assert report.exit_code == 0, [(f.id, f.evidence) for f in report.findings if f.severity != "ok"]
    assert {"gpu.detected", "nvidia.kernel_ok", "nvidia.management_ok", "torch.ok", "container.ok"} <= ids(
        report.findings
    )
    assert report.facts.gpus[0].name == "NVIDIA A100-SXM4-80GB"


def test_healthy_amd_tree_is_all_ok(machine: FakeMachine) -> None:
    machine.amd_mi100()
    report = machine.doctor()
    assert report.exit_code in (0,), [(f.id, f.evidence) for f in report.findings if f.severity != "ok"]
    assert {"gpu.detected", "amd.kernel_ok", "amd.management_ok", "torch.ok"} <= ids(report.findings)
    assert [g.gfx_target for g in report.facts.gpus] == ["gfx908"] * 4


@pytest.mark.parametrize("tree", ["nvidia", "amd"])
def test_no_issue_finding_on_a_healthy_tree(machine: FakeMachine, tree: str) -> None:
    machine.nvidia_a100() if tree == "nvidia" else machine.amd_mi100()
    found = ids(machine.doctor().findings)
    assert not found & set(ISSUE_IDS)


# ---------------------------------------------------------------------------------------- hardware
def test_no_gpu_reports_the_cpu_path(machine: FakeMachine) -> None:
    machine.no_pci_gpu()
    machine.write(
        "proc/cpuinfo", "processor\t: 0\nmodel name\t: AMD EPYC\nprocessor\t: 1\nmodel name\t: AMD EPYC\n"
    )
    report = machine.doctor()
    assert only(report.findings, "gpu.none_found").severity == "info"
    cpu = only(report.findings, "cpu.path")
    assert any("AMD EPYC, 2 logical CPUs" in e for e in cpu.evidence)
    assert any("PyTorch 2.5.1+cpu (cpu build" in e for e in cpu.evidence)
    assert report.exit_code == 0


# ---------------------------------------------------------------------------------------- NVIDIA kernel
def _nvidia_on_bus(machine: FakeMachine, driver: str | None = None) -> None:
    machine.pci("0000:01:00.0", 0x10DE, 0x20B2, driver=driver)
    machine.command("nvidia-smi", stdout=machine.data("nvidia-smi-cannot-communicate.txt"), rc=9)
    machine.torch("cuda_ok")


def test_nouveau_loaded(machine: FakeMachine) -> None:
    _nvidia_on_bus(machine, driver="nouveau")
    machine.lsmod("lsmod-nouveau.txt")
    report = machine.doctor()
    finding = only(report.findings, "nvidia.nouveau_loaded")
    assert finding.severity == "error"
    assert "PCI 0000:01:00.0 bound to driver: nouveau" in finding.evidence
    assert any("couldn't communicate" in e for e in finding.evidence)  # the symptom, shown as evidence
    assert 'sudo bash -c "echo blacklist nouveau > /etc/modprobe.d/blacklist-nouveau.conf"' in finding.fix
    assert "sudo update-initramfs -u" in finding.fix
    assert "layer.not_judged" in ids(report.findings) and "torch.ok" not in ids(report.findings)
    assert report.exit_code == 2


def test_nouveau_blacklist_file_is_evidence(machine: FakeMachine) -> None:
    _nvidia_on_bus(machine, driver="nouveau")
    machine.lsmod("lsmod-nouveau.txt")
    machine.write("etc/modprobe.d/blacklist-nouveau.conf", "blacklist nouveau\noptions nouveau modeset=0\n")
    finding = only(machine.doctor().findings, "nvidia.nouveau_loaded")
    assert "nouveau blacklisted in: /etc/modprobe.d/blacklist-nouveau.conf" in finding.evidence


def test_secure_boot_blocks_module(machine: FakeMachine) -> None:
    _nvidia_on_bus(machine)
    machine.lsmod("lsmod-header-only.txt")
    machine.kernel_modules(KERNEL, "updates/dkms/nvidia.ko.zst")
    machine.command("mokutil", stdout=machine.data("mokutil-sb-enabled.txt"))
    finding = only(machine.doctor().findings, "nvidia.secure_boot_blocks_module")
    assert "mokutil --sb-state: SecureBoot enabled" in finding.evidence
    assert any("mokutil --import" in step for step in finding.fix)


def test_secure_boot_from_efivars_when_mokutil_is_missing(machine: FakeMachine) -> None:
    _nvidia_on_bus(machine)
    machine.lsmod("lsmod-header-only.txt")
    machine.kernel_modules(KERNEL, "updates/dkms/nvidia.ko")
    machine.write(
        "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c", b"\x06\x00\x00\x00\x01"
    )
    assert "nvidia.secure_boot_blocks_module" in ids(machine.doctor().findings)


def test_kernel_upgraded_without_rebuilt_module(machine: FakeMachine) -> None:
    _nvidia_on_bus(machine)
    machine.lsmod("lsmod-header-only.txt")
    machine.kernel_modules("6.5.0-9-generic", "updates/dkms/nvidia.ko.zst")  # the previous kernel has it
    machine.kernel_modules(KERNEL)  # the running one does not
    machine.write("var/lib/dkms/nvidia/535.154.05/6.5.0-9-generic/x86_64/module/nvidia.ko", "")
    machine.command("mokutil", stdout=machine.data("mokutil-sb-disabled.txt"))
    finding = only(machine.doctor().findings, "nvidia.module_not_built_for_kernel")
    assert f"running kernel: {KERNEL}" in finding.evidence
    assert "nvidia.ko built for: 6.5.0-9-generic" in finding.evidence
    assert "sudo apt install --reinstall nvidia-driver-535" in finding.fix  # branch from the DKMS tree
    assert "sudo dkms autoinstall -k $(uname -r)" in finding.fix


def test_driver_not_installed(machine: FakeMachine) -> None:
    machine.pci("0000:01:00.0", 0x10DE, 0x20B2)
    machine.lsmod("lsmod-header-only.txt")
    machine.kernel_modules(KERNEL)
    finding = only(machine.doctor().findings, "nvidia.driver_not_installed")
    assert (
        "sudo apt install -y nvidia-driver-550" in finding.fix
    )  # the seed essay's branch when none is known


def test_module_not_loaded_with_module_present_and_secure_boot_off(machine: FakeMachine) -> None:
    _nvidia_on_bus(machine)
    machine.lsmod("lsmod-header-only.txt")
    machine.kernel_modules(KERNEL, "updates/dkms/nvidia.ko")
    machine.command("mokutil", stdout=machine.data("mokutil-sb-disabled.txt"))
    finding = only(machine.doctor().findings, "nvidia.module_not_loaded")
    assert "mokutil --sb-state: SecureBoot disabled" in finding.evidence


def test_driver_library_mismatch(machine: FakeMachine) -> None:
    machine.nvidia_a100()
    machine.write("sys/module/nvidia/version", "570.124.06\n")
    machine.command("nvidia-smi", stdout=machine.data("nvidia-smi-driver-library-mismatch.txt"), rc=18)
    report = machine.doctor()
    finding = only(report.findings, "nvidia.driver_library_mismatch")
    assert finding.layer == "kernel"
    assert "loaded kernel module: 570.124.06 (/proc/driver/nvidia/version)" in finding.evidence
    assert "user-space NVML library: 570.124" in finding.evidence
    assert "sudo apt-mark hold nvidia-driver-570" in finding.fix[-1]
    assert "nvidia.smi_failed" not in ids(report.findings)


def test_module_version_from_proc_driver_nvidia(machine: FakeMachine) -> None:
    machine.nvidia_a100()
    machine.write(
        "proc/driver/nvidia/version", machine.data("proc-driver-nvidia-version-515.76.txt").read_text()
    )
    assert machine.facts().kernel.nvidia_module_version == "515.76"
    machine.write(
        "proc/driver/nvidia/version",
        machine.data("proc-driver-nvidia-version-open-575.57.08.txt").read_text(),
    )
    assert machine.facts().kernel.nvidia_module_version == "575.57.08"


# ---------------------------------------------------------------------------------------- NVIDIA management
def test_smi_cannot_communicate_with_the_module_loaded(machine: FakeMachine) -> None:
    machine.nvidia_a100()
    for node in ("nvidia0", "nvidiactl", "nvidia-uvm"):
        (machine.root / "dev" / node).unlink()
    machine.command("nvidia-smi", stdout=machine.data("nvidia-smi-cannot-communicate.txt"), rc=9)
    finding = only(machine.doctor().findings, "nvidia.smi_cannot_communicate")
    assert finding.severity == "error"
    assert "device nodes: no /dev/nvidia*" in finding.evidence
    assert finding.fix[:3] == [
        "lsmod | grep nvidia",
        "sudo dmesg | grep -i nvidia",
        "modinfo nvidia | head -5",
    ]
    assert "sudo apt install --reinstall nvidia-driver-535" in finding.fix


def test_gpu_missing_from_driver(machine: FakeMachine) -> None:
    machine.nvidia_a100()
    machine.pci("0000:41:00.0", 0x10DE, 0x20B2, driver="nvidia")
    finding = only(machine.doctor().findings, "nvidia.gpu_missing_from_driver")
    assert "not seen by the driver: PCI 0000:41:00.0" in finding.evidence


@pytest.mark.parametrize(
    ("scenario", "rule"),
    [
        ("init_LibraryNotFound", "nvidia.nvml_library_not_found"),
        ("init_DriverNotLoaded", "nvidia.nvml_driver_not_loaded"),
        ("init_NoPermission", "nvidia.nvml_no_permission"),
        ("init_Unknown", "nvidia.nvml_error"),
        ("init_LibRmVersionMismatch", "nvidia.driver_library_mismatch"),
    ],
)
def test_nvml_errors_map_to_findings(
    machine: FakeMachine, monkeypatch: pytest.MonkeyPatch, scenario: str, rule: str
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(scenario))
    machine.nvidia_a100()
    report = machine.doctor(use_nvml=True)
    finding = only(report.findings, rule)
    error_class = f"NVMLError_{scenario.removeprefix('init_')}"
    assert any(error_class in e for e in finding.evidence)


def test_healthy_nvml_adds_no_finding(machine: FakeMachine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml("healthy_a100"))
    machine.nvidia_a100()
    report = machine.doctor(use_nvml=True)
    assert report.facts.nvidia.nvml.ok and report.facts.nvidia.nvml.cuda_driver_version == "12.2"
    assert report.facts.nvidia.nvml.devices[0].pci_device_id == 0x20B2
    assert report.exit_code == 0


def test_nvml_is_not_consulted_for_a_root_tree_by_default(machine: FakeMachine) -> None:
    machine.nvidia_a100()
    from gpuledger.facts import collect_facts

    nvml = collect_facts(machine.root, env=machine.env, check_ollama=False).nvidia.nvml
    assert not nvml.consulted and "--root" in (nvml.reason or "")


# ---------------------------------------------------------------------------------------- AMD kernel
def test_amdgpu_not_loaded(machine: FakeMachine) -> None:
    machine.amd_mi100()
    machine.lsmod("lsmod-header-only.txt")
    finding = only(machine.doctor().findings, "amd.amdgpu_not_loaded")
    assert "sudo modprobe amdgpu" in finding.fix


def test_kfd_missing(machine: FakeMachine) -> None:
    machine.amd_mi100()
    (machine.root / "dev/kfd").unlink()
    machine.command("rocminfo", stdout=machine.data("rocminfo-rock-not-loaded.txt"), rc=1)
    finding = only(machine.doctor().findings, "amd.kfd_missing")
    assert "rocminfo: ROCk module is NOT loaded" in finding.evidence


@pytest.mark.skipif(not is_root(), reason="giving the fake /dev/kfd the render group's gid needs root")
def test_kfd_permission(machine: FakeMachine) -> None:
    machine.amd_mi100()
    machine.write("etc/group", "root:x:0:\nvideo:x:44:ubuntu\nrender:x:110:\nubuntu:x:1000:\n")
    for rel in ("dev/kfd", "dev/dri/renderD128"):
        path = machine.root / rel
        path.chmod(0o660)
        import os

        os.chown(path, 0, 110)
    machine.command("id", stdout=machine.data("id-ubuntu-no-render.txt"))
    report = machine.doctor()
    finding = only(report.findings, "amd.kfd_permission")
    assert any(
        e.startswith("/dev/kfd: crw") or e.startswith("/dev/kfd: -rw-rw----") for e in finding.evidence
    )
    assert "not a member of: render" in finding.evidence
    assert "sudo usermod -a -G render,video $USER" in finding.fix
    assert report.facts.system.identity.user == "ubuntu"


# ---------------------------------------------------------------------------------------- AMD management
def test_gfx_unsupported_and_override_suggested_for_rdna2(machine: FakeMachine) -> None:
    machine.amd_rx6700xt()
    report = machine.doctor()
    unsupported = only(report.findings, "amd.gfx_unsupported")
    assert any("gfx1031" in e for e in unsupported.evidence)
    assert any("ROCm 6.1.2" in e for e in unsupported.evidence)
    suggested = only(report.findings, "amd.hsa_override_suggested")
    assert suggested.fix[0] == "export HSA_OVERRIDE_GFX_VERSION=10.3.0"
    assert suggested.severity == "warning"


def test_gfx_unsupported_without_an_override_family(machine: FakeMachine) -> None:
    machine.pci("0000:03:00.0", 0x1002, 0x6860, class_code=0x038000, driver="amdgpu")
    machine.lsmod("lsmod-amdgpu.txt")
    machine.write("dev/kfd", "", mode=0o666)
    machine.command("rocminfo", stdout=machine.fixture("amd/rocminfo-7x-mi25-threadripper.txt"))
    report = machine.doctor()
    assert "amd.gfx_unsupported" in ids(report.findings)
    assert "amd.hsa_override_suggested" not in ids(report.findings)
    finding = next(f for f in report.findings if f.id == "amd.gfx_unsupported")
    assert any("version unknown" in e for e in finding.evidence)


def test_matching_override_makes_it_run(machine: FakeMachine) -> None:
    machine.amd_rx6700xt()
    machine.env["HSA_OVERRIDE_GFX_VERSION"] = "10.3.0"
    report = machine.doctor()
    assert "amd.hsa_override_active" in ids(report.findings)
    assert not {"amd.gfx_unsupported", "amd.hsa_override_suggested"} & ids(report.findings)


def test_override_from_another_family_is_an_error(machine: FakeMachine) -> None:
    machine.amd_rx6700xt()
    machine.env["HSA_OVERRIDE_GFX_VERSION"] = "11.0.0"
    finding = only(machine.doctor().findings, "amd.hsa_override_mismatch")
    assert "HSA_OVERRIDE_GFX_VERSION=11.0.0 makes the runtime treat the GPU as gfx1100" in finding.evidence
    assert (
        "export HSA_OVERRIDE_GFX_VERSION=10.3.0   # the value for this GPU's family, if it needs one"
        in finding.fix
    )


@pytest.mark.parametrize("value", ["10.3", "gfx1030", "10,3,0", "", "10.3.0.1"])
def test_malformed_override_is_an_error_with_evidence(machine: FakeMachine, value: str) -> None:
    machine.amd_rx6700xt()
    machine.env["HSA_OVERRIDE_GFX_VERSION"] = value
    finding = only(machine.doctor().findings, "amd.hsa_override_malformed")
    assert f"HSA_OVERRIDE_GFX_VERSION={value!r} is not MAJOR.MINOR.STEPPING" in finding.evidence


def test_per_device_override_applies_to_its_device(machine: FakeMachine) -> None:
    machine.amd_rx6700xt()
    machine.env["HSA_OVERRIDE_GFX_VERSION_0"] = "10.3.0"
    assert "amd.hsa_override_active" in ids(machine.doctor().findings)


def test_override_on_a_supported_gpu_is_only_info(machine: FakeMachine) -> None:
    machine.amd_mi100()
    machine.env["HSA_OVERRIDE_GFX_VERSION"] = "9.0.8"
    report = machine.doctor()
    assert "amd.hsa_override_unneeded" in ids(report.findings) and report.exit_code == 0


def test_rocm_not_installed(machine: FakeMachine) -> None:
    machine.amd_mi100()
    (machine.bin / "rocm-smi").unlink()
    (machine.root / "opt/rocm/.info/version").unlink()
    (machine.root / "opt/rocm/.info").rmdir()
    (machine.root / "opt/rocm").rmdir()
    finding = only(machine.doctor().findings, "amd.rocm_not_installed")
    assert any("Mesa" in step for step in finding.fix)


# ---------------------------------------------------------------------------------------- runtime
def test_cpu_build_on_an_nvidia_host_suggests_the_cuda_wheel_for_the_driver(machine: FakeMachine) -> None:
    machine.nvidia_a100(torch="cpu_build")
    finding = only(machine.doctor().findings, "torch.cpu_build_on_gpu_host")
    # driver CUDA 12.2 -> the newest PyTorch CUDA index not newer than it: cu121
    assert "pip install torch --index-url https://download.pytorch.org/whl/cu121" in finding.fix


def test_cpu_build_on_an_amd_host_suggests_the_rocm_wheel(machine: FakeMachine) -> None:
    machine.amd_mi100(torch="cpu_build")
    finding = only(machine.doctor().findings, "torch.cpu_build_on_gpu_host")
    assert "pip install torch --index-url https://download.pytorch.org/whl/rocm6.0" in finding.fix


def test_cuda_build_on_amd_host(machine: FakeMachine) -> None:
    machine.amd_mi100(torch="cuda_unavailable")
    finding = only(machine.doctor().findings, "torch.cuda_build_on_amd_host")
    assert "pip install torch --index-url https://download.pytorch.org/whl/rocm6.0" in finding.fix


def test_rocm_build_on_nvidia_host(machine: FakeMachine) -> None:
    machine.nvidia_a100(torch="rocm_ok")
    assert "torch.rocm_build_on_nvidia_host" in ids(machine.doctor().findings)


def test_torch_built_for_a_newer_cuda_major_than_the_driver(machine: FakeMachine) -> None:
    machine.nvidia_a100(torch="cuda121_build")
    machine.command("nvidia-smi", stdout=machine.fixture("nvidia-smi/telegraf-tesla-t4.xml"))  # CUDA 11.7
    finding = only(machine.doctor().findings, "torch.cuda_newer_than_driver")
    assert "driver supports CUDA 11.7 (nvidia-smi)" in finding.evidence
    assert (
        "pip install torch --index-url https://download.pytorch.org/whl/cu118   # a build the driver supports"
        in finding.fix
    )


def test_gpu_build_that_does_not_see_the_gpu(machine: FakeMachine) -> None:
    machine.nvidia_a100(torch="cuda_unavailable")
    finding = only(machine.doctor().findings, "torch.gpu_not_available")
    assert any("is_available() = False" in e for e in finding.evidence)


def test_torch_not_installed_in_the_examined_interpreter(machine: FakeMachine, tmp_path: Path) -> None:
    machine.nvidia_a100(torch=None)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    report = machine.doctor(python=str(venv / "bin" / "python"))
    finding = only(report.findings, "torch.not_installed")
    assert "pip install torch --index-url https://download.pytorch.org/whl/cu121" in finding.fix


def test_probe_that_hangs_is_killed(machine: FakeMachine) -> None:
    machine.nvidia_a100(torch="import_hangs")
    finding = only(machine.doctor(timeout_cap_s=2.0).findings, "torch.probe_timeout")
    assert any("did not finish within 2 s" in e for e in finding.evidence)


def test_probe_that_fails_to_import(machine: FakeMachine) -> None:
    machine.nvidia_a100(torch="import_fails")
    finding = only(machine.doctor().findings, "torch.probe_failed")
    assert any("libtorch_cuda.so" in e for e in finding.evidence)


# ---------------------------------------------------------------------------------------- containers
def test_nvidia_runtime_missing(machine: FakeMachine) -> None:
    machine.nvidia_a100()
    machine.command("docker", stdout=machine.data("docker-runtimes-no-nvidia.json"))
    (machine.bin / "nvidia-container-cli").unlink()
    finding = only(machine.doctor().findings, "container.nvidia_runtime_missing")
    assert "docker runtimes: io.containerd.runc.v2, io.containerd.runtime.v1.linux, runc" in finding.evidence
    assert "sudo nvidia-ctk runtime configure --runtime=docker" in finding.fix
    assert "docker run --rm --gpus all nvidia/cuda:12.2.0-base-ubuntu22.04 nvidia-smi" in finding.fix


def test_daemon_json_runtime_counts_when_the_daemon_is_down(machine: FakeMachine) -> None:
    machine.nvidia_a100()
    machine.command(
        "docker",
        stdout=machine.data("docker-info-daemon-down.stdout"),
        stderr=machine.data("docker-info-daemon-down.stderr"),
        rc=1,
    )
    (machine.bin / "nvidia-container-cli").unlink()
    machine.write(
        "etc/docker/daemon.json",
        '{"runtimes": {"nvidia": {"args": [], "path": "/usr/bin/nvidia-container-runtime"}}}',
    )
    report = machine.doctor()
    assert "container.nvidia_runtime_missing" not in ids(report.findings)
    unreachable = only(report.findings, "container.docker_unreachable")
    assert any("Cannot connect to the Docker daemon" in e for e in unreachable.evidence)


def test_amd_gets_the_working_docker_line(machine: FakeMachine) -> None:
    machine.amd_mi100()
    finding = only(machine.doctor().findings, "container.amd_device_flags")
    assert finding.fix == [
        "docker run --rm --device /dev/kfd --device /dev/dri --security-opt seccomp=unconfined "
        "--group-add video rocm/dev-ubuntu-22.04:6.0 rocminfo"
    ]


# ---------------------------------------------------------------------------------------- WSL2
def _wsl(machine: FakeMachine) -> None:
    machine.write("proc/version", machine.data("proc-version-wsl2.txt").read_text())
    machine.write("dev/dxg", "")
    machine.write("usr/lib/wsl/lib/libcuda.so.1", b"\x7fELF")
    machine.write("usr/lib/wsl/lib/nvidia-smi", b"\x7fELF")
    machine.command("nvidia-smi", stdout=machine.fixture("nvidia-smi/telegraf-rtx-3080-v13.xml"))
    machine.torch("cuda_ok")


def test_wsl_detected_with_windows_guidance(machine: FakeMachine) -> None:
    _wsl(machine)
    report = machine.doctor()
    found = ids(report.findings)
    assert {"wsl.detected", "windows.nvidia_installer_0xe6000000", "windows.nvidia_app_0x80070002"} <= found
    assert "nvidia.module_not_loaded" not in found  # WSL has no nvidia kernel module by design
    assert "wsl.linux_driver_installed" not in found
    assert report.exit_code == 0


def test_linux_driver_installed_inside_wsl(machine: FakeMachine) -> None:
    _wsl(machine)
    machine.write(
        "var/lib/dpkg/status",
        "Package: nvidia-driver-550\nStatus: install ok installed\nPriority: optional\n"
        "Version: 550.120-0ubuntu0.22.04.1\n\nPackage: bash\nStatus: install ok installed\nVersion: 5.1\n",
    )
    machine.write("usr/lib/x86_64-linux-gnu/libcuda.so.550.120", b"\x7fELF")
    finding = only(machine.doctor().findings, "wsl.linux_driver_installed")
    assert "dpkg: nvidia-driver-550 550.120-0ubuntu0.22.04.1 installed" in finding.evidence
    assert any("libcuda.so.550.120" in e for e in finding.evidence)


def test_wsl_without_dxg(machine: FakeMachine) -> None:
    machine.write("proc/version", machine.data("proc-version-wsl2.txt").read_text())
    assert "wsl.no_gpu_device" in ids(machine.doctor().findings)


# ---------------------------------------------------------------------------------------- mixed hosts
def test_a_gpu_bound_to_vfio_is_not_judged_on_the_host(machine: FakeMachine) -> None:
    machine.pci("0000:01:00.0", 0x10DE, 0x20B2, driver="vfio-pci")
    machine.lsmod("lsmod-header-only.txt")
    report = machine.doctor()
    assert (
        "PCI 0000:01:00.0 [10de:20b2] NVIDIA A100 80GB SXM: bound to vfio-pci"
        in only(report.findings, "gpu.passthrough").evidence
    )
    assert "nvidia.module_not_loaded" not in ids(report.findings)
    assert report.exit_code == 0


def test_an_amd_display_gpu_next_to_an_nvidia_gpu_without_rocm_is_only_info(machine: FakeMachine) -> None:
    machine.nvidia_a100()
    machine.pci("0000:0c:00.0", 0x1002, 0x73FF, class_code=0x030000, driver="amdgpu")
    # `lsmod | grep nvidia` and `lsmod | grep amdgpu` captures, printed together
    machine.command("lsmod", stdout=[machine.data("lsmod-nvidia-535.txt"), machine.data("lsmod-amdgpu.txt")])
    machine.write("dev/kfd", "", mode=0o666)
    report = machine.doctor()
    assert only(report.findings, "amd.rocm_not_installed").severity == "info"
