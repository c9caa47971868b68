"""``gpuledger sample``: real CLI entry point, real psutil and files; GPU libraries faked at the import
boundary so that the outcome does not depend on the test machine."""

from __future__ import annotations

import json
import types
from collections.abc import Callable
from pathlib import Path

import pytest
from telemetry_fakes import write_zone

from gpuledger.cli.main import main

Install = Callable[[str], types.ModuleType]


def test_sample_json_on_a_machine_without_gpus(no_gpu_stack: None, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["sample", "--duration", "0.4", "--interval", "0.1", "--json", "--root", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0
    doc = json.loads(out)  # stdout is JSON and nothing else
    assert doc["duration_s"] == 0.4 and doc["interval_s"] == 0.1
    sources = {s["name"]: s for s in doc["sources"]}
    assert sources["nvml"]["available"] is False
    assert sources["nvml"]["reason"].startswith("NVML Shared Library Not Found")
    assert sources["amdsmi"]["reason"].startswith("amdsmi unavailable")
    assert sources["rapl"]["reason"] == "rapl: not present (no /sys/class/powercap)"
    assert sources["psutil"] == {"name": "psutil", "available": True, "reason": None, "devices": ["cpu"]}
    (cpu,) = doc["devices"]
    assert cpu["device"] == "cpu" and cpu["vendor"] == "cpu" and cpu["sources"] == ["psutil"]
    assert 0 <= cpu["mean_util_ratio"] <= 1 and cpu["memory_total_bytes"] > 0
    assert cpu["energy_j"] is None and cpu["energy_method"] is None
    assert cpu["unavailable"]["power_w"] == "rapl: not present (no /sys/class/powercap)"


def test_sample_json_with_gpus_and_rapl(use_nvml: Install, no_gpu_stack: None, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    use_nvml("healthy multi-GPU")
    write_zone(tmp_path, "intel-rapl:0", "package-0", 0)
    rc = main(["sample", "--duration", "0.3", "--json", "--root", str(tmp_path)])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert [d["device"] for d in doc["devices"]] == ["nvidia:0", "nvidia:1", "cpu"]
    gpu0 = doc["devices"][0]
    assert gpu0["name"] == "NVIDIA H100 80GB HBM3" and gpu0["sources"] == ["nvml"]
    assert gpu0["mean_power_w"] == pytest.approx(312.0) and gpu0["energy_method"] in ("counter", "integrated")
    assert doc["devices"][2]["sources"] == ["psutil", "rapl"]
    assert "nvidia-smi" not in {s["name"] for s in doc["sources"]}  # NVML works: no CLI fallback


def test_sample_table_names_units_sources_and_reasons(no_gpu_stack: None, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["sample", "--duration", "0.2", "--root", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0
    for text in ("Telemetry over 0.2 s", "cpu", "GiB", "Sources", "psutil", "rapl: not present",
                 "nvidia-smi: not found on PATH"):
        assert text in out


@pytest.mark.parametrize("args", [["--duration", "0"], ["--duration", "-1"], ["--interval", "0"],
                                  ["--duration", "nan"], ["--duration", "1e300"],
                                  ["--interval", "0.001"]])
def test_bad_values_are_a_usage_error_with_one_line(args: list[str], no_gpu_stack: None,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["sample", *args, "--json"])
    captured = capsys.readouterr()
    assert rc == 2 and captured.out == ""
    # nan is refused before the command runs, like every option's inf/nan (cli/numeric.py)
    said = {"nan": "is not a finite number", "1e300": "must be at most 86400 s",
            "0.001": "must be between 0.01 s"}.get(args[1], "must be a positive number of seconds")
    assert said in captured.err and "Traceback" not in captured.err
    assert captured.err.startswith("error: ") and captured.err.count("error:") == 1
