"""URLs that come from outside (``--base-url``, ``--ollama``, ``OLLAMA_HOST``, a server's ``Location``).

A URL may carry secrets: credentials (``http://user:pass@host/v1``) and query parameters whose names say
they hold one (``?api_key=``, ``?token=``, ``?sig=`` ...). The credentials are USED for the request (as a
``Basic`` ``Authorization`` header, never left in the URL handed to the HTTP client) and REDACTED everywhere
else: stored runs, exports, terminal output, error messages, doctor facts. :func:`redact_url` is the one
redaction; everything that shows or stores a URL goes through it (docs/contracts.md, "What is redacted").

Redaction: a password becomes ``***`` (``user:***@host``); a user part without a password becomes ``***``
(``https://TOKEN@host`` is a common way to pass a token); the value of every query or fragment parameter
whose name contains ``key``, ``token``, ``secret``, ``pass``, ``pwd``, ``auth``, ``sig``, ``credential``,
``session`` or ``jwt`` becomes ``***``. Everything before the last ``@`` counts as credentials (unless
that ``@`` is in the query after a path), even when a ``/``, ``?`` or ``#`` in the password was not
percent-encoded: a malformed URL is redacted too much rather than too little.

A secret can also come back without its URL: a server that echoes the ``Authorization`` header or the API
key in its error body, an exception that quotes a password. :class:`Secrets` holds the secret VALUES a run
knows — the API key read from its environment variable, a URL's password (or the token given as its user),
the values of its secret query parameters, in the forms a server may echo them (as given, percent-decoded,
the ``Basic`` header's base64) — and :meth:`Secrets.redact` replaces each of them by ``***`` in any text,
after :func:`redact_text`. The HTTP engines apply it where a server's text enters gpuledger (a request's
error, a refusal at open): what is stored in ``requests.error``, exported and printed on stderr never holds
them. Values shorter than ``MIN_SECRET_CHARS`` are not searched for (they would match ordinary words).
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from urllib.parse import unquote, unquote_plus, urljoin, urlsplit, urlunsplit

REDACTED = "***"
# A secret value shorter than this is not searched for in text (``Secrets``): it would match words.
MIN_SECRET_CHARS = 4
_SECRET_PARAM = re.compile(r"key|token|secret|pass|pwd|auth|sig|credential|session|jwt", re.IGNORECASE)
_URL_IN_TEXT = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>()\[\]{}]+")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _redact_params(part: str) -> str:
    """``a=1&api_key=sk`` → ``a=1&api_key=***`` (``&`` and ``;`` separate parameters)."""
    out = []
    for item in re.split(r"([&;])", part):
        name, eq, _value = item.partition("=")
        out.append(f"{name}={REDACTED}" if eq and _SECRET_PARAM.search(unquote(name)) else item)
    return "".join(out)


def redact_url(url: str) -> str:
    """``url`` with its secrets replaced by ``***`` (the module's rules); a string without secrets is
    returned as it is, scheme or not (``user:pw@host:11434`` → ``user:***@host:11434``). Never raises."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    q = _first(rest, "?#")
    slash = rest.find("/")
    # An "@" after "/path?" is in the query; otherwise the last "@" ends the credentials, even when a
    # "/", "?" or "#" in the password was not percent-encoded.
    limit = q if q < len(rest) and 0 <= slash < q else len(rest)
    at = rest.rfind("@", 0, limit)
    creds = ""
    if at >= 0:
        user, colon, _password = rest[:at].partition(":")
        creds = f"{user}:{REDACTED}" if colon else REDACTED
        rest = rest[at:]
    q = _first(rest, "?#")
    head, tail = rest[:q], rest[q:]
    if tail:
        query, hash_, fragment = tail.partition("#")
        tail = _redact_params(query) + hash_ + _redact_params(fragment)
    return f"{scheme}{sep}{creds}{head}{tail}"


def _first(s: str, chars: str) -> int:
    """Index of the first of ``chars`` in ``s``, else ``len(s)``."""
    return min((i for i in (s.find(c) for c in chars) if i >= 0), default=len(s))


_URL_VARIABLE = re.compile(r"(HOST|URL|URI|PROXY|ENDPOINT|ADDR|ADDRESS)$", re.IGNORECASE)
_SECRET_VARIABLE = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)$", re.IGNORECASE)


