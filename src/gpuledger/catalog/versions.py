"""Version strings as the tools print them, made comparable."""

from __future__ import annotations

import re


def version_tuple(text: str) -> tuple[int, ...]:
    """``"6.2.0-66"`` -> ``(6, 2, 0)``; non-numeric parts end the tuple."""
    parts: list[int] = []
    core = re.split(r"[-+~ ]", text.strip(), maxsplit=1)[0]
    for piece in core.split("."):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts)
