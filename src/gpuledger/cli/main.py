"""The ``gpuledger`` console script.

This module is deliberately light: ``main`` installs the signal handlers first, then imports the
application (``gpuledger.cli.app``, most of a command's start-up time), so Ctrl-C or SIGTERM at any
moment ends the command with exit 130 and one line. Every error leaves as one line on stderr with the
documented exit code (README "Exit codes"):

- library errors arrive as ``GpuledgerError`` (their message, an optional ``hint:`` line);
- usage errors (unknown option or command, missing argument, bad value) are click's, printed as one
  ``error:`` line with exit 2 instead of typer's boxed panel;
- stdout that cannot be written (disk full, I/O error) is exit 74; a closed pipe (``| head``) ends the
  output silently with the same code;
- anything else is a bug, reported in one line (exit 70; ``GPULEDGER_DEBUG=1`` shows the traceback).
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

# Write errors that mean "the output cannot go where it was sent", not a bug.
_OUTPUT_ERRNOS = frozenset({errno.EPIPE, errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EFBIG})
EXIT_USAGE = 2
EXIT_OUTPUT = 74
EXIT_INTERRUPTED = 130
EXIT_BUG = 70
# An error line is at most this long (a hostile server body or file name cannot flood stderr).
MAX_ERROR_CHARS = 480


class Terminated(KeyboardInterrupt):
    """SIGTERM, delivered like Ctrl-C: every ``except KeyboardInterrupt`` and ``finally`` cleans up
    (a torch bench keeps its finished requests as an incomplete run) instead of the process dying."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise Terminated(signal.Signals(signum).name)


def install_signal_handlers() -> Callable[[], None]:
    """SIGINT raises KeyboardInterrupt (Python's own handler) and SIGTERM raises ``Terminated``, unless
    the process was started with the signal ignored (``nohup``, a background job). Returns a function
    that puts the previous handlers back. Outside the main thread (an embedding application) nothing
    can be installed and nothing is."""
    previous: dict[signal.Signals, Any] = {}
    wanted: dict[signal.Signals, Any] = {
        signal.SIGINT: signal.default_int_handler,
        signal.SIGTERM: _on_sigterm,
    }
    for sig, handler in wanted.items():
        try:
            current = signal.getsignal(sig)
            if current is signal.SIG_IGN:
                continue
            signal.signal(sig, handler)
            previous[sig] = current
        except (ValueError, OSError):  # not the main thread, or no such signal here
            continue

    def restore() -> None:
        for sig, handler in previous.items():
            try:
                signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
            except (ValueError, OSError):
                continue

    return restore


def __getattr__(name: str) -> Any:
    # ``from gpuledger.cli.main import app`` keeps working; importing this module stays cheap.
    if name == "app":
        from gpuledger.cli.app import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _clip_line(text: str) -> str:
    from gpuledger.textsafe import neutralise

    line = neutralise(" ".join(text.split()))
    if len(line) > MAX_ERROR_CHARS:
        line = f"{line[:MAX_ERROR_CHARS]}… ({len(line) - MAX_ERROR_CHARS:,} more characters not shown)"
    return line


def _say(label: str, message: str, hint: str | None = None) -> None:
    """One ``error:`` line (and an optional ``hint:`` line) on stderr; never raises."""
    try:
        from rich.markup import escape

        from gpuledger.cli.common import err_console

        err_console.print(f"[red]{label}:[/red] {escape(_clip_line(message))}")
        if hint:
            err_console.print(f"  hint: {escape(_clip_line(hint))}")
    except OSError:  # stderr itself cannot be written: the exit code is all that is left
        return


def _usage_line(exc: BaseException, commands: Any, args: list[str]) -> str:
    ctx = getattr(exc, "ctx", None)
    path = getattr(ctx, "command_path", None)
    if not path:  # some parse errors carry no context: name the command from the arguments
        sub = next((a for a in args if not a.startswith("-")), None)
        path = f"gpuledger {sub}" if sub in commands else "gpuledger"
    format_message = getattr(exc, "format_message", None)
    text = format_message() if callable(format_message) else str(exc)
    return f"{path}: {text} (see {path} --help)"


