"""Commands loaded when they are used: ``gpuledger --version`` and ``gpuledger --help`` import no command.

Each command lives in its own module (``gpuledger.cli.bench_cmd``, ...), whose ``register(app)`` adds it to a
typer application. ``LazyGroup`` knows every command by a ``CommandEntry`` — its name, the module that
defines it and its one-line help — and imports a module only when one of its commands is run or asked for
its own ``--help``. The top-level help lists the commands from their entries alone (the entries' help is held
equal to each command's own first line by tests/cli/test_lazy_commands.py).

Every command loaded is passed through ``cli.numeric.bound_numbers`` (no option takes ``inf`` or a 100-bit
integer), so the bound holds for a command however it was reached.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import typer
from typer.core import TyperGroup

from gpuledger.cli.numeric import bound_numbers


@dataclass(frozen=True, slots=True)
class CommandEntry:
    """A command of ``gpuledger``: its name, the module whose ``register(app)`` defines it, its one-line
    help."""

    name: str
    module: str
    help: str


def _load(entry: CommandEntry) -> Any:
    """The click command typer builds for ``entry`` from its module (numbers bounded)."""
    module = importlib.import_module(entry.module)
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode="rich")
    module.register(app)
    group = typer.main.get_group(app)
    command = group.commands.get(entry.name)
    if command is None:  # pragma: no cover - a table entry naming a module that does not define it
        raise LookupError(f"{entry.module} does not define the command {entry.name!r}")
    return bound_numbers(command)


class LazyCommands(Mapping[str, Any]):
    """The group's commands by name, each loaded on first access (``group.commands["bench"]`` works as on a
    plain click group); iterating lists the names without loading anything."""

    def __init__(self, entries: tuple[CommandEntry, ...]) -> None:
        self._entries = {e.name: e for e in entries}
        self._loaded: dict[str, Any] = {}

    def entry(self, name: str) -> CommandEntry | None:
        return self._entries.get(name)

    def __getitem__(self, name: str) -> Any:
        if name not in self._loaded:
            entry = self._entries.get(name)
            if entry is None:
                raise KeyError(name)
            self._loaded[name] = _load(entry)
        return self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


class LazyGroup(TyperGroup):
    """typer's group with commands from ``ENTRIES`` (set by a subclass), loaded as the module docstring
    says."""

    ENTRIES: tuple[CommandEntry, ...] = ()

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = LazyCommands(self.ENTRIES)  # type: ignore[assignment]
        self._listing = False

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        commands: LazyCommands = self.commands  # type: ignore[assignment]
        entry = commands.entry(cmd_name)
        if entry is None:
            return None
        if self._listing:  # the group's own --help: the entry's line, no import
            return typer.core.TyperCommand(name=entry.name, help=entry.help, short_help=entry.help)
        return commands[cmd_name]

    def list_commands(self, ctx: Any) -> list[str]:
        return list(self.commands)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False
