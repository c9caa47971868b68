"""The commands the README and docs/ show are commands gpuledger has: every `gpuledger CMD --flag` in a
code block or code span names a real command and real flags of it, and every `--profile NAME` a real
preset."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer.main

from gpuledger.cli.main import app
from gpuledger.cost.pricing.presets import builtin_presets

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "benchmarks" / "README.md"]
FENCE = re.compile(r"^```")
COMMAND = re.compile(r"(?:^|[\s;&(`$])(?:\S*/)?gpuledger\s+([a-z][a-z-]*)(.*)$")
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
INLINE = re.compile(r"`gpuledger ([a-z][a-z-]*)([^`]*)`")
PROFILE = re.compile(r"--profile[ =](?:[A-Za-z0-9_.-]+=)?([A-Za-z0-9_./-]+)")


@dataclass(frozen=True)
class Shown:
    where: str
    command: str
    rest: str


def shown_commands() -> list[Shown]:
    out: list[Shown] = []
    for doc in DOCS:
        in_block = False
        lines = doc.read_text(encoding="utf-8").splitlines()
        i = 0
        while i < len(lines):
            line = lines[i]
            if FENCE.match(line.strip()):
                in_block = not in_block
                i += 1
                continue
            start = i
            while in_block and line.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                line = line.rstrip()[:-1] + " " + lines[i]
            i += 1
            if not in_block:
                for span in INLINE.findall(line.replace("\\|", "|")):
                    out.append(Shown(f"{doc.relative_to(REPO)}:{start + 1}", span[0], span[1]))
                continue
            code = line.split(" # ", 1)[0].split("  #", 1)[0]
            for part in re.split(r"&&|;|\|\|", code):
                m = COMMAND.search(part)
                if m and not part.lstrip().startswith(("pip", "python")):
                    out.append(Shown(f"{doc.relative_to(REPO)}:{start + 1}", m.group(1), m.group(2)))
    return out


SHOWN = shown_commands()
ROOT: Any = typer.main.get_command(app)  # typer's own (vendored) click Group


def test_the_docs_show_commands_at_all() -> None:
    assert len(SHOWN) > 30
    main_path = {"run", "doctor", "lock", "bench", "cost", "compare", "report", "monitor"}
    assert {s.command for s in SHOWN} >= main_path


@pytest.mark.parametrize("shown", SHOWN, ids=lambda s: f"{s.where} {s.command}")
def test_every_command_and_flag_shown_in_the_docs_exists(shown: Shown) -> None:
    cmd = ROOT.commands.get(shown.command)
    assert cmd is not None, f"{shown.where}: `gpuledger {shown.command}` is not a command"
    sub = shown.rest.split()[0] if shown.rest.split() else ""
    if hasattr(cmd, "commands") and sub in cmd.commands:  # a group: `gpuledger telemetry import ...`
        cmd = cmd.commands[sub]
    known = {"--help"}
    for param in cmd.params:
        known.update(o for o in (*param.opts, *param.secondary_opts) if o.startswith("--"))
    for flag in FLAG.findall(shown.rest):
        assert flag in known, f"{shown.where}: `gpuledger {shown.command}` has no {flag}"


def test_every_profile_named_in_the_docs_is_a_preset_or_a_file() -> None:
    presets = set(builtin_presets())
    for shown in SHOWN:
        for name in PROFILE.findall(shown.rest):
            if "/" in name or name.endswith((".yaml", ".yml")) or name.isupper() or name in ("P", "PROFILE"):
                continue
            assert name in presets, f"{shown.where}: --profile {name} is not a preset"


# The machine the docs' examples describe: their CPU runs (dummy models in-process, the tiny pipelines) are
# the development machine's and CI's, x86_64 (README, "Measured on the development machine"). A line that
# is about another architecture says so (`arm64`, `aarch64`, Graviton) in its text or comment.
DOC_MACHINE_ARCH = "x86_64"
OTHER_ARCH = re.compile(r"\b(arm64|aarch64|graviton)\b", re.IGNORECASE)


def _raw_line(where: str) -> str:
    """The doc's text of a shown command, its continuation lines and comments included."""
    name, _, number = where.rpartition(":")
    lines = (REPO / name).read_text(encoding="utf-8").splitlines()
    i = int(number) - 1
    text = lines[i]
    while text.rstrip().endswith("\\") and i + 1 < len(lines):
        i += 1
        text = text.rstrip()[:-1] + " " + lines[i]
    return text


def test_a_cpu_price_named_in_the_docs_is_the_architecture_the_doc_describes() -> None:
    """``cost RUN --profile cpu-cloud`` (an arm64 price) on the docs' x86_64 runs printed the architecture
    warning in the very example that showed the price (issue #33, item 11)."""
    presets = builtin_presets()
    mismatched = []
    for shown in SHOWN:
        for name in PROFILE.findall(shown.rest):
            arch = presets[name].cpu_arch if name in presets else None
            if arch is None:
                continue
            described = "arm64" if OTHER_ARCH.search(_raw_line(shown.where)) else DOC_MACHINE_ARCH
            if arch != described:
                mismatched.append(f"{shown.where}: --profile {name} prices {arch}, the example runs on "
                                  f"{described}")
    assert mismatched == []
    assert any(p.cpu_arch == DOC_MACHINE_ARCH for p in presets.values())  # there is a preset to name
