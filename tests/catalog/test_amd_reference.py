"""The AMD reference data (data/amd_reference.yaml, loaded by gpuledger.catalog.amd): ROCm support lists
looked up by the nearest release at or below the installed one, HSA override families, the PCI device
table, and the gfx-target arithmetic the collectors and the doctor share."""

from __future__ import annotations

from gpuledger.catalog.amd import amd_reference, gfx_from_override, gfx_from_target_version
from gpuledger.catalog.versions import version_tuple


def test_rocm_support_lookup_uses_the_nearest_release_at_or_below() -> None:
    ref = amd_reference()
    assert ref.rocm_release_for("6.1.2").version == "6.0"  # type: ignore[union-attr]
    assert ref.rocm_release_for("6.4.2").version == "6.4.1"  # type: ignore[union-attr]
    assert ref.rocm_release_for("6.4.3").version == "6.4.3"  # type: ignore[union-attr]
    assert "gfx1101" in ref.rocm_release_for("6.4.3").targets  # type: ignore[union-attr]
    assert ref.rocm_release_for("7.2.0").version == "7.1"  # type: ignore[union-attr]
    assert ref.rocm_release_for("3.5") is None
    assert ref.rocm_release_for(None).version == "7.1"  # type: ignore[union-attr]
    assert "gfx1201" in ref.rocm_release_for("6.4.1").targets  # type: ignore[union-attr]
    assert "gfx1201" not in ref.rocm_release_for("6.4.0").targets  # type: ignore[union-attr]


def test_first_release_supporting_a_target() -> None:
    ref = amd_reference()
    assert ref.first_release_supporting("gfx942").version == "6.0"  # type: ignore[union-attr]
    assert ref.first_release_supporting("gfx1100").version == "5.7"  # type: ignore[union-attr]
    assert ref.first_release_supporting("gfx803") is None


def test_every_support_list_says_where_it_comes_from() -> None:
    for release in amd_reference().rocm_support:
        assert release.source.strip() and release.confidence in ("reference", "documented", "recalled")
        assert all(t.startswith("gfx") for t in release.targets), release.version
    for key, device in amd_reference().amd_devices.items():
        assert device.source.strip() and device.gfx.startswith("gfx"), key


def test_override_families_and_the_device_table() -> None:
    ref = amd_reference()
    assert ref.override_family("gfx1032").value == "10.3.0"  # type: ignore[union-attr]
    assert ref.override_family("gfx1102").value == "11.0.0"  # type: ignore[union-attr]
    assert ref.override_family("gfx942") is None
    assert ref.amd_device(0x74A1).gfx == "gfx942"  # type: ignore[union-attr]
    assert ref.amd_device(0x0001) is None and ref.amd_device(None) is None


def test_gfx_arithmetic_and_versions() -> None:
    assert gfx_from_override("10.3.0") == "gfx1030" and gfx_from_override("9.0.10") == "gfx90a"
    assert gfx_from_override("11.0") is None
    assert gfx_from_target_version(110000) == "gfx1100" and gfx_from_target_version(90010) == "gfx90a"
    assert gfx_from_target_version(0) is None
    assert version_tuple("6.2.0-66") == (6, 2, 0)
