"""One reading of the CPU (gpuledger.facts.cpu) for the system facts, the CPU telemetry device and the
in-process engine: the model name from /proc/cpuinfo as x86, ARM and MIPS kernels print it, and the
logical CPUs this process may use."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from doctor_harness import FakeMachine

from gpuledger.facts.cpu import cpu_model_from_cpuinfo, cpu_model_name, usable_cpus
from gpuledger.telemetry.cpu import cpu_device

X86 = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9474F 48-Core Processor\n"
ARM = "processor\t: 0\nBogoMIPS\t: 108.00\nHardware\t: BCM2835\nModel\t\t: Raspberry Pi 4 Model B Rev 1.4\n"
MIPS = "system type\t\t: MT7621\nprocessor\t\t: 0\ncpu model\t\t: MIPS 1004Kc V2.15\n"


@pytest.mark.parametrize(
    ("text", "model"),
    [(X86, "AMD EPYC 9474F 48-Core Processor"), (ARM, "Raspberry Pi 4 Model B Rev 1.4"),
     (MIPS, "MIPS 1004Kc V2.15"), ("processor\t: 0\nmodel name\t:\n", None), ("", None)],
)
def test_the_model_line_of_cpuinfo(text: str, model: str | None) -> None:
    assert cpu_model_from_cpuinfo(text) == model


def test_facts_telemetry_and_the_name_function_agree(machine: FakeMachine, tmp_path: Path) -> None:
    machine.write("proc/cpuinfo", X86 + "\nprocessor\t: 1\n" + X86.split("\n", 1)[1])
    assert machine.facts().system.cpu_model == "AMD EPYC 9474F 48-Core Processor"
    assert cpu_model_name(machine.root) == "AMD EPYC 9474F 48-Core Processor"
    assert cpu_device(machine.root).name == "AMD EPYC 9474F 48-Core Processor"
    assert cpu_model_name(tmp_path / "no-proc")  # no cpuinfo: the platform's name, never empty


def test_usable_cpus_is_the_affinity_set_of_this_process() -> None:
    assert usable_cpus() == len(os.sched_getaffinity(0)) >= 1
