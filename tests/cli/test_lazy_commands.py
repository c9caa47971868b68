"""Commands are loaded when used: ``--version`` and ``--help`` import no command, and a command's own
``--help`` imports nothing of the bench stack, the store, the engines, cost, report, aiohttp, SQLAlchemy or
torch: its options are declared from light modules (``bench --help``: the kinds' descriptors,
``records.kinds``, for ``--task`` and ``--engine``; the bench, the engines and the options models are imported
when the command runs).

What is measured here is what the code controls — which modules a process imported — not how long it took
(the start-up time against a bare ``import typer, rich.console`` is benchmarks/startup_time.py's)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import typer

from gpuledger.cli.app import COMMANDS, app

HEAVY = ("gpuledger.bench", "gpuledger.store", "gpuledger.engines", "gpuledger.cost", "gpuledger.report",
         "gpuledger.doctor", "gpuledger.gate", "gpuledger.monitor", "gpuledger.telemetry",
         "gpuledger.workload", "aiohttp", "sqlalchemy", "torch", "transformers")

PROBE = """
import json, sys
from gpuledger.cli.main import main
code = main(sys.argv[1:])
sys.stdout.flush()
sys.stderr.write(json.dumps({"code": code, "modules": sorted(sys.modules)}) + "\\n")
"""


def imported(*args: str) -> tuple[int, set[str]]:
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120)
    doc = json.loads(proc.stderr.strip().splitlines()[-1])
    return doc["code"], set(doc["modules"])


def heavy_in(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


@pytest.mark.parametrize("args", [["--version"], ["--help"]])
def test_version_and_help_import_no_command(args: list[str]) -> None:
    code, modules = imported(*args)
    assert code == 0
    assert heavy_in(modules) == []
    assert not any(m.startswith("gpuledger.cli.") and m.endswith(("_cmd", "_cmds")) for m in modules)


# What a command's own --help may import beyond the light modules, and why (every other command: nothing).
ALLOWED: dict[str, tuple[str, ...]] = {
    # `sample` declares its options from the telemetry package (cli/sample_cmd.py imports it at module level).
    "sample": ("gpuledger.telemetry", "gpuledger.catalog", "gpuledger.facts", "aiohttp"),
}
SUBCOMMANDS = (["matrix", "show"], ["telemetry", "import"])


@pytest.mark.parametrize("args", [[e.name] for e in COMMANDS] + [list(s) for s in SUBCOMMANDS],
                         ids=lambda a: " ".join(a))
def test_each_commands_own_help_imports_nothing_heavy(args: list[str]) -> None:
    code, modules = imported(*args, "--help")
    assert code == 0
    allowed = ALLOWED.get(args[0], ())
    heavy = [m for m in heavy_in(modules) if not any(m == a or m.startswith(a + ".") for a in allowed)]
    assert heavy == [], f"{' '.join(args)} --help imports {heavy}"


def test_bench_help_is_written_from_the_kinds_descriptors_alone() -> None:
    """`bench --help` names every engine and task without importing the engines, the bench or an options
    model: the descriptors (kinds/<kind>/__init__.py) are all it reads."""
    code, modules = imported("bench", "--help")
    assert code == 0
    assert {"gpuledger.kinds.text", "gpuledger.kinds.image", "gpuledger.kinds.train"} <= modules
    facets = sorted(m for m in modules if m.startswith("gpuledger.kinds.") and m.count(".") >= 3)
    assert facets == [], facets


def test_the_help_lists_every_command_with_its_own_first_line() -> None:
    group = typer.main.get_command(app)
    for entry in COMMANDS:
        command = group.commands[entry.name]  # type: ignore[attr-defined]
        assert command.get_short_help_str(limit=1000) == entry.help, entry.name


def test_a_command_missing_from_the_table_is_no_command() -> None:
    group = typer.main.get_command(app)
    assert "no-such-command" not in group.commands  # type: ignore[attr-defined]
    assert list(group.commands) == [e.name for e in COMMANDS]  # type: ignore[attr-defined]
