"""What a request may ask, as models: every query parameter of every page and API route is a field of one of
these (``extra="forbid"``: an unknown parameter is a 400, not ignored), bounded in length and range; a
parameter given twice, too many parameters or too long a query are refused before any model is made."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gpuledger.errors import InvalidInputError
from gpuledger.serve.security import MAX_PARAM_CHARS, MAX_QUERY_CHARS, MAX_QUERY_PARAMS

# A run id (or an unambiguous prefix of one), or a group of repeats (``g-…``): what ``compare`` takes.
REF_PATTERN = r"^[A-Za-z0-9_-]{1,80}$"

M = TypeVar("M", bound=BaseModel)


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CompareParams(Params):
    """``/compare?a=RUN&b=RUN`` (runs or groups of repeats); ``basis``: the unit compared (``compare
    --basis``)."""

    a: str = Field(pattern=REF_PATTERN)
    b: str = Field(pattern=REF_PATTERN)
    basis: str | None = Field(default=None, max_length=64, pattern=r"^[a-z_]+$")

    @field_validator("basis", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        return None if value == "" else value


class TrendParams(Params):
    """``/trend?label=L&model=M&metric=NAME``: the runs of a label and/or a model over time (``report
    --trend``)."""

    label: str | None = Field(default=None, max_length=MAX_PARAM_CHARS)
    model: str | None = Field(default=None, max_length=MAX_PARAM_CHARS)
    metric: str = Field(default="throughput", max_length=64, pattern=r"^[a-z0-9_]+$")

    @field_validator("label", "model", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value


class LoginParams(Params):
    """``/login?next=PATH``: where to go back to after logging in."""

    next: str | None = Field(default=None, max_length=MAX_QUERY_CHARS)


class NoParams(Params):
    """A page that takes no parameter."""


def query_string_problem(query_string: str) -> str | None:
    """Why a raw query string is refused before it is parsed (too long), or None."""
    if len(query_string) > MAX_QUERY_CHARS:
        return f"the query is {len(query_string)} characters long; at most {MAX_QUERY_CHARS} are read"
    return None


def parse(model: type[M], query: Mapping[str, str], keys: list[str]) -> M:
    """``query`` (with its ``keys`` in order, repeats included) as ``model``; InvalidInputError saying which
    parameter is wrong and why (a parameter named ``token`` is refused: the token never goes in a URL)."""
    if "token" in keys:
        raise InvalidInputError("the token is not accepted in a URL: send it as 'Authorization: Bearer …' "
                                "or log in at /login")
    if len(keys) > MAX_QUERY_PARAMS:
        raise InvalidInputError(f"{len(keys)} query parameters; at most {MAX_QUERY_PARAMS} are read")
    seen: set[str] = set()
    for key in keys:
        if key in seen:
            raise InvalidInputError(f"query parameter {key[:40]!r} is given twice")
        seen.add(key)
        if len(query[key]) > MAX_PARAM_CHARS:
            raise InvalidInputError(
                f"query parameter {key[:40]!r} is longer than {MAX_PARAM_CHARS} characters")
    try:
        return model.model_validate(dict(query))
    except ValidationError as exc:
        raise InvalidInputError(_first_problem(exc)) from None


def _first_problem(exc: ValidationError) -> str:
    first = exc.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(p) for p in first["loc"]) or "the query"
    if first["type"] == "extra_forbidden":
        return f"unknown query parameter {where[:40]!r}"
    return f"query parameter {where[:40]!r}: {first['msg']}"
