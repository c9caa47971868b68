"""Every workload kind is one registration (docs/contracts.md, "Workload kinds"): each registered kind
provides the facets the contract requires, each exporting what the contract says — its specs and summaries
under their ``KIND``s, its unit among its summaries' units, its validity ``RULES``, its ``REPORT`` — and the
code outside ``src/gpuledger/kinds/`` does not test a value against a kind's classes with ``isinstance``
(an AST check; the exceptions below are what is left to move into the kinds, each with its reason, and an
exception that is no longer needed must be removed from the list)."""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

from gpuledger.bench.validity import Rule, rule_name
from gpuledger.records.kinds import FACETS, WorkloadKind, kind_of_spec, kind_of_summary, kinds
from gpuledger.records.spec import spec_kinds
from gpuledger.records.summary import RunSummary, summary_kinds
from gpuledger.report.kinds import KindReport

SRC = Path(__file__).resolve().parents[1] / "src" / "gpuledger"
REQUIRED = ("spec", "summary", "checks", "options", "report", "run")
SHARED_RULES = ("client_bound", "cpu_contention", "energy", "errors", "finished")

# (where, class of a kind) -> why that code still tests a value against it; ``where`` is a package under
# src/gpuledger (its modules move as they are split), or a module of report/, which holds none but these.
TEXT_LOAD = "bench drives text generation's request load itself (server specs, datasets, prompts, --like)"
PUBLISHED = "a published point is text inference priced from its published rates (cost's repricing of it)"
DECODE = "MBU/MFU and the roofline estimate model an inference decode (cost/pricing/efficiency, estimate)"
ENGINE = "an engine is of one kind and reads its own kind's spec (engines/registry builds each from its spec)"
CLI_TASK = "the command line renders a bench or run result per task (the thin-CLI work of issue 27)"
ALLOWED: dict[tuple[str, str], str] = {
    ("bench", "ServerSpec"): TEXT_LOAD,
    ("bench", "TorchSpec"): TEXT_LOAD,
    ("cli", "ServerSpec"): CLI_TASK,
    ("cli", "ImageSummary"): CLI_TASK,
    ("cli", "TrainSpec"): CLI_TASK,
    ("cli", "TrainingSummary"): CLI_TASK,
    ("cli", "TaskRunResult"): CLI_TASK,
    ("cli", "TextRunResult"): CLI_TASK,
    ("cli", "PublishedSummary"): PUBLISHED,
    ("cost", "PublishedSummary"): PUBLISHED,
    ("cost", "TextGenerationSummary"): DECODE,
    ("cost", "ServerSpec"): DECODE,
    ("cost", "TorchSpec"): DECODE,
    ("engines", "ImageSpec"): ENGINE,
    ("engines", "ServerSpec"): ENGINE,
    ("engines", "TorchSpec"): ENGINE,
    ("engines", "TrainSpec"): ENGINE,
    ("report/matrix.py", "TextGenerationSummary"): "a benchmark matrix compares text-generation cells",
}


def _where(rel: str) -> str:
    return rel if rel.startswith("report/") else rel.split("/")[0]


def _facet(kind: WorkloadKind, name: str) -> ModuleType:
    module = kind.facet(name)
    assert module is not None, f"{kind.name} has no {name} facet"
    return module


def _kind_ids() -> list[str]:
    return [k.name for k in kinds()]


@pytest.fixture(params=_kind_ids())
def kind(request: pytest.FixtureRequest) -> WorkloadKind:
    return next(k for k in kinds() if k.name == request.param)


def test_the_contract_requires_these_facets_and_lists_every_one() -> None:
    contract = (SRC.parents[1] / "docs" / "contracts.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(\w+)` \| (\w+) \| (yes|no) \|", contract, re.M)
    assert [name for name, _, _ in rows] == list(FACETS)
    assert tuple(name for name, _, required in rows if required == "yes") == REQUIRED


