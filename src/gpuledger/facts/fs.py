"""File reads under a root directory (``/`` or a test tree), never raising for what a machine lacks."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

_MAX_READ_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ReadResult:
    """``text`` when the file could be read; otherwise ``error`` says why (``missing`` = no such file)."""

    path: str
    text: str | None = None
    error: str | None = None
    missing: bool = False

    @property
    def ok(self) -> bool:
        return self.text is not None


@dataclass(frozen=True, slots=True)
class FileStat:
    path: str
    exists: bool
    mode: int | None = None
    uid: int | None = None
    gid: int | None = None
    error: str | None = None

    def mode_text(self) -> str | None:
        return None if self.mode is None else stat.filemode(self.mode)


class RootFS:
    """Every path the collectors read, resolved under ``root`` (``/sys/...`` -> ``ROOT/sys/...``)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path(self, rel: str) -> Path:
        return self.root / rel.lstrip("/")

    def shown(self, rel: str) -> str:
        """The path as the user should read it in evidence (absolute, under the root when not ``/``)."""
        return str(self.path(rel))

    def read(self, rel: str, *, limit: int = _MAX_READ_BYTES) -> ReadResult:
        target = self.path(rel)
        try:
            with open(target, "rb") as fh:
                data = fh.read(limit)
        except FileNotFoundError:
            return ReadResult(str(target), missing=True, error="no such file")
        except NotADirectoryError:
            return ReadResult(str(target), missing=True, error="no such file")
        except PermissionError as exc:
            return ReadResult(str(target), error=f"permission denied ({exc.strerror or exc})")
        except OSError as exc:
            return ReadResult(str(target), error=exc.strerror or str(exc))
        return ReadResult(str(target), text=data.decode("utf-8", errors="replace"))

    def read_bytes(self, rel: str, *, limit: int = _MAX_READ_BYTES) -> bytes | None:
        try:
            with open(self.path(rel), "rb") as fh:
                return fh.read(limit)
        except OSError:
            return None

    def read_text(self, rel: str) -> str | None:
        return self.read(rel).text

    def read_first_line(self, rel: str) -> str | None:
        text = self.read_text(rel)
        if text is None:
            return None
        line = text.strip().splitlines()
        return line[0].strip() if line else ""

    def exists(self, rel: str) -> bool:
        return os.path.lexists(self.path(rel))

    def is_dir(self, rel: str) -> bool:
        return self.path(rel).is_dir()

    def listdir(self, rel: str) -> list[str]:
        try:
            return sorted(os.listdir(self.path(rel)))
        except OSError:
            return []

    def link_name(self, rel: str) -> str | None:
        """Last component of a symlink's target (e.g. the driver bound to a PCI device)."""
        try:
            target = os.readlink(self.path(rel))
        except OSError:
            return None
        return os.path.basename(target.rstrip("/")) or None

    def link_target(self, rel: str) -> str | None:
        try:
            return os.readlink(self.path(rel))
        except OSError:
            return None

    def stat(self, rel: str) -> FileStat:
        target = self.path(rel)
        try:
            st = os.stat(target)
        except FileNotFoundError:
            return FileStat(str(target), exists=False)
        except OSError as exc:
            return FileStat(str(target), exists=os.path.lexists(target), error=exc.strerror or str(exc))
        return FileStat(
            str(target),
            exists=True,
            mode=st.st_mode,
            uid=st.st_uid,
            gid=st.st_gid,
        )
