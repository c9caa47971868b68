"""The built-in image pipelines (``data/dummy_pipelines.yaml``) as typed data: which components each has,
their configs as the authors published them, and the published parameter counts. No vendor library here:
``pipelines.py`` builds them."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpuledger.errors import InvalidInputError, UsageError

DUMMY_PREFIX = "dummy:"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class ModelComponent(_Model):
    """A network: its library, class (and config class for transformers) and its published config."""

    library: Literal["diffusers", "transformers"]
    class_name: str = Field(alias="class")
    config_class: str | None = None
    source: str
    config: dict[str, Any]


class TokenizerComponent(_Model):
    kind: Literal["clip", "t5"]
    max_length: int = Field(ge=1)


class SchedulerComponent(_Model):
    class_name: str = Field(alias="class")
    source: str
    config: dict[str, Any]


class Published(_Model):
    component: str | list[str]
    params: int = Field(gt=0)
    text: str
    source: str

    def components(self) -> list[str]:
        return [self.component] if isinstance(self.component, str) else list(self.component)


class Defaults(_Model):
    height: int
    width: int
    steps: int
    guidance: float
    max_sequence_length: int | None = None


class DummyPipeline(_Model):
    name: str = ""
    hf_id: str | None
    family: str
    pipeline: str
    defaults: Defaults
    published: list[Published]
    components: dict[str, ModelComponent | TokenizerComponent | SchedulerComponent]

    def models(self) -> dict[str, ModelComponent]:
        return {k: v for k, v in self.components.items() if isinstance(v, ModelComponent)}

    def tokenizers(self) -> dict[str, TokenizerComponent]:
        return {k: v for k, v in self.components.items() if isinstance(v, TokenizerComponent)}

    def scheduler(self) -> SchedulerComponent:
        sched = self.components.get("scheduler")
        if not isinstance(sched, SchedulerComponent):
            raise InvalidInputError(f"dummy pipeline {self.name} has no scheduler")
        return sched

    def denoiser(self) -> str:
        """``unet`` or ``transformer``: the component that runs once per step."""
        return "transformer" if "transformer" in self.components else "unet"


class _File(_Model):
    format: Literal["gpuledger-dummy-pipelines"]
    version: Literal[1]
    pipelines: dict[str, DummyPipeline]


@lru_cache(maxsize=1)
def dummy_pipelines() -> dict[str, DummyPipeline]:
    text = resources.files("gpuledger").joinpath("data/dummy_pipelines.yaml").read_text(encoding="utf-8")
    try:
        data = _File.model_validate(yaml.safe_load(text))
    except (yaml.YAMLError, ValidationError) as exc:
        raise InvalidInputError(f"data/dummy_pipelines.yaml is not valid: {exc}") from exc
    return {k: v.model_copy(update={"name": k}) for k, v in data.pipelines.items()}


def is_dummy(model: str) -> bool:
    return model.startswith(DUMMY_PREFIX)


def dummy_pipeline(model: str) -> DummyPipeline:
    """``dummy:NAME`` -> its pipeline; ``UsageError`` naming the built-in ones otherwise."""
    name = model.removeprefix(DUMMY_PREFIX)
    known = dummy_pipelines()
    if name not in known:
        raise UsageError(
            f"--model {model}: no built-in image pipeline {name!r} (choose "
            + ", ".join(f"{DUMMY_PREFIX}{n}" for n in known)
            + ", or give a diffusers folder)"
        )
    return known[name]
