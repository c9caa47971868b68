"""--deep: a real matmul and copy (torch in a child process) and the "productive compute %" against
the catalog's peak (seed §1.3)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from doctor_harness import FakeMachine, only

from gpuledger.doctor import diagnose
from gpuledger.facts.model import DeepResult, Facts, GpuSummary, TorchFacts, TorchProbe


def _facts_with(result: DeepResult, name: str) -> Facts:
    facts = Facts(collected_at=datetime.now(UTC), root="/")
    facts.gpus = [GpuSummary(vendor="nvidia", index=0, name=name, source="nvidia-smi (xml)")]
    facts.nvidia.smi_status = "ok"
    facts.nvidia.driver_version, facts.nvidia.cuda_version = "550.54.15", "12.4"
    probe = TorchProbe(
        ran=True,
        ok=True,
        version="2.5.1+cu124",
        cuda="12.4",
        is_available=True,
        device_count=1,
        deep=[result],
    )
    facts.frameworks.torch = TorchFacts(
        installed=True,
        version="2.5.1+cu124",
        build="cuda",
        cuda="12.4",
        source="torch/version.py",
        probe=probe,
    )
    return facts


def test_productive_compute_is_achieved_over_the_catalog_peak() -> None:
    result = DeepResult(
        device="cuda:0",
        device_name="NVIDIA H100 80GB HBM3",
        dtype="float16",
        matmul_n=8192,
        matmul_iterations=20,
        matmul_tflops=692.3,
        copy_bytes=1 << 30,
        copy_iterations=20,
        copy_gb_s=2814.0,
    )
    finding = only(diagnose(_facts_with(result, "NVIDIA H100 80GB HBM3")), "torch.deep_benchmark")
    assert any("productive compute: 70% of 989 TFLOPS" in e for e in finding.evidence)  # H100 SXM, FP16 dense
    assert any("memory bandwidth: 84% of 3350 GB/s" in e for e in finding.evidence)
    assert any("2*n^3 FLOP per matmul" in e for e in finding.evidence)  # the method is stated


def test_unknown_gpu_says_why_there_is_no_percentage() -> None:
    result = DeepResult(
        device="cuda:0",
        device_name="NVIDIA Mystery GPU",
        dtype="float16",
        matmul_n=8192,
        matmul_iterations=20,
        matmul_tflops=10.0,
        copy_bytes=1 << 30,
        copy_iterations=20,
        copy_gb_s=100.0,
    )
    finding = only(diagnose(_facts_with(result, "NVIDIA Mystery GPU")), "torch.deep_benchmark")
    assert "no catalog entry for 'NVIDIA Mystery GPU': productive compute % not available" in finding.evidence


def test_a_failed_measurement_is_a_warning() -> None:
    result = DeepResult(
        device="cuda:0",
        device_name="NVIDIA H100 80GB HBM3",
        dtype="float16",
        matmul_n=8192,
        matmul_iterations=20,
        copy_bytes=1 << 30,
        copy_iterations=20,
        error="OutOfMemoryError: CUDA out of memory",
    )
    finding = only(diagnose(_facts_with(result, "NVIDIA H100 80GB HBM3")), "torch.deep_failed")
    assert "OutOfMemoryError" in finding.evidence[0]


@pytest.mark.slow
def test_deep_on_the_cpu_runs_the_real_torch_in_a_child_process(machine: FakeMachine) -> None:
    machine.no_pci_gpu()
    machine.torch(None)  # the real torch of this interpreter (a CPU build here)
    report = machine.doctor(deep=True, timeout_cap_s=280.0)
    probe = report.facts.frameworks.torch.probe
    assert probe is not None and probe.ok, probe
    (result,) = probe.deep
    assert result.device == "cpu" and result.matmul_tflops is not None and result.matmul_tflops > 0
    assert result.copy_gb_s is not None and result.copy_gb_s > 0
    finding = only(report.findings, "torch.deep_benchmark")
    assert "cpu: no catalog peak for CPUs: productive compute % not available" in finding.evidence
