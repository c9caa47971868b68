"""Catalog types: the YAML schema (pydantic, what users write) and the runtime records (what code reads).

Every figure keeps its source and date; a missing figure is a value with a reason, never a silent zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpuledger.quantity import Quantity

Confidence = Literal["published", "estimate"]
Vendor = Literal["nvidia", "amd", "intel", "other"]
Segment = Literal["datacenter", "workstation", "consumer"]

PCI_VENDOR_IDS: dict[str, int] = {"nvidia": 0x10DE, "amd": 0x1002, "intel": 0x8086}

# Figure fields of a GPU entry and their units (the unit is also in the field name).
FIGURE_UNITS: dict[str, str] = {
    "memory_gb": "GB",
    "bandwidth_tb_s": "TB/s",
    "fp16_tflops": "TFLOPS",
    "fp8_tflops": "TFLOPS",
    "tdp_w": "W",
    "launch_price_usd": "USD",
    "rental_usd_per_gpu_hour": "USD/GPU-hour",
    "inferencex_usd_per_gpu_hour": "USD/GPU-hour",
    "inferencex_all_in_power_w": "W",
}
# Figures that describe the whole package and are split across logical devices (MI250X: 2 GCDs).
PER_PACKAGE_FIGURES = ("memory_gb", "bandwidth_tb_s", "fp16_tflops", "fp8_tflops", "tdp_w")


class FigureIn(BaseModel):
    """One number as written in a catalog file."""

    model_config = ConfigDict(extra="forbid")

    value: float | None
    source: str | None = None
    date: str | None = None
    confidence: Confidence = "published"
    note: str | None = None
    reason: str | None = None
    low: float | None = None
    high: float | None = None

    @model_validator(mode="after")
    def _check(self) -> FigureIn:
        if self.value is None:
            if not self.reason:
                raise ValueError("a figure without a value needs a `reason` saying why")
            return self
        if self.value <= 0:
            raise ValueError(f"value must be > 0 (got {self.value})")
        if not self.source:
            raise ValueError("a figure with a value needs a `source`")
        if self.low is not None and self.low > self.value:
            raise ValueError("low must be <= value")
        if self.high is not None and self.high < self.value:
            raise ValueError("high must be >= value")
        return self


# A user's file may give a fact as a bare value (``architecture: Hopper``): it is then taken as written in
# that file, which the catalog names as its source (``Catalog._fact``).
BARE_SOURCE = "(as written in the file)"
# The range a launch year must fall in (a typo such as 20244 is refused).
FIRST_YEAR, LAST_YEAR = 2000, 2100


class FactIn(BaseModel):
    """One non-numeric fact of a GPU as written in a catalog file, with its source like a figure's."""

    model_config = ConfigDict(extra="forbid")

    source: str | None = None
    date: str | None = None
    confidence: Confidence = "published"
    note: str | None = None
    reason: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _bare(cls, data: Any) -> Any:
        if isinstance(data, str | int) and not isinstance(data, bool):
            return {"value": data, "source": BARE_SOURCE}
        return data

    @model_validator(mode="after")
    def _check(self) -> FactIn:
        if getattr(self, "value", None) is None:
            if not self.reason:
                raise ValueError("a fact without a value needs a `reason` saying why")
            return self
        if not self.source:
            raise ValueError("a fact with a value needs a `source`")
        return self


class ArchitectureIn(FactIn):
    """The vendor's name for the part's architecture: Hopper, Blackwell, Ada Lovelace, CDNA3, RDNA3, ..."""

    value: str | None = Field(min_length=1, max_length=64)


class LaunchYearIn(FactIn):
    """The year its vendor began shipping the part (not the year it was first announced)."""

    value: int | None = Field(strict=True, ge=FIRST_YEAR, le=LAST_YEAR)


class SourceIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str
    url: str | None = None
    date: str