def redact_env(name: str, value: str) -> str:
    """An environment variable's value as it may be shown or stored: a secret's (``*_TOKEN``, ``*_KEY``
    ...) is ``***``, a URL's (``OLLAMA_HOST``, ``*_URL``, ``*_PROXY`` ...) is :func:`redact_url`-ed,
    and URLs inside any other value are redacted."""
    if _SECRET_VARIABLE.search(name):
        return REDACTED if value else value
    if _URL_VARIABLE.search(name):
        return redact_url(value)
    return redact_text(value)


def redact_text(text: str) -> str:
    """Every ``scheme://...`` URL inside free text (an exception's message, a server's error body)
    redacted with :func:`redact_url`."""
    if "://" not in text:
        return text
    def one(m: re.Match[str]) -> str:
        url = m.group(0).rstrip(".,;:!")
        return redact_url(url) + m.group(0)[len(url) :]

    return _URL_IN_TEXT.sub(one, text)


def _credentials(url: str) -> tuple[str | None, str | None, str]:
    """(user, password, the rest) of ``url`` as written — the part before the last ``@`` as
    :func:`redact_url` reads it; None for a part that is absent."""
    _scheme, sep, rest = url.partition("://")
    if not sep:
        rest = url
    q = _first(rest, "?#")
    slash = rest.find("/")
    limit = q if q < len(rest) and 0 <= slash < q else len(rest)
    at = rest.rfind("@", 0, limit)
    if at < 0:
        return None, None, rest
    user, colon, password = rest[:at].partition(":")
    return user, (password if colon else None), rest[at + 1 :]


def secret_values(url: str | None = None, *, api_key: str | None = None) -> tuple[str, ...]:
    """The secret values ``url`` and ``api_key`` carry, each in the forms a server could echo back: the
    password (or a user given without one: a token) as written and percent-decoded, the ``Basic`` header's
    base64 of ``user:password``, each secret query or fragment parameter's value as written and decoded,
    the API key. Longest first; none shorter than ``MIN_SECRET_CHARS``."""
    found: list[str] = []
    if api_key:
        found.append(api_key)
    if url:
        user, password, rest = _credentials(url.strip())
        secret = password if password is not None else user
        if secret:
            found += [secret, unquote(secret)]
        if user is not None or password is not None:
            pair = f"{unquote(user or '')}:{unquote(password or '')}"
            found.append(base64.b64encode(pair.encode("utf-8")).decode("ascii"))
        q = _first(rest, "?#")
        for item in re.split(r"[&;?#]", rest[q:]):
            name, eq, value = item.partition("=")
            if eq and value and _SECRET_PARAM.search(unquote(name)):
                found += [value, unquote_plus(value)]
    kept = {v for v in found if len(v) >= MIN_SECRET_CHARS and v != REDACTED}
    return tuple(sorted(kept, key=lambda v: (-len(v), v)))


@dataclass(frozen=True, slots=True)
class Secrets:
    """The secret values a run knows (:func:`secret_values`), to take out of any text that came from
    outside before it is stored or shown (the module docstring)."""

    values: tuple[str, ...] = ()

    @classmethod
    def of(cls, *urls: str | None, api_key: str | None = None) -> Secrets:
        """The secrets of these URLs and of the API key."""
        found = [v for u in urls for v in secret_values(u)] + list(secret_values(api_key=api_key))
        return cls(tuple(sorted(set(found), key=lambda v: (-len(v), v))))

    def __add__(self, other: Secrets) -> Secrets:
        return Secrets(tuple(sorted({*self.values, *other.values}, key=lambda v: (-len(v), v))))

    def redact(self, text: str) -> str:
        """``text`` with its URLs redacted (:func:`redact_text`) and every known secret value, wherever it
        stands, replaced by ``***``."""
        text = redact_text(text)
        for value in self.values:
            if value in text:
                text = text.replace(value, REDACTED)
        return text


