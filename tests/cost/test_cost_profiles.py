"""Cost profiles: validation naming the field, presets with sources, files extending presets, defaults."""

from __future__ import annotations

from pathlib import Path

import pytest
from cost_runs import MakeRun

from gpuledger.catalog import Catalog
from gpuledger.cost import CostProfile, builtin_presets, default_profile_for, load_profile, profile_from_text
from gpuledger.errors import InvalidInputError, NotFoundError


def bad(text: str) -> str:
    with pytest.raises(InvalidInputError) as err:
        profile_from_text(text, "profile t.yaml")
    msg = err.value.message
    assert "\n" not in msg and msg.startswith("profile t.yaml: ")
    return msg


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("gpu_price: -100\nelectricity_per_kwh: 0.1\n", "gpu_price"),
        ("gpu_price: 0\nelectricity_per_kwh: 0.1\n", "gpu_price"),
        ("rental_per_gpu_hour: 0\n", "rental_per_gpu_hour"),
        ("rental_per_gpu_hour: -2\n", "rental_per_gpu_hour"),
        ("gpu_price: 100\nelectricity_per_kwh: -0.1\n", "electricity_per_kwh"),
        ("rental_per_gpu_hour: 2\nutilisation: 0\n", "utilisation"),
        ("rental_per_gpu_hour: 2\nutilisation: 1.5\n", "utilisation"),
        ("rental_per_gpu_hour: 2\nutilisation: -0.2\n", "utilisation"),
        ("gpu_price: 100\nelectricity_per_kwh: 0.1\npue: 0.8\n", "pue"),
        ("rental_per_gpu_hour: 2\nsetup_hours: -3\n", "setup_hours"),
        ("rental_per_gpu_hour: 2\ngpu_count: 0\n", "gpu_count"),
        ("rental_per_gpu_hour: 2\ncurrency: dollars\n", "currency"),
    ],
)
def test_out_of_range_values_are_one_line_naming_the_field(text: str, field: str) -> None:
    assert f": {field}" in bad(text)


def test_wrong_units_in_a_value_name_the_field_and_its_unit() -> None:
    msg = bad("gpu_price: 100\nelectricity_per_kwh: '0.12 USD/kWh'\n")
    assert "electricity_per_kwh [the profile's currency per kWh]" in msg and "0.12 USD/kWh" in msg


@pytest.mark.parametrize(
    ("key", "suggestion"),
    [
        ("gpu_price_usd", "gpu_price"),
        ("electricity_per_mwh", "electricity_per_kwh"),
        ("amortisation_years", "amortisation_months"),
        ("utilization", "utilisation"),
    ],
)
def test_unknown_keys_and_wrong_unit_names_are_refused_with_a_suggestion(key: str, suggestion: str) -> None:
    msg = bad(f"rental_per_gpu_hour: 2\n{key}: 1\n")
    assert f"unknown field {key!r}" in msg and f"did you mean {suggestion!r}" in msg


def test_a_profile_is_either_ownership_or_rental() -> None:
    assert "gpu_price: a profile is either ownership or rental" in bad(
        "rental_per_gpu_hour: 2\ngpu_price: 30000\n"
    )
    assert "rental_per_hour: give rental_per_gpu_hour or rental_per_hour" in bad(
        "rental_per_gpu_hour: 2\nrental_per_hour: 3\n"
    )
    assert "gpu_price: an ownership profile needs" in bad("electricity_per_kwh: 0.1\n")
    assert "electricity_per_kwh: required" in bad("gpu_price: 30000\n")
    assert "setup_hours: give setup_hours or from_doctor_history" in bad(
        "rental_per_gpu_hour: 2\nsetup_hours: 8\nfrom_doctor_history: true\n"
    )


def test_a_profile_that_is_not_yaml_or_not_a_mapping_is_refused() -> None:
    assert "not valid YAML" in bad("gpu_price: [1,\n")
    assert "expected a mapping" in bad("- 1\n- 2\n")


def test_currency_code_is_normalised_and_modes_are_named() -> None:
    p = CostProfile(currency="cny", rental_per_gpu_hour=12)
    assert p.currency == "CNY" and p.mode == "rental"
    assert CostProfile(gpu_price=1, electricity_per_kwh=0.1).mode == "ownership"


def test_every_builtin_preset_sources_every_figure_it_sets(catalog: Catalog) -> None:
    presets = builtin_presets(catalog)
    assert {
        "h100-sxm-own",
        "h100-sxm-rent",
        "h100-sxm-inferencex",
        "mi300x-own",
        "rtx-4090-own",
        "cpu-cloud",
    } <= set(presets)
    for prof in presets.values():
        for name in (
            "gpu_price",
            "rental_per_gpu_hour",
            "rental_per_hour",
            "electricity_per_kwh",
            "pue",
            "amortisation_months",
            "labour_rate_per_hour",
            "utilisation",
        ):
            if prof.mode == "rental" and name == "pue":
                continue  # energy is in the rental price; pue stays at its unused default
            if getattr(prof, name) not in (None, 0):
                src = prof.sources.get(name, "")
                assert src and any(ch.isdigit() for ch in src), f"{prof.name}.{name}: {src!r}"


def test_preset_prices_come_from_the_catalog(catalog: Catalog) -> None:
    presets = builtin_presets(catalog)
    assert presets["h100-sxm-own"].gpu_price == catalog.get("h100-sxm").figure("launch_price_usd").value
    assert (
        presets["mi300x-rent"].rental_per_gpu_hour
        == catalog.get("mi300x").figure("rental_usd_per_gpu_hour").value
    )
    assert "estimate" in presets["h100-sxm-own"].sources["gpu_price"]
    assert presets["rtx-4090-own"].pue == 1.0  # a desk, no facility overhead
    assert presets["h100-sxm-own"].pue == 1.56


