"""The base of the run spec's models (``records.spec``, ``records.load``): unknown keys refused, the error
a stored spec that cannot be read raises, and the server URL that every dump redacts.

A spec's server URL (``base_url``) is the one a run's requests are sent to, credentials included
(``http://user:password@host``): the spec keeps it whole. Every dump of it — stored, exported, printed,
``model_dump`` and ``model_dump_json`` alike — shows it redacted (``gpuledger.urls.redact_url``), except a
dump made with the context ``{KEEP_SECRETS: True}``: the one that stays in memory for the run itself
(``records.spec.settled``, which re-validates a dump, and the spec a run hands its own load processes).
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Final

from pydantic import BaseModel, ConfigDict, PlainSerializer, SerializationInfo

from gpuledger.urls import redact_url

# The serialization context key of a dump that keeps the secrets (the module docstring).
KEEP_SECRETS: Final = "keep_secrets"


def keeps_secrets(info: SerializationInfo) -> bool:
    """Whether this dump was asked to keep secrets (``context={KEEP_SECRETS: True}``)."""
    context: Any = info.context
    return isinstance(context, dict) and context.get(KEEP_SECRETS) is True


def _shown_url(url: str, info: SerializationInfo) -> str:
    return url if keeps_secrets(info) else redact_url(url)


# A server URL in a spec: whole in the model, redacted in every dump but one that keeps secrets.
SecretUrl = Annotated[str, PlainSerializer(_shown_url, return_type=str)]


class SpecError(ValueError):
    """A stored spec that cannot be read (the store maps it to StoreError / InvalidInputError)."""


class SpecModel(BaseModel):
    """Base of the spec's models: unknown keys refused. Infinities pass the type check and are refused by
    the validators with the flag's own message (``--duration must be a positive number of seconds``)."""

    model_config = ConfigDict(extra="forbid")


def finite_positive(value: float | None) -> bool:
    return value is None or (math.isfinite(value) and value > 0)
