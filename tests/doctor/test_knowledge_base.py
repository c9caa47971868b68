"""The knowledge base is complete: every finding a check can emit has a rule, every row of the seed
essay's §6 table is a rule, and docs/doctor.md lists every rule."""

from __future__ import annotations

import re
from pathlib import Path

from gpuledger.doctor.knowledge import fill, knowledge_base

SRC = Path(__file__).resolve().parents[2] / "src" / "gpuledger"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "doctor.md"


def emitted_ids() -> set[str]:
    """Finding ids named in the doctor's check modules (checks.py and the per-layer modules it runs)."""
    text = "\n".join(p.read_text() for p in sorted((SRC / "doctor").glob("*.py")))
    found = set(re.findall(r'make\(\s*"([a-z0-9_.]+)"', text))
    found |= set(
        re.findall(
            r'"((?:nvidia|amd|torch|container|wsl|windows|ollama|gpu|cpu|layer|facts|kernel|hardware)'
            r'\.[a-z0-9_]+)"',
            text,
        )
    )
    return found


def test_every_emitted_finding_has_a_rule() -> None:
    kb = knowledge_base()
    missing = sorted(i for i in emitted_ids() if not kb.has(i))
    assert not missing


def test_every_seed_table_row_is_a_rule() -> None:
    rows = {row for rule in knowledge_base().rules for row in rule.seed_rows}
    assert rows == set(range(1, 9))


def test_windows_only_rows_are_guidance() -> None:
    kb = knowledge_base()
    assert kb.rule("windows.nvidia_installer_0xe6000000").kind == "guidance"
    assert kb.rule("windows.nvidia_app_0x80070002").kind == "guidance"


def test_docs_list_every_rule() -> None:
    text = DOCS.read_text()
    missing = [r.id for r in knowledge_base().rules if f"`{r.id}`" not in text]
    assert not missing


def test_every_rule_with_a_problem_severity_has_a_fix() -> None:
    for rule in knowledge_base().rules:
        if rule.severity in ("warning", "error"):
            assert rule.fix, rule.id


def test_fill_leaves_unknown_placeholders_readable() -> None:
    assert (
        fill("nvidia-driver-{driver_major} {unknown}", {"driver_major": "550"})
        == "nvidia-driver-550 {unknown}"
    )
