"""What an image run was asked to do and what the engine resolved (``ImageSpec``); the run's summary is
``gpuledger.kinds.image.summary``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import Field

from gpuledger.records.load import ConcurrencyStage, Stage
from gpuledger.records.spec import BenchSpec, SpecModel
from gpuledger.records.specbase import SecretUrl

if TYPE_CHECKING:
    from gpuledger.records.request import RequestRecord
    from gpuledger.records.summary import RunSummary


class NodeOverride(SpecModel):
    """``--set NODE.INPUT=VALUE``: one input of one node of a ComfyUI workflow set by id."""

    node: str = Field(min_length=1, max_length=64)
    input: str = Field(min_length=1, max_length=128)
    value: int | float | str | bool


class ImageSpec(BenchSpec):
    """What an image run was asked to do and what the engine resolved. Every field is optional (a stored
    spec holds what its gpuledger wrote); ``bench --task image`` sets every field it means."""

    KIND: ClassVar[str] = "image"
    LEGACY_ENGINES: ClassVar[tuple[str, ...]] = ()
    OBSERVED: ClassVar[tuple[str, ...]] = (*BenchSpec.OBSERVED, "memory_free_bytes")

    # what to run
    model: str | None = None
    base_url: SecretUrl | None = None  # redacted in every dump (records.specbase)
    workflow: str | None = None  # ComfyUI: the workflow file's path as given
    workflow_sha256: str | None = None
    node_overrides: list[NodeOverride] | None = None
    prompt: str | None = None
    negative_prompt: str | None = None
    steps: int | None = Field(default=None, ge=1, le=10_000)
    height: int | None = Field(default=None, ge=8, le=16_384)
    width: int | None = Field(default=None, ge=8, le=16_384)
    batch_size: int | None = Field(default=None, ge=1, le=1024)
    guidance: float | None = Field(default=None, ge=0, le=100, allow_inf_nan=False)
    scheduler: str | None = Field(default=None, max_length=128)
    num_images: int | None = Field(default=None, ge=1, le=1_000_000)
    concurrency: int | None = Field(default=None, ge=1, le=1024)
    warmup: int | None = Field(default=None, ge=0, le=1000)
    dtype: str | None = Field(default=None, max_length=16)
    device: str | None = Field(default=None, max_length=32)
    seed: int | None = Field(default=None, ge=0, le=2**63 - 1)
    request_timeout_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    api_key_env: str | None = None
    keep_images: bool | None = None
    # what the engine resolved when it opened
    pipeline: str | None = None
    parameters: int | None = None
    memory_estimate_bytes: int | None = None
    memory_free_bytes: int | None = None
    attention: str | None = None
    components: dict[str, int] | None = None

    def workload_seed(self) -> int:
        return self.seed or 0

    def stages(self) -> list[Stage]:
        """One stage: ``concurrency`` requests in flight (a server's prompts; 1 for the in-process engine)."""
        n = self.concurrency or 1
        return [ConcurrencyStage(stage=f"c={n}", concurrency=n)]

    def requests_per_stage(self) -> int | None:
        return self.requests_planned()

    def summarize(self, records: Sequence[RequestRecord]) -> RunSummary | None:
        from gpuledger.kinds.image.summary import summarize_images

        return summarize_images(records, model=self.model, scheduler=self.scheduler)

    def parameter_count(self) -> int | None:
        return self.parameters

    def precision(self) -> str | None:
        return self.dtype

    def fixed_concurrency(self) -> int | None:
        return self.concurrency or 1

    def warmup_requests(self) -> int:
        return self.warmup or 0

    def images_per_request(self) -> int:
        return self.batch_size or 1

    def requests_planned(self) -> int:
        """Requests of the measured window: ``num_images`` in whole batches (the last one may be smaller)."""
        per = self.images_per_request()
        return max(1, math.ceil((self.num_images or per) / per))

    def workload_record(self, meta: Any = None, warmup: Any = None) -> dict[str, Any]:
        out: dict[str, Any] = {"task": "image"}
        for key in (
            "model",
            "steps",
            "height",
            "width",
            "batch_size",
            "guidance",
            "scheduler",
            "num_images",
            "concurrency",
            "seed",
        ):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        if self.workflow is not None:
            out["workflow"] = self.workflow
        if warmup:
            out["warmup"] = dict(warmup)
        return out
