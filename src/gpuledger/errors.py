"""One exception tree. The CLI turns every ``GpuledgerError`` into one red line and its exit code.

Exit codes (documented in docs/cli.md and README):

====  =============================================================
0     success (doctor: all ok; lock --check: no drift)
1     doctor found warnings; lock --check found drift
2     doctor found errors; command-line usage error
3     not found: unknown or ambiguous run id, unknown GPU/profile
4     invalid input: bad profile/config/file, bad flag values
5     store error: database unreachable, corrupt, read-only
6     engine error: inference server unreachable or refused the run
7     missing optional dependency (e.g. torch not installed)
8     resource error: model does not fit, device unavailable
74    output error: stdout or an output file cannot be written (disk full, I/O error, closed pipe)
130   interrupted (Ctrl-C); partial results are kept as ``incomplete``
====  =============================================================
"""

from __future__ import annotations


class GpuledgerError(Exception):
    """Base of every error the user may see. ``str(err)`` is the one line shown."""

    exit_code: int = 4

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class UsageError(GpuledgerError):
    """Invalid flag combination or value on the command line."""

    exit_code = 2


class NotFoundError(GpuledgerError):
    """A run id, GPU name, profile or file that does not exist (or an ambiguous prefix)."""

    exit_code = 3


class InvalidInputError(GpuledgerError):
    """A file or value the user gave is malformed, out of range, or from a future format."""

    exit_code = 4


class StoreError(GpuledgerError):
    """The results database cannot be opened, read or written."""

    exit_code = 5


class EngineError(GpuledgerError):
    """The inference engine/server could not be reached or refused the whole run."""

    exit_code = 6


class MissingDependencyError(GpuledgerError):
    """An optional dependency (torch, transformers, amdsmi, ...) is not installed."""

    exit_code = 7


class ResourceError(GpuledgerError):
    """The machine cannot do what was asked: the model does not fit, the device is absent."""

    exit_code = 8


class OutputError(GpuledgerError):
    """Output cannot be written: stdout, or an output file (disk full, I/O error, closed pipe)."""

    exit_code = 74


class Interrupted(GpuledgerError):
    """Ctrl-C / SIGTERM. Partial results were kept."""

    exit_code = 130
