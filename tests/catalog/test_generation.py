"""Every GPU of the catalog names its hardware generation — its architecture and the year its vendor began
shipping it — as sourced facts like its figures, which compare's like-for-like check reads
(cost/comparison/likeness.py); `gpuledger gpus` shows them and a user's file may give them too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuledger.catalog import load_catalog
from gpuledger.catalog.model import FIRST_YEAR, LAST_YEAR
from gpuledger.cli.main import main
from gpuledger.errors import InvalidInputError

# The generation of each built-in part as the project's reference notes give it ("arch" and "year" columns),
# and where the catalog departs from them (each departure says why in its note).
EXPECTED = {
    "h100-sxm": ("Hopper", 2022), "h100-pcie": ("Hopper", 2022), "h200": ("Hopper", 2024),
    "b200": ("Blackwell", 2024), "gb200": ("Blackwell", 2025),
    "a100-sxm4-80gb": ("Ampere", 2020), "a100-sxm4-40gb": ("Ampere", 2020),
    "a100-pcie-40gb": ("Ampere", 2020),
    "l40s": ("Ada Lovelace", 2023), "l4": ("Ada Lovelace", 2023), "a10": ("Ampere", 2021),
    "rtx-4090": ("Ada Lovelace", 2022), "rtx-3090": ("Ampere", 2020), "rtx-5090": ("Blackwell", 2025),
    "rtx-6000-ada": ("Ada Lovelace", 2022),
    "mi300x": ("CDNA3", 2023), "mi325x": ("CDNA3", 2024), "mi355x": ("CDNA4", 2025),
    "mi250x": ("CDNA2", 2021), "mi210": ("CDNA2", 2022),
    "rx-7900-xtx": ("RDNA3", 2022), "radeon-pro-w7900": ("RDNA3", 2023), "rx-9070-xt": ("RDNA4", 2025),
}
# Reference notes: B200 and MI325X 2025 (broad availability); the catalog's year is when shipping began.
DEPARTURES = {"b200", "mi325x"}


def test_every_builtin_gpu_names_its_architecture_and_launch_year_with_a_source() -> None:
    catalog = load_catalog()
    assert {s.key for s in catalog} == set(EXPECTED)
    for spec in catalog:
        arch, year = spec.fact("architecture"), spec.fact("launch_year")
        assert (spec.architecture_name, spec.year) == EXPECTED[spec.key], spec.key
        for fact in (arch, year):
            assert fact.source.strip() and fact.source_id and fact.date, (spec.key, fact)
        assert FIRST_YEAR <= (spec.year or 0) <= LAST_YEAR


def test_a_year_that_departs_from_the_reference_notes_is_an_estimate_saying_why() -> None:
    catalog = load_catalog()
    for key in DEPARTURES:
        year = catalog.get(key).fact("launch_year")
        assert year.is_estimate and year.source_id != "ref"
        assert "2025" in (year.note or "") and "reference notes" in (year.note or ""), key
    assert all(catalog.get(k).fact("launch_year").source_id == "ref" for k in set(EXPECTED) - DEPARTURES)


def test_the_generations_the_like_for_like_check_relies_on() -> None:
    catalog = load_catalog()
    # The pairs: a 2024 Blackwell part against a 2023 CDNA3 one; H200 and MI325X both shipped in 2024.
    assert catalog.get("b200").year != catalog.get("mi300x").year
    assert catalog.get("h200").year == catalog.get("mi325x").year == 2024
    assert catalog.get("h200").architecture_name != catalog.get("mi325x").architecture_name


def _user_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gpu: str) -> Path:
    path = tmp_path / "gpus.yaml"
    path.write_text("sources:\n  lab: {title: our lab, date: '2026-10'}\ngpus:\n  x:\n    vendor: nvidia\n"
                    f"    name: X Card\n{gpu}")
    monkeypatch.setenv("GPULEDGER_CATALOG", str(path))
    return path


def test_a_users_file_may_give_the_generation_sourced_or_as_bare_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _user_file(tmp_path, monkeypatch, "    architecture: {value: Lab9, source: lab}\n    launch_year: 2026\n")
    spec = load_catalog().get("x")
    assert spec.architecture_name == "Lab9" and spec.fact("architecture").source == "our lab"
    assert spec.year == 2026 and spec.fact("launch_year").source.startswith("as written in ")
    path = _user_file(tmp_path, monkeypatch, "    architecture: Volta\n    year: 2017\n")
    older = load_catalog().get("x")
    assert (older.architecture_name, older.year) == ("Volta", 2017)
    assert older.fact("launch_year").source == f"as written in {path}"


def test_a_part_without_a_generation_says_so_instead_of_a_blank() -> None:
    catalog = load_catalog()
    from dataclasses import replace

    bare = replace(catalog.get("h200"), architecture=None, launch_year=None)
    assert bare.year is None and bare.architecture_name is None
    assert "launch_year not in the catalog" in (bare.fact("launch_year").reason or "")
    assert bare.fact("architecture").text() == "—"


@pytest.mark.parametrize(
    ("gpu", "expected"),
    [
        ("    launch_year: {value: 20244, source: lab}\n", "gpus.x.launch_year.value: Input should be less"),
        ("    launch_year: {value: 2024}\n", "needs a `source`"),
        ("    architecture: {value: Hopper, source: nowhere}\n", "unknown source 'nowhere'"),
        ("    architecture: {value: null}\n", "needs a `reason`"),
        ("    launch_year: 2024\n    year: 2024\n", "not both"),
        ("    architecture: {value: Hopper, source: lab, vintage: 1}\n", "architecture.vintage: unknown"),
    ],
)
def test_a_bad_generation_in_a_users_file_is_one_line_naming_the_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gpu: str, expected: str
) -> None:
    _user_file(tmp_path, monkeypatch, gpu)
    with pytest.raises(InvalidInputError) as err:
        load_catalog()
    assert expected in err.value.message and "\n" not in err.value.message


def test_gpus_shows_the_generation_and_its_json_carries_the_sources(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["gpus", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    h200 = next(g for g in doc["gpus"] if g["key"] == "h200")
    assert h200["architecture"]["value"] == "Hopper" and h200["architecture"]["source_id"] == "ref"
    assert h200["launch_year"]["value"] == 2024 and h200["launch_year"]["date"] == "2026-11"
    b200 = next(g for g in doc["gpus"] if g["key"] == "b200")
    assert b200["launch_year"]["confidence"] == "estimate" and b200["launch_year"]["url"]
    assert main(["gpus", "--vendor", "amd"]) == 0
    out = capsys.readouterr().out
    assert "Hardware generation" in out
    row = next(line for line in out.splitlines() if line.startswith("mi325x") and "CDNA3" in line)
    assert "2024?" in row