class GpuIn(BaseModel):
    """One GPU as written in a catalog file (built-in or the user's gpus.yaml)."""

    model_config = ConfigDict(extra="forbid")

    vendor: Vendor
    segment: Segment = "datacenter"
    name: str = Field(min_length=1)
    aliases: list[str] = Field(default_factory=list)
    # The architecture (Hopper, Blackwell, CDNA3, ...) and the year its vendor began shipping the part: what
    # the like-for-like check of a comparison calls its hardware generation (cost/comparison/likeness.py).
    # ``year`` (a bare year) is the older spelling of ``launch_year``.
    architecture: ArchitectureIn | None = None
    launch_year: LaunchYearIn | None = None
    memory_type: str | None = None
    compute_capability: str | None = None
    gfx_target: str | None = None
    pci_device_ids: list[str] = Field(default_factory=list)
    pci_shared_with: list[str] = Field(default_factory=list)
    ids_source: str | None = None
    ids_confidence: Confidence = "published"
    logical_devices: int = Field(default=1, ge=1)
    memory_gb: FigureIn | None = None
    bandwidth_tb_s: FigureIn | None = None
    fp16_tflops: FigureIn | None = None
    fp8_tflops: FigureIn | None = None
    tdp_w: FigureIn | None = None
    launch_price_usd: FigureIn | None = None
    rental_usd_per_gpu_hour: FigureIn | None = None
    inferencex_usd_per_gpu_hour: FigureIn | None = None
    inferencex_all_in_power_w: FigureIn | None = None

    @model_validator(mode="before")
    @classmethod
    def _older_year(cls, data: Any) -> Any:
        if isinstance(data, dict) and "year" in data:
            data = dict(data)
            if "launch_year" in data:
                raise ValueError("give launch_year or its older spelling year, not both")
            data["launch_year"] = data.pop("year")
        return data

    @model_validator(mode="after")
    def _check_ids(self) -> GpuIn:
        for raw in self.pci_device_ids:
            parse_hex_id(raw)
        return self


class CatalogFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: Literal["gpuledger-gpu-catalog"] = "gpuledger-gpu-catalog"
    version: Literal[1] = 1
    sources: dict[str, SourceIn] = Field(default_factory=dict)
    gpus: dict[str, GpuIn] = Field(default_factory=dict)


def parse_hex_id(raw: str | int) -> int:
    """``"0x2330"``, ``"2330"`` or ``0x2330`` -> ``0x2330``. ValueError when not a 16-bit hex id."""
    if isinstance(raw, int):
        value = raw
    else:
        text = raw.strip().lower()
        text = text[2:] if text.startswith("0x") else text
        if not text or any(c not in "0123456789abcdef" for c in text):
            raise ValueError(f"not a hexadecimal PCI id: {raw!r}")
        value = int(text, 16)
    if not 0 <= value <= 0xFFFF:
        raise ValueError(f"PCI id out of range (16 bits): {raw!r}")
    return value


@dataclass(frozen=True, slots=True)
class Figure(Quantity):
    """A catalog number: a :class:`Quantity` whose ``source`` is the document it comes from (title, with
    ``source_id``, ``url`` and ``date``), plus its confidence (published or estimate), a note and a range.
    ``value is None`` -> ``reason`` says why."""

    source: str = ""
    source_id: str = ""
    url: str | None = None
    date: str | None = None
    confidence: Confidence = "published"
    note: str | None = None
    low: float | None = None
    high: float | None = None

    @property
    def is_estimate(self) -> bool:
        return self.confidence == "estimate"

    def scaled(self, factor: float, why: str) -> Figure:
        """The same figure divided among ``1/factor`` parts (e.g. per GCD), saying so in the note."""
        if self.value is None:
            return self
        return replace(
            self,
            value=self.value * factor,
            note=f"{self.note}; {why}" if self.note else why,
            reason=None,
            low=None if self.low is None else self.low * factor,
            high=None if self.high is None else self.high * factor,
        )

    def provenance(self) -> str:
        """``"NVIDIA H100 datasheet, 2026-11"`` (+ ``", estimate"``)."""
        parts = [p for p in (self.source, self.date) if p]
        if self.is_estimate:
            parts.append("estimate")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"value": self.value, "unit": self.unit}
        if self.value is None:
            out["reason"] = self.reason
            return out
        out.update(
            source=self.source,
            source_id=self.source_id,
            url=self.url,
            date=self.date,
            confidence=self.confidence,
        )
        if self.note:
            out["note"] = self.note
        if self.low is not None or self.high is not None:
            out["low"], out["high"] = self.low, self.high
        return out


def missing_figure(unit: str, reason: str) -> Figure:
    return Figure(None, unit, reason=reason)


FACT_NAMES = ("architecture", "launch_year")


