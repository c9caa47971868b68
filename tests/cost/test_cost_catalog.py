"""The GPU catalog: every part issue 6 lists, every figure sourced and dated, names as tools print them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuledger.catalog import FIGURE_UNITS, Catalog, load_catalog, normalise_name
from gpuledger.errors import InvalidInputError, NotFoundError

ISSUE_PARTS = {
    # issue 6: "at least H100 SXM/PCIe, H200, B200, A100 40/80, L40S, L4, A10, RTX 3090/4090/5090,
    # RTX 6000 Ada, MI300X, MI325X, MI355X, MI250X, MI210, RX 7900 XTX, PRO W7900, RX 9070 XT"
    "h100-sxm",
    "h100-pcie",
    "h200",
    "b200",
    "a100-sxm4-40gb",
    "a100-pcie-40gb",
    "a100-sxm4-80gb",
    "l40s",
    "l4",
    "a10",
    "rtx-3090",
    "rtx-4090",
    "rtx-5090",
    "rtx-6000-ada",
    "mi300x",
    "mi325x",
    "mi355x",
    "mi250x",
    "mi210",
    "rx-7900-xtx",
    "radeon-pro-w7900",
    "rx-9070-xt",
}


def test_every_part_issue_6_lists_is_in_the_catalog(catalog: Catalog) -> None:
    keys = {s.key for s in catalog}
    assert keys >= ISSUE_PARTS


def test_every_figure_has_a_source_and_a_date_or_a_reason(catalog: Catalog) -> None:
    for spec in catalog:
        for name in FIGURE_UNITS:
            fig = spec.figure(name)
            if fig.value is None:
                assert fig.reason, f"{spec.key}.{name} has neither value nor reason"
            else:
                assert fig.source and fig.date, f"{spec.key}.{name} lacks source/date"
                assert re.fullmatch(r"\d{4}(-\d{2}(-\d{2})?)?", fig.date)


def test_core_specs_are_present_for_every_issue_part(catalog: Catalog) -> None:
    for key in ISSUE_PARTS:
        spec = catalog.get(key)
        for name in ("memory_gb", "bandwidth_tb_s", "fp16_tflops", "tdp_w"):
            assert spec.figure(name).available, f"{key}.{name}"
        assert spec.pci_device_ids
        assert spec.compute_capability or spec.gfx_target


@pytest.mark.parametrize(
    ("key", "field"),
    [
        ("rtx-5090", "fp16_tflops"),
        ("rtx-6000-ada", "fp16_tflops"),
        ("mi355x", "fp16_tflops"),
        ("rx-7900-xtx", "fp16_tflops"),
        ("l4", "rental_usd_per_gpu_hour"),
        ("h100-pcie", "launch_price_usd"),
        ("gb200", "tdp_w"),
    ],
)
def test_figures_marked_uncertain_in_the_reference_are_labelled_estimates(
    catalog: Catalog, key: str, field: str
) -> None:
    assert catalog.get(key).figure(field).confidence == "estimate"


def test_reference_figures_are_carried_over_exactly(catalog: Catalog) -> None:
    h100 = catalog.get("h100-sxm")
    assert (
        h100.figure("bandwidth_tb_s").value,
        h100.figure("fp16_tflops").value,
        h100.figure("tdp_w").value,
    ) == (3.35, 989, 700)
    mi300x = catalog.get("mi300x")
    assert mi300x.figure("fp8_tflops").value == 2614.9 and mi300x.gfx_target == "gfx942"
    assert catalog.get("rtx-4090").figure("launch_price_usd").value == 1599
    assert catalog.get("rtx-4090").figure("launch_price_usd").confidence == "published"


@pytest.mark.parametrize(
    ("printed", "key"),
    [
        ("NVIDIA H200", "h200"),
        ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"),
        ("NVIDIA A100-SXM4-40GB", "a100-sxm4-40gb"),
        ("NVIDIA A100-PCIE-40GB", "a100-pcie-40gb"),
        ("NVIDIA GeForce RTX 4090", "rtx-4090"),
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA RTX 6000 Ada Generation", "rtx-6000-ada"),
        ("AMD Instinct MI300X", "mi300x"),
        ("Radeon RX 7900 XTX", "rx-7900-xtx"),
        ("AMD Radeon PRO W7900", "radeon-pro-w7900"),
        ("rtx-4090", "rtx-4090"),
        ("mi300x", "mi300x"),
    ],
)
def test_names_as_the_vendor_tools_print_them_resolve(catalog: Catalog, printed: str, key: str) -> None:
    spec = catalog.find(printed)
    assert spec is not None and spec.key == key


def test_an_ambiguous_short_name_is_not_guessed_but_suggested(catalog: Catalog) -> None:
    assert catalog.find("H100") is None
    assert {"h100-sxm", "h100-pcie"} <= set(catalog.suggestions("H100"))
    with pytest.raises(NotFoundError) as err:
        catalog.resolve("H100")
    assert err.value.hint and "h100-sxm" in err.value.hint and err.value.exit_code == 3


def test_unknown_parts_are_none_not_a_near_miss(catalog: Catalog) -> None:
    assert catalog.find("Tesla T4") is None
    assert catalog.find("NVIDIA H200 NVL") is None
    assert catalog.find("Navi 31 [Radeon RX 7900 XT/7900 XTX/7900 GRE/7900M]") is None


def test_no_two_builtin_entries_claim_the_same_name(catalog: Catalog) -> None:
    seen: dict[str, str] = {}
    for spec in catalog:
        for label in {normalise_name(x) for x in (spec.key, spec.name, *spec.aliases)}:
            assert label not in seen, f"{label!r} claimed by {seen.get(label)} and {spec.key}"
            seen[label] = spec.key


def _nvidia_smi_names_and_ids(fixtures_dir: Path) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for path in sorted((fixtures_dir / "nvidia-smi").iterdir()):
        text = path.read_text(errors="replace")
        names = re.findall(r"Product Name\s+:\s+(.+)|<product_name>(.+?)</product_name>", text)
        ids = re.findall(r"Device Id\s+:\s+0x([0-9A-Fa-f]{4})10DE|<pci_device_id>([0-9A-Fa-f]{4})10DE<", text)
        for (n1, n2), (i1, i2) in zip(names, ids, strict=False):
            out.append(((n1 or n2).strip(), int(i1 or i2, 16)))
    return out


def test_real_nvidia_smi_outputs_name_and_pci_id_agree_with_the_catalog(
    catalog: Catalog, fixtures_dir: Path
) -> None:
    pairs = _nvidia_smi_names_and_ids(fixtures_dir)
    known = {name: dev for name, dev in pairs if catalog.find(name) is not None}
    # the fixtures hold an RTX 4090, an A10 and A100 SXM4 40/80 GB (and parts outside the catalog)
    assert {"NVIDIA GeForce RTX 4090", "NVIDIA A10", "NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-40GB"} <= set(
        known
    )
    for name, dev in known.items():
        by_pci = catalog.find_pci(0x10DE, dev)
        assert by_pci is not None and by_pci.key == catalog.find(name).key  # type: ignore[union-attr]


def test_real_rocminfo_marketing_name_resolves(catalog: Catalog, fixtures_dir: Path) -> None:
    text = (fixtures_dir / "amd" / "rocminfo-4x-mi300x-epyc9474f.txt").read_text()
    gpu_names = {m.strip() for m in re.findall(r"Marketing Name:\s+(.+)", text) if "Instinct" in m}
    assert gpu_names == {"AMD Instinct MI300X"}
    assert catalog.find("AMD Instinct MI300X").key == "mi300x"  # type: ignore[union-attr]
    assert "gfx942" in text and catalog.get("mi300x").gfx_target == "gfx942"


def test_find_pci_accepts_hex_strings_and_ints(catalog: Catalog) -> None:
    assert catalog.find_pci("0x10de", "0x2330").key == "h100-sxm"  # type: ignore[union-attr]
    assert catalog.find_pci(0x1002, "74a1").key == "mi300x"  # type: ignore[union-attr]
    assert catalog.find_pci(0x10DE, 0x0001) is None


def test_a_pci_id_shared_by_sibling_cards_is_not_resolved_to_one_of_them(catalog: Catalog) -> None:
    assert catalog.find_pci(0x1002, 0x744C) is None  # RX 7900 XTX / XT / GRE
    assert [s.key for s in catalog.find_pci_all(0x1002, 0x744C)] == ["rx-7900-xtx"]


def test_find_gfx_lists_parts_of_a_target(catalog: Catalog) -> None:
    assert {s.key for s in catalog.find_gfx("gfx942")} == {"mi300x", "mi325x"}


def test_mi250x_figures_per_logical_device_are_half_the_package(catalog: Catalog) -> None:
    spec = catalog.get("mi250x")
    assert spec.device_figure("bandwidth_tb_s").value == pytest.approx(1.64)
    assert spec.device_figure("fp16_tflops").value == pytest.approx(191.5)
    assert spec.device_figure("memory_gb").value == pytest.approx(64)
    assert "per logical device" in (spec.device_figure("tdp_w").note or "")


USER_FILE = """
sources:
  my-bench: {title: "our lab measurement", date: "2026-10"}
