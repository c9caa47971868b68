"""How ``gpuledger serve`` guards what it serves: the token (a bearer header, or the session cookie the login
form sets), the headers every answer carries (a strict Content-Security-Policy among them) and the bounds on
what a request may be.

- The token is never in a URL (a query parameter named ``token`` is refused), never in a log line, never in
  a page. The cookie does not hold it either: it holds an HMAC of a fixed text under the token, so a stolen
  cookie is worth a session, not the token, and changing the token ends every session. The cookie is
  ``HttpOnly``, ``SameSite=Strict``, ``Path=/``, and ``Secure`` when the request came over HTTPS (or a
  reverse proxy says so with ``X-Forwarded-Proto: https``).
- Content-Security-Policy: scripts, styles, images and connections from this server only; no inline script,
  no ``eval``, no plugin, no frame (``frame-ancestors 'none'``), forms post to this server only.
- Only ``GET`` and ``HEAD`` are answered (``POST /login`` and ``POST /logout`` aside, which write no store):
  anything else is 405.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

from pydantic import SecretStr

SESSION_COOKIE = "gpuledger_session"
SESSION_MAX_AGE_S = 7 * 24 * 3600
_SESSION_TEXT = b"gpuledger serve session, version 1"

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'; object-src 'none'"
)
HEADERS: Mapping[str, str] = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=(), interest-cohort=()",
}

READ_METHODS = frozenset({"GET", "HEAD"})
FORM_POSTS = frozenset({"/login", "/logout"})

# Bounds on a request (aiohttp refuses a longer request line or header itself: see app.py).
MAX_QUERY_CHARS = 4096
MAX_QUERY_PARAMS = 24
MAX_PARAM_CHARS = 512
MAX_BODY_BYTES = 4096
MAX_LINE_BYTES = 8190
MAX_FIELD_BYTES = 8190


def session_value(token: SecretStr) -> str:
    """The session cookie's value for ``token``."""
    return hmac.new(token.get_secret_value().encode(), _SESSION_TEXT, hashlib.sha256).hexdigest()


def token_matches(given: str, token: SecretStr) -> bool:
    """``given`` is the token (compared in constant time)."""
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), token.get_secret_value().encode())


def bearer(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer TOKEN`` header."""
    if not header:
        return None
    scheme, _, value = header.strip().partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def authorized(token: SecretStr, authorization: str | None, cookie: str | None) -> bool:
    """A request carrying the token as a bearer header, or the session cookie of a login with it."""
    given = bearer(authorization)
    if given is not None and token_matches(given, token):
        return True
    return cookie is not None and hmac.compare_digest(cookie.encode("utf-8", "surrogatepass"),
                                                       session_value(token).encode())


def safe_next(target: str | None) -> str:
    """Where a login goes back to: a path of this server only (no ``//host``, no scheme), else ``/``."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    if any(ord(c) < 0x20 for c in target) or len(target) > MAX_QUERY_CHARS:
        return "/"
    return target