def _click_class(name: str) -> type[BaseException]:
    """click's exception class ``name`` as typer uses it (typer >= 0.29 vendors click; older typer
    uses the click package): found through ``typer.BadParameter``, a public name in both."""
    import typer

    for cls in typer.BadParameter.__mro__:
        if cls.__name__ == name:
            return cls
    raise LookupError(name)  # pragma: no cover - both click lines define UsageError and ClickException


def _output_failed(exc: OSError) -> int:
    if exc.errno != errno.EPIPE:  # a closed pipe (``| head``): the reader has what it wanted
        where = f" to {exc.filename}" if exc.filename else ""
        _say("error", f"cannot write the output{where}: {exc.strerror or exc}")
    return EXIT_OUTPUT


def _run(argv: list[str] | None) -> int:
    from gpuledger.errors import GpuledgerError

    try:
        import typer
        from typer.main import get_command

        from gpuledger.cli.app import app
        from gpuledger.cli.numeric import bound_numbers

        usage_error, click_error = _click_class("UsageError"), _click_class("ClickException")
        command = bound_numbers(get_command(app))  # no option takes inf, nan or a 100-bit integer
        commands = getattr(command, "commands", {})
        args = sys.argv[1:] if argv is None else list(argv)
        try:
            with command.make_context("gpuledger", args) as ctx:
                command.invoke(ctx)
        except usage_error as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":
                # bare ``gpuledger``: typer has printed the help already (plain click returns it)
                sys.stdout.write(str(exc.format_message()))  # type: ignore[attr-defined]
                return EXIT_USAGE
            _say("error", _usage_line(exc, commands, args))
            return EXIT_USAGE
        except click_error as exc:  # click's other parse-time errors (a file option it could not open)
            _say("error", _usage_line(exc, commands, args))
            return EXIT_USAGE
        except typer.Exit as exc:
            return int(exc.exit_code)
        except typer.Abort:
            raise KeyboardInterrupt from None
        sys.stdout.flush()
        return 0
    except KeyboardInterrupt as exc:
        for sig in (signal.SIGINT, signal.SIGTERM):  # a second signal must not turn this into a traceback
            with contextlib.suppress(ValueError, OSError):
                signal.signal(sig, signal.SIG_IGN)
        name = f" ({exc.args[0]})" if isinstance(exc, Terminated) and exc.args else ""
        try:
            sys.stderr.write(f"error: interrupted{name}\n")
            sys.stderr.flush()
        except OSError:
            pass
        return EXIT_INTERRUPTED
    except GpuledgerError as exc:
        _say("error", exc.message, exc.hint)
        return exc.exit_code
    except OSError as exc:
        if exc.errno in _OUTPUT_ERRNOS:
            return _output_failed(exc)
        if os.environ.get("GPULEDGER_DEBUG"):
            raise
        return _bug(exc)
    except Exception as exc:  # last line of defence: one line, never a traceback
        if os.environ.get("GPULEDGER_DEBUG"):
            raise
        return _bug(exc)


def _bug(exc: Exception) -> int:
    _say("internal error", f"{type(exc).__name__}: {exc} (a bug in gpuledger; set GPULEDGER_DEBUG=1 for the "
         "traceback)")
    return EXIT_BUG


def _quiet_stdout() -> None:
    """After stdout failed, point it at /dev/null so the interpreter's final flush cannot fail again
    (which would print "Exception ignored" and exit 120)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        return


def main(argv: list[str] | None = None) -> int:
    """Entry point. Returns (and, as a console script, exits with) the documented exit code."""
    if argv is None:
        # The console script loads no pydantic plugin: looking for them reads every installed
        # distribution's entry points when the first model is built (~55 ms of `gpuledger runs` on a
        # 2-core machine, benchmarks/startup_time.py). A value the user set is kept ("" loads them).
        os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    restore = install_signal_handlers()
    try:
        code = _run(argv)
    finally:
        if argv is not None:
            restore()
    if argv is None:
        if code == EXIT_OUTPUT:
            _quiet_stdout()
        sys.exit(code)
    return code


if __name__ == "__main__":
    main()
