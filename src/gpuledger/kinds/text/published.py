"""The summary of a published inference point: someone else's measurement, kept as a run.

``gpuledger import-results`` turns each row of a file of published points (InferenceX, MLPerf, a vendor's
blog) into a stored run whose summary is a ``PublishedSummary``: the rates as published (output, input or
total tokens per second, all GPUs together), the rates gpuledger derived from them (said to be derived,
with how), the workload's lengths, the GPU and how many, and who published it when. ``origin()`` returns
that provenance, so cost, compare, estimate, report and show word every figure "published by SOURCE
(DATE), not measured here".

A published point has rates, not counts: its window is a nominal 1 s (``window_s``), so a unit's count
equals its rate; every price and joule per unit is a ratio of rates and does not depend on it.
"""

from __future__ import annotations

import re
from typing import ClassVar

from pydantic import Field, field_validator, model_validator

from gpuledger.kinds.text import units as _units  # noqa: F401  (registers the token units priced here)
from gpuledger.quantity import Quantity
from gpuledger.records.origin import Origin
from gpuledger.records.summary import RunSummary
from gpuledger.records.units import Work

KIND = "published_inference"
NOMINAL_WINDOW_S = 1.0
RATE_KEYS = ("output_tokens_per_s", "input_tokens_per_s", "total_tokens_per_s")
_DATE = re.compile(r"^\d{4}(-\d{2}(-\d{2})?)?$")
TEXT = 500
LONG_TEXT = 2_000


class PublishedSummary(RunSummary):
    """A published inference point (see the module docstring). Rates are tokens per second of all the
    point's GPUs together; ``published_rates`` names those the publisher gave, the others were derived
    as ``derivation`` says."""

    KIND: ClassVar[str] = KIND
    HEADLINE: ClassVar[str] = "output_token"
    PRICE_UNITS: ClassVar[tuple[str, ...] | None] = ("token", "output_token")
    YIELD_UNITS: ClassVar[tuple[str, ...] | None] = ("token", "output_token")
    RATE_KEYS: ClassVar[dict[str, str]] = {
        "output_token": "output_tokens_per_s",
        "input_token": "input_tokens_per_s",
        "token": "total_tokens_per_s",
    }

    window_s: float = NOMINAL_WINDOW_S
    source: str = Field(min_length=1, max_length=TEXT)
    date: str | None = None
    url: str | None = Field(default=None, max_length=LONG_TEXT)
    how_read: str | None = Field(default=None, max_length=LONG_TEXT)
    gpu: str = Field(min_length=1, max_length=TEXT)
    gpu_name: str = Field(min_length=1, max_length=TEXT)
    gpus: int = Field(ge=1, le=100_000)
    input_len: int = Field(ge=1)
    output_len: int = Field(ge=1)
    output_tokens_per_s: float = Field(gt=0)
    input_tokens_per_s: float = Field(ge=0)
    total_tokens_per_s: float = Field(gt=0)
    published_rates: list[str] = Field(min_length=1)
    derivation: str = Field(default="", max_length=LONG_TEXT)
    tokens_per_s_per_user: float | None = Field(default=None, gt=0)
    concurrency: int | None = Field(default=None, ge=1)
    ttft_ms: float | None = Field(default=None, gt=0)
    tpot_ms: float | None = Field(default=None, gt=0)
    precision: str | None = Field(default=None, max_length=TEXT)
    framework: str | None = Field(default=None, max_length=TEXT)
    power_kw_per_gpu: float | None = Field(default=None, gt=0)
    power_note: str | None = Field(default=None, max_length=LONG_TEXT)
    publisher_profile: str | None = Field(default=None, max_length=TEXT)
    published_usd_per_1m_total_tokens: float | None = Field(default=None, gt=0)
    published_usd_per_1m_output_tokens: float | None = Field(default=None, gt=0)

    @field_validator("date")
    @classmethod
    def _date(cls, value: str | None) -> str | None:
        if value is not None and not _DATE.match(value):
            raise ValueError(f"must be a date YYYY-MM-DD (or YYYY-MM, YYYY), got {value!r}")
        return value

    @model_validator(mode="after")
    def _rates_named(self) -> PublishedSummary:
        unknown = [k for k in self.published_rates if k not in RATE_KEYS]
        if unknown:
            raise ValueError(f"published_rates: {unknown[0]!r} is not one of {', '.join(RATE_KEYS)}")
        return self

    # -- what the point did ---------------------------------------------------------------------------
    def work(self) -> dict[str, Work]:
        w = self.window_s
        return {
            "output_token": Work(count=self.output_tokens_per_s * w, per_s=self.output_tokens_per_s),
            "input_token": Work(count=self.input_tokens_per_s * w, per_s=self.input_tokens_per_s),
            "token": Work(count=self.total_tokens_per_s * w, per_s=self.total_tokens_per_s),
        }

    def origin(self) -> Origin:
        return Origin(
            kind="published",
            source=self.source,
            date=self.date,
            url=self.url,
            gpu=self.gpu,
            gpus=self.gpus,
            power_w_per_gpu=None if self.power_kw_per_gpu is None else self.power_kw_per_gpu * 1000.0,
            power_note=self.power_note,
        )

    def rate_provenance(self, key: str) -> str:
        """How the rate ``key`` (``output_tokens_per_s``) is known: published, or derived and how."""
        label = self.origin().label
        if key in self.published_rates:
            return label
        given = " and ".join(k.removesuffix("_tokens_per_s") for k in self.published_rates)
        return f"derived from the published {given} rate; {label}"

    def key_figures(self) -> list[tuple[str, Quantity]]:
        out: list[tuple[str, Quantity]] = []
        for unit, key in self.rate_keys():
            info = self.unit(unit)
            out.append((info.plural, Quantity(self.rate(unit), info.rate_text, self.rate_provenance(key),
                                              f"{self.gpus} x {self.gpu_name} together")))
        label = self.origin().label
        for name, value, unit in (
            ("tok/s per user", self.tokens_per_s_per_user, "tok/s"),
            ("TTFT", self.ttft_ms, "ms"),
            ("TPOT", self.tpot_ms, "ms"),
        ):
            if value is not None:
                out.append((name, Quantity(value, unit, label)))
        return out

    def with_window(self, scale: float) -> PublishedSummary:
        return self.model_copy(
            update={
                "window_s": self.window_s / scale,
                "output_tokens_per_s": self.output_tokens_per_s * scale,
                "input_tokens_per_s": self.input_tokens_per_s * scale,
                "total_tokens_per_s": self.total_tokens_per_s * scale,
            }
        )