gpus:
  my-card:
    vendor: nvidia
    name: NVIDIA Lab Card 9000
    pci_device_ids: ["0xbeef"]
    memory_gb: {value: 96, source: my-bench}
    bandwidth_tb_s: {value: 2.5, source: my-bench}
    fp16_tflops: {value: 500, source: my-bench}
    tdp_w: {value: 450, source: my-bench}
    launch_price_usd: {value: 9000, source: my-bench, confidence: estimate}
  l4:
    vendor: nvidia
    name: NVIDIA L4
    memory_gb: {value: 24, source: my-bench}
    bandwidth_tb_s: {value: 0.3, source: my-bench}
    fp16_tflops: {value: 121, source: my-bench}
    tdp_w: {value: 72, source: my-bench}
    launch_price_usd: {value: 2100, source: my-bench}
"""


def test_a_user_catalog_file_adds_parts_and_overrides_builtin_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "gpus.yaml"
    path.write_text(USER_FILE)
    monkeypatch.setenv("GPULEDGER_CATALOG", str(path))
    cat = load_catalog()
    mine = cat.find("NVIDIA Lab Card 9000")
    assert mine is not None and mine.origin == str(path)
    assert cat.find_pci(0x10DE, 0xBEEF) is mine
    assert cat.get("l4").figure("launch_price_usd").value == 2100
    assert cat.get("l4").figure("launch_price_usd").source == "our lab measurement"
    assert cat.files == ["built-in", str(path)]


def test_the_default_user_catalog_location_is_read_when_present(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GPULEDGER_CATALOG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    (tmp_path / "gpuledger").mkdir()
    (tmp_path / "gpuledger" / "gpus.yaml").write_text(USER_FILE)
    assert load_catalog().find("NVIDIA Lab Card 9000") is not None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "gpus:\n  x:\n    vendor: nvidia\n    name: X\n    memory_gib: {value: 1, source: ref}\n",
            "gpus.x.memory_gib: unknown field",
        ),
        (
            "gpus:\n  x:\n    vendor: nvidia\n    name: X\n    tdp_w: {value: -5, source: ref}\n",
            "gpus.x.tdp_w",
        ),
        ("gpus:\n  x:\n    vendor: nvidia\n    name: X\n    tdp_w: {value: 300}\n", "needs a `source`"),
        (
            "gpus:\n  x:\n    vendor: nvidia\n    name: X\n    tdp_w: {value: 300, source: nowhere}\n",
            "unknown source 'nowhere'",
        ),
        ("gpus:\n  x:\n    vendor: nvidia\n    name: X\n    tdp_w: {value: null}\n", "needs a `reason`"),
        (
            "gpus:\n  x:\n    vendor: nvidia\n    name: X\n    pci_device_ids: [zz]\n",
            "not a hexadecimal PCI id",
        ),
        ("gpus: [1, 2\n", "not valid YAML"),
        ("- a list\n", "expected a mapping"),
    ],
)
def test_a_bad_user_catalog_is_one_clear_line_naming_the_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, expected: str
) -> None:
    path = tmp_path / "gpus.yaml"
    path.write_text(text)
    monkeypatch.setenv("GPULEDGER_CATALOG", str(path))
    with pytest.raises(InvalidInputError) as err:
        load_catalog()
    assert expected in err.value.message and "\n" not in err.value.message
    assert str(path) in err.value.message


def test_a_catalog_file_named_by_the_environment_must_exist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPULEDGER_CATALOG", str(tmp_path / "missing.yaml"))
    with pytest.raises(NotFoundError):
        load_catalog()
