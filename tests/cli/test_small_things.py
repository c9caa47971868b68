"""Small things a newcomer stumbled on (issue 15): an unknown vendor is an error naming the known ones, the
power price says its currency, and a CPU run is not told that "the GPU serves all the time"."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuledger.cli.main import app, main

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
IDS: dict[str, str] = json.loads((GOLDEN / "ids.json").read_text())


@pytest.fixture(scope="module")
def golden_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    d = tmp_path_factory.mktemp("golden-small")
    shutil.copy(GOLDEN / "store-v1.sqlite", d / "store.sqlite")
    return f"sqlite:///{d / 'store.sqlite'}"


def test_gpus_of_a_vendor_the_catalog_does_not_know_is_exit_3_naming_the_vendors_it_knows(
    capsys: pytest.CaptureFixture[str],
) -> None:
    known = {g["vendor"] for g in json.loads(CliRunner().invoke(app, ["gpus", "--json"]).stdout)["gpus"]}
    for args in (["gpus", "--vendor", "intel"], ["gpus", "--vendor", "intel", "--json"]):
        assert main(args) == 3
        out, err = capsys.readouterr()
        assert out == ""  # no empty table, no empty JSON list
        line = err.strip()
        assert line.startswith("error:") and "intel" in line and len(line.splitlines()) == 1, err
        assert all(v in line for v in known), line
    assert main(["gpus", "--vendor", "AMD"]) == 0
    assert "mi300x" in capsys.readouterr().out


def test_profiles_show_the_power_price_with_its_currency() -> None:
    doc = json.loads(CliRunner().invoke(app, ["profiles", "--json"]).stdout)
    out = CliRunner().invoke(app, ["profiles"], env={"COLUMNS": "200"}).stdout
    owned = [p for p in doc["profiles"] if p["mode"] == "ownership"]
    assert owned
    for p in owned:
        row = next(line for line in out.splitlines() if line.startswith(p["name"] + " "))
        assert f"{p['electricity_per_kwh']:g} {p['currency']}/kWh" in row, row
    assert not re.search(r"\d /kWh|\d/kWh", out)  # never a bare number per kWh


def test_a_cpu_run_is_not_told_that_the_gpu_serves_all_the_time(golden_db: str) -> None:
    run = IDS["torch"]  # an in-process run on this machine's CPU
    doc = json.loads(CliRunner().invoke(app, ["cost", run, "--no-save", "--json"],
                                        env={"GPULEDGER_DB": golden_db}).stdout)
    assert doc["devices"]["kind"] == "cpu"
    source = doc["inputs"]["utilisation"]["source"]
    assert "100 % utilisation" in source and "GPU serves" not in source and "hardware serves" in source
    text = CliRunner().invoke(app, ["cost", run, "--no-save"], env={"GPULEDGER_DB": golden_db,
                                                                    "COLUMNS": "200"}).stdout
    assert "GPU serves" not in text


def test_only_warnings_about_noise_are_called_noisy(golden_db: str) -> None:
    """The golden torch run ran on a busy CPU, and on the CPU because PyTorch is a CPU build: the first is why
    its figures are noisy, the second is where it ran (a warning, not noise)."""
    doc = json.loads(CliRunner().invoke(app, ["report", IDS["torch"], "--profile", "cpu-cloud", "--json"],
                                        env={"GPULEDGER_DB": golden_db}).stdout)
    why = doc["sections"][0]["answers"][0]["why"]
    noisy = [line for line in why if line.startswith("noisy:")]
    assert [line.split(" (")[0] for line in noisy] == ["noisy: the CPU is busy"], why
    assert not any("running on the CPU" in line for line in why)


def test_an_arm_instance_price_on_an_x86_run_is_warned_and_the_default_is_the_runs_own(
    golden_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`cpu-cloud` is an arm64 instance (AWS m7g): it prices the golden x86_64 torch run only with a warning
    that the price is another architecture's; without --profile the run is priced at an x86_64 instance."""
    env = {"GPULEDGER_DB": golden_db}

    def cost(*args: str) -> dict:
        result = CliRunner().invoke(app, ["cost", IDS["torch"], "--no-save", "--json", *args], env=env)
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    arm = cost("--profile", "cpu-cloud")
    assert [w for w in arm["warnings"] if "another architecture" in w] == [
        f"profile 'cpu-cloud' prices an arm64 instance, but run {IDS['torch']} ran on x86_64: the price is "
        "another architecture's (without --profile a CPU run is priced as a cloud instance of its own "
        "architecture)"
    ]
    own = cost()
    assert own["profile"]["name"].startswith("cpu-cloud-x86_64-")
    assert not any("another architecture" in w for w in own["warnings"])
    mine = tmp_path / "graviton.yaml"  # a user's profile says its instance's architecture as platforms do
    mine.write_text("name: graviton\nrental_per_hour: 0.09\ncpu_arch: aarch64\n")
    assert any("prices an arm64 instance" in w for w in cost("--profile", str(mine))["warnings"])
    mine.write_text("name: mine\nrental_per_hour: 0.09\ncpu_arch: sparc\n")
    monkeypatch.setenv("GPULEDGER_DB", golden_db)
    assert main(["cost", IDS["torch"], "--no-save", "--profile", str(mine)]) == 4
    assert "cpu_arch: Input should be 'x86_64' or 'arm64' (got 'sparc')" in capsys.readouterr().err
