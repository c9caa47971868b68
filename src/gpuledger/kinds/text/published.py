"""The summary of a published inference point: someone else's measurement, kept as a run.

``gpuledger import-results`` turns each row of a file of published points (InferenceX, MLPerf, a vendor's
blog) into a stored run whose summary is a ``PublishedSummary``: the rates as published (output, input or
total tokens per second, all GPUs together), the rates gpuledger derived from them (said to be derived,
with how), the workload's lengths, the GPU and how many, and who published it when. ``origin()`` returns
that provenance, so cost, compare, estimate, report and show word every figure "published by SOURCE
(DATE), not measured here".

A published point has rates, not counts: its window is a nominal 1 s (``window_s``), so a unit's count
equals its rate; every price and joule per unit is a ratio of rates and does not depend on it.

A publisher that does not give the workload's mean input length (MLPerf Inference prints output tokens per
second and per sample, not the dataset's prompt lengths) leaves ``input_len`` out with ``input_len_reason``:
the point then has an output rate only — its input and total rates are not known, never a guess.

What makes two points comparable is kept too, when published: the ``scenario`` (MLPerf's offline, server,
interactive), the ``division`` (closed, open), the ``accuracy_target``, who submitted it (``submitter``, its
``submitter_role``: the GPU's vendor or a third party), the ``system``, the ``framework`` and its
``framework_version``, and the ``dataset`` (two points of one dataset ask the same requests).
"""

from __future__ import annotations

import re
from typing import ClassVar, Literal

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
Scenario = Literal["offline", "server", "interactive"]
Division = Literal["closed", "open"]
SubmitterRole = Literal["vendor", "third party"]


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
    input_len: int | None = Field(default=None, ge=1)
    input_len_reason: str | None = Field(default=None, min_length=1, max_length=LONG_TEXT)
    output_len: int = Field(ge=1)
    output_tokens_per_s: float = Field(gt=0)
    input_tokens_per_s: float | None = Field(default=None, ge=0)
    total_tokens_per_s: float | None = Field(default=None, gt=0)
    published_rates: list[str] = Field(min_length=1)
    derivation: str = Field(default="", max_length=LONG_TEXT)
    tokens_per_s_per_user: float | None = Field(default=None, gt=0)
    concurrency: int | None = Field(default=None, ge=1)
    ttft_ms: float | None = Field(default=None, gt=0)
    tpot_ms: float | None = Field(default=None, gt=0)
    precision: str | None = Field(default=None, max_length=TEXT)
    framework: str | None = Field(default=None, max_length=TEXT)
    framework_version: str | None = Field(default=None, max_length=TEXT)
    scenario: Scenario | None = None
    division: Division | None = None
    accuracy_target: str | None = Field(default=None, max_length=TEXT)
    submitter: str | None = Field(default=None, max_length=TEXT)
    submitter_role: SubmitterRole | None = None
    system: str | None = Field(default=None, max_length=TEXT)
    dataset: str | None = Field(default=None, max_length=TEXT)
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
        if self.input_len is None:
            if not self.input_len_reason:
                raise ValueError("input_len_reason: required without input_len (why it is not known)")
            if self.input_tokens_per_s is not None or self.total_tokens_per_s is not None or (
                    self.published_rates != ["output_tokens_per_s"]):
                raise ValueError("without input_len only the output rate is known (no input or total rate)")
        elif self.input_tokens_per_s is None or self.total_tokens_per_s is None:
            raise ValueError("input_tokens_per_s and total_tokens_per_s: required with input_len")
        return self

    # -- what the point did ---------------------------------------------------------------------------
    def work(self) -> dict[str, Work]:
        w = self.window_s
        out = {"output_token": Work(count=self.output_tokens_per_s * w, per_s=self.output_tokens_per_s)}
        if self.input_tokens_per_s is not None:
            out["input_token"] = Work(count=self.input_tokens_per_s * w, per_s=self.input_tokens_per_s)
        if self.total_tokens_per_s is not None:
            out["token"] = Work(count=self.total_tokens_per_s * w, per_s=self.total_tokens_per_s)
        return out

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
            rate = self.rate(unit)
            if rate is None:
                out.append((info.plural, Quantity.missing(info.rate_text, self.origin().label,
                                                          f"not known: {self.input_len_reason}")))
                continue
            out.append((info.plural, Quantity(rate, info.rate_text, self.rate_provenance(key),
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
        return self.rates_scaled(scale, ("output_tokens_per_s", "input_tokens_per_s", "total_tokens_per_s"))