def test_the_three_workloads_are_registered_in_their_order() -> None:
    assert [k.name for k in kinds()] == ["text", "image", "train"]


def test_every_kind_provides_the_required_facets(kind: WorkloadKind) -> None:
    assert [f for f in REQUIRED if not kind.has(f)] == []
    for facet in REQUIRED:
        module = kind.facet(facet)
        assert module is not None and module.__name__.startswith(f"{kind.package}.{facet}")


def test_a_kinds_specs_and_summaries_are_its_own_under_their_kinds(kind: WorkloadKind) -> None:
    specs, summaries = spec_kinds(), summary_kinds()
    for name in kind.spec_kinds:
        assert specs[name].__module__.startswith(kind.package) and kind_of_spec(name) is kind
    for name in kind.summary_kinds:
        assert summaries[name].__module__.startswith(kind.package) and kind_of_summary(name) is kind


def test_a_kinds_unit_is_one_its_runs_count(kind: WorkloadKind) -> None:
    main: type[RunSummary] = summary_kinds()[kind.summary_kinds[0]]
    assert kind.unit in main.RATE_KEYS


def test_a_kinds_checks_are_named_rules_with_the_shared_ones(kind: WorkloadKind) -> None:
    module = _facet(kind, "checks")
    rules: tuple[Rule, ...] = module.RULES
    assert isinstance(rules, tuple) and all(callable(r) for r in rules)
    names = [rule_name(r) for r in rules]
    assert len(set(names)) == len(names)
    assert set(SHARED_RULES) <= set(names)


def test_a_kinds_report_part_is_its_REPORT(kind: WorkloadKind) -> None:
    report = _facet(kind, "report").REPORT
    assert isinstance(report, KindReport) and report.name == kind.name
    assert report.sections and all(callable(s) for s in report.sections)


def test_a_kinds_items_word_is_the_one_its_report_speaks(kind: WorkloadKind) -> None:
    """``runs`` and ``show`` read the registry's word without loading the report facet: the same word."""
    assert kind.items == _facet(kind, "report").REPORT.items != "items"


def test_a_kinds_pricing_when_it_has_one_gives_its_cost_extras(kind: WorkloadKind) -> None:
    if not kind.has("pricing"):
        pytest.skip(f"{kind.name} is priced by its units alone")
    assert callable(_facet(kind, "pricing").cost_extras)


def _isinstance_uses() -> Counter[tuple[str, str]]:
    """(where, class) for every ``isinstance(x, C)`` / ``issubclass`` outside ``kinds/`` whose ``C`` is
    imported from a kind's package."""
    found: Counter[tuple[str, str]] = Counter()
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith("kinds/"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gpuledger.kinds."):
                names.update({a.asname or a.name: a.name for a in node.names})
            elif isinstance(node, ast.Import):
                kind_modules = [a for a in node.names if a.name.startswith("gpuledger.kinds.")]
                names.update({a.asname or a.name: a.name for a in kind_modules})
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("isinstance", "issubclass") and len(node.args) == 2):
                continue
            arg = node.args[1]
            for e in arg.elts if isinstance(arg, ast.Tuple) else [arg]:
                base: ast.expr = e
                while isinstance(base, ast.Attribute):
                    base = base.value
                if isinstance(base, ast.Name) and base.id in names:
                    cls = e.attr if isinstance(e, ast.Attribute) else names[base.id]
                    found[(_where(rel), cls)] += 1
    return found


def test_no_module_outside_the_kinds_tests_a_kinds_classes_but_the_listed_exceptions() -> None:
    found = _isinstance_uses()
    new = sorted(k for k in found if k not in ALLOWED)
    assert new == [], "isinstance against a kind's class outside kinds/: ask the registry (records.kinds)"
    gone = sorted(k for k in ALLOWED if k not in found)
    assert gone == [], "exceptions no longer needed: remove them from ALLOWED"
