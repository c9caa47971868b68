"""Run ids: 8 random characters of lowercase base32 (40 bits), accepted by unambiguous prefix."""

from __future__ import annotations

import re
import secrets

from gpuledger.errors import InvalidInputError

ALPHABET = "abcdefghijklmnopqrstuvwxyz234567"
ID_LENGTH = 8
MIN_PREFIX = 4
# Ids written by gpuledger match ALPHABET; imported or caller-chosen ids may use this wider set.
_VALID_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


def new_run_id() -> str:
    return "".join(secrets.choice(ALPHABET) for _ in range(ID_LENGTH))


def check_run_id(run_id: str) -> str:
    """``run_id`` if it is a valid id, else InvalidInputError."""
    if not _VALID_ID.match(run_id):
        raise InvalidInputError(
            f"invalid run id {run_id!r}: use 1-64 characters of a-z, 0-9, '-' and '_', "
            "starting with a letter or digit"
        )
    return run_id
