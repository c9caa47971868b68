"""Units of work: what a run produced, counted and per second, and how a price of it is quoted.

A run's summary says what work it did as a map from unit name to ``Work`` (a count over the measured
window and its rate). Cost, compare, estimate, reports and the monitor price whichever unit a run has;
the unit's ``UnitInfo`` says how to name it and per how many of it a price is quoted ("USD per 1M
output tokens", "USD per 1,000 images"). Units a workload module knows are registered with
``register_unit``; a summary may also carry its own ``UnitInfo`` for a unit nobody registered, so a new
kind of work needs no edit outside the module that measures it.
"""

from __future__ import annotations

import math
import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

_KEY = re.compile(r"^[a-z][a-z0-9_]*$")


class UnitInfo(BaseModel):
    """How a unit is named and priced. ``plural`` is the noun after a number ("output tokens");
    ``price_per`` the quantity a price is quoted for (1e6 tokens, 1e3 images, 1 request)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    plural: str = Field(min_length=1, max_length=80)
    price_per: float = Field(gt=0, allow_inf_nan=False)
    short: str | None = Field(default=None, max_length=40)  # "output tok" in "output tok/s"

    @property
    def rate_text(self) -> str:
        """``"output tok/s"``, ``"images/s"``: the unit of its rate."""
        return f"{self.short or self.plural}/s"

    @property
    def key(self) -> str:
        """The noun as a JSON key fragment: ``"output tokens"`` -> ``"output_tokens"``."""
        return re.sub(r"[^a-z0-9]+", "_", self.plural.lower()).strip("_")

    @property
    def scale_text(self) -> str:
        """``1e6`` -> ``"1M"``, ``1e3`` -> ``"1,000"``, ``1`` -> ``""`` (per one)."""
        return scale_text(self.price_per)

    @property
    def singular_key(self) -> str:
        return re.sub(r"[^a-z0-9]+", "_", self.singular.lower()).strip("_")

    def price_key(self, money: str) -> str:
        """The JSON key of a price of this unit: ``usd_per_1m_output_tokens``, ``usd_per_1k_images``,
        ``usd_per_request`` (``money`` is the currency's key prefix)."""
        scale = scale_key(self.price_per)
        return f"{money}_per_{scale}{self.key if scale else self.singular_key}"

    def per_money_key(self, money: str) -> str:
        """``output_tokens_per_usd``: how many of the unit one currency unit buys."""
        return f"{self.key}_per_{money}"

    def per_text(self) -> str:
        """``"per 1M output tokens"``, ``"per 1,000 images"``, ``"per request"``."""
        return f"per {self.scale_text} {self.plural}" if self.scale_text else f"per {self.singular}"

    @property
    def singular(self) -> str:
        words = self.plural.split(" ")
        last = words[-1]
        if last.endswith("ies"):
            last = last[:-3] + "y"
        elif last.endswith("s") and not last.endswith("ss"):
            last = last[:-1]
        return " ".join([*words[:-1], last])


def scale_text(per: float) -> str:
    if per == 1:
        return ""
    if per >= 1e6 and per % 1e6 == 0:
        return f"{per / 1e6:g}M"
    return f"{per:,.0f}" if per == int(per) else f"{per:g}"


def scale_key(per: float) -> str:
    if per == 1:
        return ""
    if per >= 1e9 and per % 1e9 == 0:
        return f"{per / 1e9:g}b_"
    if per >= 1e6 and per % 1e6 == 0:
        return f"{per / 1e6:g}m_"
    if per >= 1e3 and per % 1e3 == 0:
        return f"{per / 1e3:g}k_"
    return f"{per:g}_".replace(".", "p")


_UNITS: dict[str, UnitInfo] = {}


def register_unit(name: str, plural: str, price_per: float, short: str | None = None) -> UnitInfo:
    """Declare a unit (idempotent for the same definition). Called by the module that measures it."""
    if not _KEY.match(name):
        raise ValueError(f"unit name {name!r} must be lower_snake_case")
    info = UnitInfo(plural=plural, price_per=price_per, short=short)
    known = _UNITS.get(name)
    if known is not None and known != info:
        raise ValueError(f"unit {name!r} is already registered as {known}")
    _UNITS[name] = info
    return info


_ALIASES: dict[str, tuple[str, str]] = {}


def register_alias(alias: str, unit: str, words: str) -> None:
    """A name users may give for a unit (``compare --basis output``), and how that choice reads."""
    _ALIASES[alias] = (unit, words)


def resolve_alias(name: str) -> tuple[str, str | None]:
    """(unit, words) for an alias; (name, None) for a unit name."""
    if name in _ALIASES:
        return _ALIASES[name]
    return name, None


def alias_of(unit: str) -> str:
    """The name users know a unit by (``output_token`` -> ``output``), else the unit's own name."""
    for alias, (target, _) in _ALIASES.items():
        if target == unit:
            return alias
    return unit


def unit_info(name: str, own: UnitInfo | None = None) -> UnitInfo:
    """The unit's naming: the run's own ``own`` when it carries one, else the registered one, else a
    plain reading of the name priced per one."""
    if own is not None:
        return own
    known = _UNITS.get(name)
    if known is not None:
        return known
    return UnitInfo(plural=name.replace("_", " ") + "s", price_per=1.0)


class Work(BaseModel):
    """Work of one unit over the measured window: ``count`` done, ``per_s`` = count ÷ window (None when
    the window is empty). ``unit`` optionally names and prices a unit no module registered."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    count: float = Field(ge=0, allow_inf_nan=False)
    per_s: float | None = Field(default=None, ge=0)
    unit: UnitInfo | None = None

    @field_validator("per_s")
    @classmethod
    def _finite(cls, v: float | None) -> float | None:
        if v is not None and not math.isfinite(v):
            raise ValueError("per_s must be finite")
        return v
