"""The doctor's knowledge base (``data/knowledge_base.yaml``): rules and PyTorch wheel indexes, loaded once
and validated. The AMD reference data the checks compare against (ROCm support lists, HSA override families,
AMD device ids) is catalog data: :mod:`gpuledger.catalog.amd`."""

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


class PytorchIndexes(_Model):
    cuda: list[str]
    rocm: list[str]


class KnowledgeBase(_Model):
    format: Literal["gpuledger.knowledge_base"]
    version: int
    defaults: dict[str, str]
    rules: list[Rule]
    pytorch_indexes: PytorchIndexes

    def rule(self, rule_id: str) -> Rule:
        for rule in self.rules:
            if rule.id == rule_id:
                return rule
        raise KeyError(rule_id)

    def has(self, rule_id: str) -> bool:
        return any(rule.id == rule_id for rule in self.rules)


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
