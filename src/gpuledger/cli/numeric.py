"""Every number a command line gives is finite and storable, whatever option takes it.

typer turns ``--slo-attainment inf`` into ``float("inf")`` and ``--seed 100000000000000000000000`` into an
integer no store column or JSON document can hold. ``bound_numbers(command)`` wraps the value processing
of every option and argument of every command: a float that is not finite (``inf``, ``nan``) or an integer
beyond 64 bits is a usage error (exit 2, one line naming the option and the bound) before the command
runs. The commands' own bounds (``bench.bounds`` for bench's flags, typer's ``min``/``max``, a
:class:`Range` a command checks, such as ``CLOCK_OFFSET_S``) come after it.
Every command passes through it, so it also names each argument without a metavar as the docs write it
(``RUN_ID``), in the help and in usage errors alike.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import typer

from gpuledger.errors import UsageError

MAX_INT = 2**63 - 1
_WRAPPED = "_gpuledger_numbers_bounded"


def problem(value: Any) -> str | None:
    """Why ``value`` (an option's converted value, or one of its items) is not a usable number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value} is not a finite number"
    if isinstance(value, int) and not -MAX_INT <= value <= MAX_INT:
        return f"{value} is beyond a 64-bit integer (at most {MAX_INT:,} either way)"
    return None


@dataclass(frozen=True, slots=True)
class Range:
    """A finite range an option's number must be in (``low`` … ``high``, in ``unit``), and why."""

    low: float
    high: float
    unit: str
    why: str

    def check(self, option: str, value: float) -> float:
        """``value``, or a ``UsageError`` (exit 2) naming ``option``, the range and why."""
        if not (math.isfinite(value) and self.low <= value <= self.high):
            raise UsageError(f"{option} must be {_shown(self.low)} … {_shown(self.high)} {self.unit} "
                             f"({self.why}), got {value:g}")
        return value


def _shown(bound: float) -> str:
    return f"{bound:,.0f}" if float(bound).is_integer() and abs(bound) < 1e15 else f"{bound:g}"


# telemetry import --clock-offset: how far a node's clock may be from the run's (a year either way).
CLOCK_OFFSET_S = Range(-366 * 86_400, 366 * 86_400, "s",
                       "366 days either way: a log from another year is not an offset")


def _items(value: Any) -> Iterable[Any]:
    return value if isinstance(value, list | tuple) else (value,)


def _checked(param: Any, process: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def process_value(ctx: Any, value: Any) -> Any:
        out = process(ctx, value)
        for item in _items(out):
            why = problem(item)
            if why is not None:
                raise typer.BadParameter(why, ctx=ctx, param=param)
        return out

    return process_value


def bound_numbers(command: Any) -> Any:
    """``command`` (the click command typer built), every parameter of it and of its subcommands checked
    as the module docstring says; returns ``command``. The commands of a ``cli.lazy.LazyGroup`` are checked
    by the group when each is loaded."""
    for param in getattr(command, "params", ()):
        if getattr(param, "param_type_name", "") == "argument" and param.metavar is None:
            # An argument is named as the docs and the usage line write it, in errors too: RUN_ID, not
            # run_id ("Missing argument 'RUN_ID'."; typer's own name for it is the parameter's).
            param.metavar = param.name.upper()
        if not getattr(param, _WRAPPED, False):
            param.process_value = _checked(param, param.process_value)
            setattr(param, _WRAPPED, True)
    subcommands = getattr(command, "commands", None)
    if isinstance(subcommands, dict):  # a lazy group bounds each command as it loads it (cli/lazy.py)
        for sub in subcommands.values():
            bound_numbers(sub)
    return command
