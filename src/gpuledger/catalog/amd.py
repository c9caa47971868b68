"""AMD reference data (``data/amd_reference.yaml``): the gfx targets each ROCm release supports, the
``HSA_OVERRIDE_GFX_VERSION`` families and the AMD PCI device-id table, loaded once and validated; plus the
gfx-target arithmetic (KFD ``gfx_target_version``, override values, families).

The fact collectors read it to name and place a GPU without a ROCm tool; the doctor reads it to judge a
gfx target against the installed ROCm. Every entry keeps its ``source`` (and, for the support lists, its
``confidence``), which the doctor's evidence repeats.
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from gpuledger.catalog.versions import version_tuple
from gpuledger.errors import InvalidInputError

AMD_REFERENCE_NAME = "amd_reference.yaml"
AMD_REFERENCE_VERSION = 1


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RocmRelease(_Model):
    version: str
    confidence: Literal["reference", "documented", "recalled"]
    source: str
    targets: list[str]

    @property
    def key(self) -> tuple[int, ...]:
        return version_tuple(self.version)


class OverrideFamily(_Model):
    family: str
    value: str
    base: str
    targets: list[str]


class AmdDevice(_Model):
    name: str
    gfx: str
    source: str


class AmdReference(_Model):
    format: Literal["gpuledger.amd_reference"]
    version: int
    rocm_support: list[RocmRelease]
    hsa_override_families: list[OverrideFamily]
    amd_devices: dict[str, AmdDevice]

    def amd_device(self, device_id: int | None) -> AmdDevice | None:
        if device_id is None:
            return None
        return self.amd_devices.get(f"0x{device_id:04x}")

    def rocm_release_for(self, version: str | None) -> RocmRelease | None:
        """The newest listed release at or below ``version`` (``None`` version: the newest release)."""
        ordered = sorted(self.rocm_support, key=lambda r: r.key, reverse=True)
        if version is None:
            return ordered[0] if ordered else None
        wanted = version_tuple(version)
        for release in ordered:
            if release.key <= wanted:
                return release
        return None

    def first_release_supporting(self, gfx: str) -> RocmRelease | None:
        ordered = sorted(self.rocm_support, key=lambda r: r.key)
        for release in ordered:
            if gfx in release.targets:
                return release
        return None

    def override_family(self, gfx: str) -> OverrideFamily | None:
        for family in self.hsa_override_families:
            if gfx in family.targets or gfx == family.base:
                return family
        return None


@lru_cache(maxsize=1)
def amd_reference() -> AmdReference:
    text = resources.files("gpuledger").joinpath(f"data/{AMD_REFERENCE_NAME}").read_text(encoding="utf-8")
    try:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: ~20x faster
        ref = AmdReference.model_validate(yaml.load(text, Loader=loader))
    except (yaml.YAMLError, ValidationError) as exc:
        raise InvalidInputError(f"the AMD reference data ({AMD_REFERENCE_NAME}) is invalid: {exc}") from exc
    if ref.version > AMD_REFERENCE_VERSION:
        raise InvalidInputError(
            f"AMD reference data version {ref.version} is newer than this gpuledger ({AMD_REFERENCE_VERSION})"
        )
    return ref


def gfx_from_target_version(value: int) -> str | None:
    """KFD ``gfx_target_version`` (major*10000 + minor*100 + stepping) -> ``gfx1100`` / ``gfx90a``."""
    if value <= 0:
        return None
    major, rest = divmod(value, 10000)
    minor, stepping = divmod(rest, 100)
    return f"gfx{major}{minor}{stepping:x}"


def gfx_from_override(value: str) -> str | None:
    """``"10.3.0"`` -> ``gfx1030``; ``None`` when the value is not MAJOR.MINOR.STEPPING."""
    match = re.fullmatch(r"\s*(\d{1,2})\.(\d{1,2})\.(\d{1,2})\s*", value)
    if match is None:
        return None
    major, minor, stepping = (int(g) for g in match.groups())
    return f"gfx{major}{minor}{stepping:x}"