def test_unknown_profile_names_suggest_presets(catalog: Catalog) -> None:
    with pytest.raises(NotFoundError) as err:
        load_profile("h100-sxm-owned", catalog)
    assert err.value.hint and "h100-sxm-own" in err.value.hint
    with pytest.raises(NotFoundError):
        load_profile("/nonexistent/dir/prof.yaml", catalog)


def test_a_profile_file_can_extend_a_preset(tmp_path: Path, catalog: Catalog) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text("extends: h100-sxm-own\nutilisation: 0.4\nsetup_hours: 4\n")
    prof = load_profile(str(path), catalog)
    assert prof.name == "mine"
    assert prof.gpu_price == 30000 and prof.utilisation == 0.4 and prof.setup_hours == 4
    assert "catalog" in prof.sources["gpu_price"]
    assert prof.sources["utilisation"] == f"profile file {path}"


def test_an_extending_file_must_still_be_one_mode(tmp_path: Path, catalog: Catalog) -> None:
    path = tmp_path / "switch.yaml"
    path.write_text("extends: h100-sxm-own\nrental_per_gpu_hour: 2.5\n")
    with pytest.raises(InvalidInputError, match="either ownership or rental"):
        load_profile(str(path), catalog)
    path.write_text(
        "extends: h100-sxm-own\nrental_per_gpu_hour: 2.5\ngpu_price: null\nelectricity_per_kwh: null\n"
    )
    assert load_profile(str(path), catalog).mode == "rental"


def test_extends_cycles_are_refused(tmp_path: Path, catalog: Catalog) -> None:
    (tmp_path / "a.yaml").write_text("extends: b.yaml\n")
    (tmp_path / "b.yaml").write_text("extends: a.yaml\n")
    with pytest.raises(InvalidInputError, match="levels"):
        load_profile(str(tmp_path / "a.yaml"), catalog)


def test_default_profile_is_the_catalog_preset_of_the_runs_gpu(make_run: MakeRun, catalog: Catalog) -> None:
    assert default_profile_for(make_run(gpu="NVIDIA H100 80GB HBM3"), catalog).name == "h100-sxm-own"
    # no purchase price in the catalog -> its rental preset; neither -> InferenceX's figure
    assert (
        default_profile_for(make_run(gpu="AMD Instinct MI325X", vendor="amd"), catalog).name == "mi325x-rent"
    )
    assert default_profile_for(make_run(gpu="AMD Instinct MI355X", vendor="amd"), catalog).name == (
        "mi355x-inferencex"
    )


def test_default_profile_for_a_gpu_outside_the_catalog_or_without_prices(
    make_run: MakeRun, catalog: Catalog
) -> None:
    with pytest.raises(NotFoundError, match="not in the GPU catalog"):
        default_profile_for(make_run(gpu="NVIDIA Tesla T4"), catalog)
    with pytest.raises(NotFoundError, match="no price for AMD Instinct MI210"):
        default_profile_for(make_run(gpu="AMD Instinct MI210", vendor="amd"), catalog)


def test_default_profile_for_a_cpu_run_scales_the_cloud_vcpu_price(
    make_run: MakeRun, catalog: Catalog
) -> None:
    cpu = {"device": "cpu", "vendor": "cpu", "name": "AMD EPYC", "mean_power_w": None}
    prof = default_profile_for(make_run(devices=[cpu], environment={"cpu_count": 8}), catalog)
    assert prof.name == "cpu-cloud-arm64-8vcpu" and prof.rental_per_hour == pytest.approx(8 * 0.0408)
    assert "8 logical CPUs" in prof.sources["rental_per_hour"]
    assert default_profile_for(make_run(devices=[cpu]), catalog).name == "cpu-cloud"
    # the in-process torch engine records the host's CPUs with its server identity
    in_process = make_run(devices=[cpu], server={"kind": "torch", "cpu": {"logical_cpus": 2}})
    assert default_profile_for(in_process, catalog).rental_per_hour == pytest.approx(0.0816)


def test_a_cpu_run_is_priced_as_an_instance_of_its_own_architecture(
    make_run: MakeRun, catalog: Catalog
) -> None:
    """An x86 run priced at an ARM instance's rate would flatter it (issue 15): each architecture has its
    own sourced price."""
    cpu = {"device": "cpu", "vendor": "cpu", "name": "AMD EPYC", "mean_power_w": None}
    x86 = default_profile_for(
        make_run(devices=[cpu], environment={"arch": "x86_64", "cpu": {"logical_cpus": 2}}), catalog
    )
    assert x86.name == "cpu-cloud-x86_64-2vcpu" and x86.rental_per_hour == pytest.approx(2 * 0.0504)
    source = x86.sources["rental_per_hour"]
    assert "m7i.large" in source and "2 logical CPUs" in source
    arm = default_profile_for(
        make_run(devices=[cpu], environment={"arch": "aarch64", "cpu": {"logical_cpus": 4}}), catalog
    )
    assert arm.name == "cpu-cloud-arm64-4vcpu" and arm.rental_per_hour == pytest.approx(4 * 0.0408)
    assert "m7g.large" in arm.sources["rental_per_hour"]
    # an x86 run that does not record its CPU count is priced as the 2-vCPU reference instance, and says so
    bare = default_profile_for(make_run(devices=[cpu], environment={"arch": "x86_64"}), catalog)
    assert bare.rental_per_hour == pytest.approx(2 * 0.0504)
    assert "not recorded" in bare.sources["rental_per_hour"]
