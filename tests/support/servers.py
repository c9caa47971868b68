"""Loopback test servers as fixtures: ``yield from started_servers(make)`` gives the test a function that
starts a server (``make(...)`` then ``.start()``) and stops every one it started when the test ends, failed
or not."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar


class Server(Protocol):
    def start(self) -> Any: ...
    def stop(self) -> Any: ...


S = TypeVar("S", bound=Server)


def started_servers(make: Callable[..., S]) -> Iterator[Callable[..., S]]:
    """The body of a fixture: ``start(*args, **kwargs)`` → ``make(*args, **kwargs).start()``."""
    started: list[S] = []

    def start(*args: Any, **kwargs: Any) -> S:
        srv = make(*args, **kwargs)
        srv.start()
        started.append(srv)
        return srv

    try:
        yield start
    finally:
        for srv in started:
            srv.stop()
