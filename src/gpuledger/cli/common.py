"""Shared CLI plumbing: consoles, JSON output, the options every results command takes."""

from __future__ import annotations

import errno
import re
import sys
from collections.abc import Iterable
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console, ConsoleOptions, RenderableType
from rich.errors import MarkupError
from rich.markup import escape
from rich.segment import Segment
from rich.text import Text

from gpuledger.textsafe import MAX_DISPLAY_CHARS, clip, clip_suffix, neutralise


class SafeConsole(Console):
    """A rich Console that never lets a control character from outside reach the terminal, and never
    prints a huge value in full (docs/contracts.md, "What reaches the terminal").

    Every string it renders (``print``, table cells, titles, status lines: ``render_str``) and every
    ``Text`` it is given is neutralised (ESC -> "␛", see ``gpuledger.textsafe``) and clipped at
    ``MAX_DISPLAY_CHARS`` before layout, so widths stay right and a 10 MB value costs nothing to lay
    out; the segments it writes are neutralised once more as a backstop (rich's own control segments,
    cursor moves of a live display, pass untouched). A string that is not valid markup (a label
    holding "[/red]" interpolated into a markup string) is shown as it is instead of raising, and no
    hyperlink is written (gpuledger prints none, so any would come from injected markup)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if kwargs.get("width") is None:
            # rich reads COLUMNS once, here; the CLI's consoles live as long as the process, and a library
            # caller (or a test) may change COLUMNS between commands: read it when the width is asked for.
            self._width = None

    def render_str(self, text: str, **kwargs: Any) -> Text:
        safe = neutralise(clip(text))
        try:
            return super().render_str(safe, **kwargs)
        except MarkupError:
            # A label with "[/red]" in it, put into a markup string: shown as it is, not a crash.
            return super().render_str(safe, **{**kwargs, "markup": False})

    def render(self, renderable: RenderableType, options: ConsoleOptions | None = None) -> Iterable[Segment]:
        if isinstance(renderable, Text):
            renderable = _safe_text(renderable)
        for seg in super().render(renderable, options):
            if seg.control:
                yield seg
                continue
            style = seg.style
            if style is not None and style.link:  # gpuledger prints no hyperlinks: any is injected markup
                style = style.clear_meta_and_links()
            text = neutralise(seg.text)
            yield seg if text is seg.text and style is seg.style else Segment(text, style)

    def on_broken_pipe(self) -> None:
        # rich's default exits 1 (doctor's "warnings"); gpuledger's entry point turns this into its
        # documented output-error exit, silently for a closed pipe.
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")


def _safe_text(text: Text) -> Text:
    plain = text.plain
    safe = neutralise(plain)
    if safe is plain and len(plain) <= MAX_DISPLAY_CHARS:
        return text
    out = text.copy()
    if safe is not plain:
        out.plain = safe  # one character for one character: the spans stay where they were
    if len(out) > MAX_DISPLAY_CHARS:
        more = len(out) - MAX_DISPLAY_CHARS
        out = out[:MAX_DISPLAY_CHARS]
        out.append(clip_suffix(more), style="dim")
    return out


def make_console(*, stderr: bool = False) -> Console:
    """The one way the CLI makes a Console (stdout, or stderr for progress, warnings and errors)."""
    return SafeConsole(stderr=stderr, highlight=False, soft_wrap=True)


# Tables and human text go to stdout; progress, warnings and errors go to stderr so that
# ``--json`` output on stdout is never mixed with anything else.
console = make_console()
err_console = make_console(stderr=True)

DbOpt = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="Results store URL (sqlite:///path or postgresql+psycopg://...). "
        "Default: $GPULEDGER_DB, else a SQLite file in the user data dir.",
        envvar="GPULEDGER_DB",
        show_envvar=True,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout, nothing else.")]


def _default(obj: Any) -> Any:
    to_dict = getattr(obj, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    if isinstance(obj, set | frozenset):
        return sorted(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


# JSON escapes C0 controls itself; DEL, C1 controls, bidi controls and line separators are legal raw in a
# JSON string but act on some terminals and viewers, so they are written as \uXXXX escapes too: the
# same document once parsed (they can only occur inside strings), inert when printed.
_JSON_INERT = re.compile("[\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def dumps_json(obj: Any) -> str:
    """Indented JSON text (dataclasses, datetimes, numpy scalars and ``to_dict()`` objects handled),
    complete and exact, with no raw control character in it."""
    opts = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_UTC_Z
    text = orjson.dumps(obj, default=_default, option=opts).decode()
    if _JSON_INERT.search(text) is None:
        return text
    return _JSON_INERT.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def print_json(obj: Any) -> None:
    """Write ``obj`` as JSON to stdout (and only that)."""
    sys.stdout.write(dumps_json(obj) + "\n")
    sys.stdout.flush()


def warn(message: str) -> None:
    """One ``warning:`` line on stderr; ``message`` is text, not markup (it often quotes a value)."""
    err_console.print(f"[yellow]warning:[/yellow] {escape(message)}")


def environment_fingerprint() -> dict[str, Any]:
    """This machine's stack (``gpuledger.lock.fingerprint()``), or ``{"error": why}`` when it cannot be
    taken: stored with every run (``RunInfo.environment``)."""
    from gpuledger.errors import GpuledgerError
    from gpuledger.lock import fingerprint

    try:
        return dict(fingerprint())
    except (GpuledgerError, OSError) as exc:
        return {"error": f"environment fingerprint failed: {exc}"}
