"""The base of the run spec's models (``records.spec``, ``records.load``): unknown keys refused, the error
a stored spec that cannot be read raises."""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict


class SpecError(ValueError):
    """A stored spec that cannot be read (the store maps it to StoreError / InvalidInputError)."""


class SpecModel(BaseModel):
    """Base of the spec's models: unknown keys refused. Infinities pass the type check and are refused by
    the validators with the flag's own message (``--duration must be a positive number of seconds``)."""

    model_config = ConfigDict(extra="forbid")


def finite_positive(value: float | None) -> bool:
    return value is None or (math.isfinite(value) and value > 0)
