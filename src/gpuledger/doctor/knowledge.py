"""The doctor's knowledge base (``data/knowledge_base.yaml``): rules, ROCm support lists, HSA override
families, AMD device ids and PyTorch wheel indexes, loaded once and validated."""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpuledger.errors import InvalidInputError

Severity = Literal["ok", "info", "warning", "error"]
Layer = Literal["hardware", "kernel", "management", "runtime", "containers", "wsl", "applications"]
LAYERS: tuple[Layer, ...] = (
    "hardware",
    "kernel",
    "management",
    "runtime",
    "containers",
    "wsl",
    "applications",
)
LAYER_TITLES: dict[Layer, str] = {
    "hardware": "1. Hardware (PCI bus)",
    "kernel": "2. Kernel driver",
    "management": "3. Management (nvidia-smi / NVML / ROCm tools)",
    "runtime": "4. Runtime & framework (CUDA / ROCm / PyTorch)",
    "containers": "5. Containers",
    "wsl": "6. WSL2",
    "applications": "7. Applications (Ollama)",
}
KB_FORMAT = "gpuledger.knowledge_base"
KB_VERSION = 1


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Rule(_Model):
    id: str
    layer: Layer
    severity: Severity
    title: str
    symptom: str
    causes: list[str] = Field(default_factory=list)
    fix: list[str] = Field(default_factory=list)
    docs: list[str] = Field(default_factory=list)
    seed_rows: list[int] = Field(default_factory=list)
    kind: Literal["check", "guidance"] = "check"


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


class PytorchIndexes(_Model):
    cuda: list[str]
    rocm: list[str]


class KnowledgeBase(_Model):
    format: Literal["gpuledger.knowledge_base"]
    version: int
    defaults: dict[str, str]
    rules: list[Rule]
    rocm_support: list[RocmRelease]
    hsa_override_families: list[OverrideFamily]
    amd_devices: dict[str, AmdDevice]
    pytorch_indexes: PytorchIndexes

    def rule(self, rule_id: str) -> Rule:
        for rule in self.rules:
            if rule.id == rule_id:
                return rule
        raise KeyError(rule_id)

    def has(self, rule_id: str) -> bool:
        return any(rule.id == rule_id for rule in self.rules)

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


def version_tuple(text: str) -> tuple[int, ...]:
    """``"6.2.0-66"`` -> ``(6, 2, 0)``; non-numeric parts end the tuple."""
    parts: list[int] = []
    core = re.split(r"[-+~ ]", text.strip(), maxsplit=1)[0]
    for piece in core.split("."):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts)


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


def gfx_family_key(gfx: str) -> str | None:
    """``gfx1031`` -> ``gfx103`` (major + minor): targets that share it are one family."""
    match = re.fullmatch(r"gfx(\d+)([0-9a-f])", gfx)
    if match is None:
        return None
    return f"gfx{match.group(1)}"


@lru_cache(maxsize=1)
def knowledge_base() -> KnowledgeBase:
    text = resources.files("gpuledger").joinpath("data/knowledge_base.yaml").read_text(encoding="utf-8")
    try:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: ~20x faster
        kb = KnowledgeBase.model_validate(yaml.load(text, Loader=loader))
    except (yaml.YAMLError, ValidationError) as exc:
        raise InvalidInputError(f"the doctor's knowledge base is invalid: {exc}") from exc
    if kb.version > KB_VERSION:
        raise InvalidInputError(
            f"knowledge base version {kb.version} is newer than this gpuledger ({KB_VERSION})"
        )
    ids = [r.id for r in kb.rules]
    if len(ids) != len(set(ids)):
        raise InvalidInputError("the doctor's knowledge base has duplicate rule ids")
    return kb


def fill(template: str, values: dict[str, str]) -> str:
    """Replace ``{name}`` placeholders whose value is known; leave the others readable."""

    def repl(match: re.Match[str]) -> str:
        key = match.group(1)
        return values.get(key, match.group(0))

    return re.sub(r"\{([a-z_]+)\}", repl, template)