def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) with the scheme's default port filled in: what "same server" means for a
    redirect. ``ValueError`` for a URL without a host or with a bad port."""
    parts = urlsplit(url)
    host = parts.hostname
    if not parts.scheme or not host:
        raise ValueError(f"not an absolute URL: {redact_url(url)}")
    scheme = parts.scheme.lower()
    return scheme, host.lower(), parts.port or _DEFAULT_PORTS.get(scheme)


def resolve_location(request_url: str, location: str) -> str:
    """A redirect's ``Location`` made absolute against the URL that was requested, without any
    ``user:password@`` in it (a server does not choose the credentials that are sent on)."""
    parts = urlsplit(urljoin(request_url, location.strip()))
    netloc = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


@dataclass(frozen=True, slots=True)
class ServerUrl:
    """A server's base URL taken apart for use. ``base`` (``scheme://host[:port][/path]``, no credentials,
    no query, no trailing ``/v1``) is what endpoint paths are appended to; ``query`` (``""`` or
    ``"?..."``) is appended after them; ``authorization`` is the ``Basic`` header made from the URL's
    credentials (None without); ``display`` is the redacted URL to show and store; ``secrets`` the secret
    values it carries (:class:`Secrets`), to take out of what its server says."""

    base: str
    query: str
    authorization: str | None
    display: str
    secrets: Secrets = field(default_factory=Secrets)

    def url(self, path: str) -> str:
        return self.base + path + self.query

    def same_origin(self, url: str) -> bool:
        try:
            return origin(url) == origin(self.base)
        except ValueError:
            return False


def parse_server_url(url: str, *, strip_v1: bool = True, default_scheme: str | None = None) -> ServerUrl:
    """``http://user:pw@h:8000/v1/?k=1`` → base ``http://h:8000``, query ``?k=1``, a Basic header for
    user/pw, display ``http://user:***@h:8000/v1?k=1``. ``default_scheme`` is put in front of a URL
    without one (``OLLAMA_HOST=host:11434``); otherwise the scheme must be http or https.
    ``ValueError`` (with the URL redacted) for anything that is not a usable http(s) URL."""
    raw = url.strip()
    if default_scheme and "://" not in raw:
        raw = f"{default_scheme}://{raw}"
    shown = redact_url(raw)
    scheme, sep, _ = raw.partition("://")
    if not sep or scheme.lower() not in _DEFAULT_PORTS:
        raise ValueError(f"must start with http:// or https://, got {shown!r}")
    try:
        parts = urlsplit(raw)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"not a valid URL: {shown!r}") from exc
    host = parts.hostname
    if not host:
        raise ValueError(f"no host in {shown!r}")
    if parts.fragment:
        raise ValueError(f"a server URL has no #fragment: {shown!r}")
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc += f":{port}"
    path = parts.path.rstrip("/")
    if strip_v1 and path.endswith("/v1"):
        path = path[:-3]
    base = f"{scheme.lower()}://{netloc}{path}"
    authorization = None
    if parts.username is not None or parts.password is not None:
        pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
        authorization = "Basic " + base64.b64encode(pair.encode("utf-8")).decode("ascii")
    query = f"?{parts.query}" if parts.query else ""
    userinfo = parts.netloc.rpartition("@")[0]
    display = redact_url(f"{scheme.lower()}://{userinfo + '@' if userinfo else ''}{netloc}{path}{query}")
    return ServerUrl(base=base, query=query, authorization=authorization, display=display,
                     secrets=Secrets(secret_values(raw)))