@dataclass(frozen=True, slots=True)
class Fact:
    """A catalog fact that is not a quantity (an architecture's name, a launch year), with its source like a
    :class:`Figure`: ``value is None`` -> ``reason`` says why."""

    value: str | int | None
    source: str = ""
    source_id: str = ""
    url: str | None = None
    date: str | None = None
    confidence: Confidence = "published"
    note: str | None = None
    reason: str | None = None

    @property
    def available(self) -> bool:
        return self.value is not None

    @property
    def is_estimate(self) -> bool:
        return self.confidence == "estimate"

    def text(self) -> str:
        """``"Hopper"``, ``"2024"``, ``"2024?"`` (an estimate), ``"—"`` (not in the catalog)."""
        if self.value is None:
            return "—"
        return f"{self.value}{'?' if self.is_estimate else ''}"

    def provenance(self) -> str:
        """``"gpuledger reference notes ..., 2026-11"`` (+ ``", estimate"``); the reason when missing."""
        if self.value is None:
            return self.reason or "not in the catalog"
        parts = [p for p in (self.source, self.date) if p]
        if self.is_estimate:
            parts.append("estimate")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"value": self.value}
        if self.value is None:
            out["reason"] = self.reason
            return out
        out.update(source=self.source, source_id=self.source_id, url=self.url, date=self.date,
                   confidence=self.confidence)
        if self.note:
            out["note"] = self.note
        return out


def missing_fact(reason: str) -> Fact:
    return Fact(None, reason=reason)


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One GPU model. Figures describe the package; ``device(...)`` gives per-logical-device figures."""

    key: str
    vendor: str
    name: str
    segment: Segment = "datacenter"
    aliases: tuple[str, ...] = ()
    architecture: Fact | None = None
    launch_year: Fact | None = None
    memory_type: str | None = None
    compute_capability: str | None = None
    gfx_target: str | None = None
    pci_vendor_id: int | None = None
    pci_device_ids: tuple[int, ...] = ()
    pci_shared_with: tuple[str, ...] = ()
    ids_confidence: Confidence = "published"
    logical_devices: int = 1
    figures: dict[str, Figure] = field(default_factory=dict)
    origin: str = "built-in"

    def figure(self, name: str) -> Figure:
        """A figure by field name; a missing one comes back with a reason."""
        if name not in FIGURE_UNITS:
            raise KeyError(name)
        found = self.figures.get(name)
        if found is not None:
            return found
        return missing_figure(FIGURE_UNITS[name], f"{self.name}: {name} not in the catalog ({self.origin})")

    def fact(self, name: str) -> Fact:
        """``architecture`` or ``launch_year``; a missing one comes back with a reason."""
        if name not in FACT_NAMES:
            raise KeyError(name)
        found: Fact | None = getattr(self, name)
        if found is not None:
            return found
        return missing_fact(f"{self.name}: {name} not in the catalog ({self.origin})")

    @property
    def architecture_name(self) -> str | None:
        value = self.fact("architecture").value
        return value if isinstance(value, str) else None

    @property
    def year(self) -> int | None:
        """The launch year (the year its vendor began shipping it), when the catalog has it."""
        value = self.fact("launch_year").value
        return value if isinstance(value, int) else None

    def device_figure(self, name: str) -> Figure:
        """Like :meth:`figure` but per logical device (what one process / one telemetry device sees)."""
        fig = self.figure(name)
        if self.logical_devices > 1 and name in PER_PACKAGE_FIGURES:
            return fig.scaled(
                1.0 / self.logical_devices, f"per logical device (package / {self.logical_devices})"
            )
        return fig

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "vendor": self.vendor,
            "name": self.name,
            "segment": self.segment,
            "aliases": list(self.aliases),
            "architecture": self.fact("architecture").to_dict(),
            "launch_year": self.fact("launch_year").to_dict(),
            "memory_type": self.memory_type,
            "compute_capability": self.compute_capability,
            "gfx_target": self.gfx_target,
            "pci_vendor_id": None if self.pci_vendor_id is None else f"0x{self.pci_vendor_id:04x}",
            "pci_device_ids": [f"0x{d:04x}" for d in self.pci_device_ids],
            "pci_shared_with": list(self.pci_shared_with),
            "ids_confidence": self.ids_confidence,
            "logical_devices": self.logical_devices,
            "origin": self.origin,
            **{name: self.figure(name).to_dict() for name in FIGURE_UNITS},
        }
