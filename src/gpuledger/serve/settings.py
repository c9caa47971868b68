"""What ``gpuledger serve`` is given, checked before anything starts: where the store is, where to listen, the
token that guards a listener other than this machine's loopback, the cost profile every price uses."""

from __future__ import annotations

import ipaddress
import os

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from gpuledger.errors import UsageError

TOKEN_ENV = "GPULEDGER_SERVE_TOKEN"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
# A token a browser can be given by hand, long enough that guessing it is not a plan (16 characters of
# `secrets.token_urlsafe` are 96 bits).
MIN_TOKEN_CHARS = 16
MAX_TOKEN_CHARS = 512


class ServeSettings(BaseModel):
    """The server's settings. ``token``: when set, every request must carry it (any address)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    db: str | None = None
    host: str = Field(default=DEFAULT_HOST, min_length=1, max_length=255)
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535)
    token: SecretStr | None = None
    profile: str | None = Field(default=None, max_length=4096)
    workers: int = Field(default=8, ge=1, le=64)


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine's loopback only (``127.0.0.0/8``, ``::1``, ``localhost``)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: whatever it resolves to, it is not known to be loopback


def settings_from(
    *, db: str | None, host: str, port: int, token: str | None, profile: str | None, workers: int = 8
) -> ServeSettings:
    """The settings of the command line, the token from ``--token`` or ``$GPULEDGER_SERVE_TOKEN``; a listener
    beyond loopback without a token is refused (UsageError, exit 2), and so is a token too short to guard
    it."""
    given = token if token is not None else os.environ.get(TOKEN_ENV)
    given = given.strip() if given is not None else None
    if given == "":
        given = None
    if given is not None and not MIN_TOKEN_CHARS <= len(given) <= MAX_TOKEN_CHARS:
        raise UsageError(
            f"the token must be {MIN_TOKEN_CHARS} to {MAX_TOKEN_CHARS} characters (it has {len(given)})",
            hint="make one with: python3 -c 'import secrets; print(secrets.token_urlsafe(24))'",
        )
    if not is_loopback(host) and given is None:
        raise UsageError(
            f"--host {host} listens beyond this machine: give --token (or ${TOKEN_ENV}); every request must "
            "then carry it",
            hint="or keep the default --host 127.0.0.1 and reach it through an SSH tunnel or a reverse proxy",
        )
    if not 0 <= port <= 65535:
        raise UsageError(f"--port {port}: a TCP port is 0 … 65535")
    return ServeSettings(db=db, host=host.strip(), port=port, token=SecretStr(given) if given else None,
                         profile=profile, workers=workers)
