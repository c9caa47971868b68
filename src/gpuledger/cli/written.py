"""The files a command wrote beside its document (``report --html/--md``): the ``files`` of its ``--json``
document, each format's path, only those written."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class Written(BaseModel):
    """The path of each file written, by format (None: not written)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    html: str | None = None
    md: str | None = None


def with_files(document: BaseModel, written: Written) -> dict[str, Any]:
    """``document``'s ``--json`` dump with ``files``: the paths written, by format (``{}``: none)."""
    return {**document.model_dump(mode="json"), "files": written.model_dump(mode="json", exclude_none=True)}
