"""Every user file gpuledger parses as YAML or JSON is parsed within bounds (``gpuledger.boundeddoc``):
nesting deeper than ``MAX_DEPTH`` levels, or YAML aliases that stand for more than ``MAX_ALIAS_NODES``
nodes, is one line and exit 4 — never a ``RecursionError`` (exit 70) or a document that grows without end
when it is validated, dumped or stored.

Each reader is driven through the command a user runs, with the file as an attacker writes it: a matrix
plan, ``--profile FILE``, the GPU catalog's overrides (``$GPULEDGER_CATALOG``), ``--model-config`` (bench and
estimate), ``--workflow``, a file of published points, a lock file.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpuledger.boundeddoc import MAX_ALIAS_NODES, MAX_DEPTH, NotADocument, TooNested, load_json, load_yaml
from gpuledger.cli.main import main

DEEP = 10_000
LAUGHS = "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 9) if prev else ', '.join(['lol'] * 9)}]\n"
    for prev, name in zip(["", "a", "b", "c", "d", "e", "f", "g"], "abcdefgh", strict=True)
)  # h stands for 9^8 = 43 million strings


def deep_yaml_plan() -> str:
    return ("bench: {label: " + "[" * DEEP + "]" * DEEP + "}\n"
            "matrix: {target: [{base_url: 'http://127.0.0.1:9', model: m}]}\n")


def one_line_exit_4(capsys: pytest.CaptureFixture[str], args: list[str], *needles: str) -> str:
    code = main(args)
    out = capsys.readouterr()
    assert code == 4, out.err
    lines = out.err.strip().splitlines()
    assert lines[0].startswith("error: ") and "Traceback" not in out.err and len(lines) <= 2
    for needle in needles:
        assert needle in lines[0]
    return lines[0]


# ---- the parser ---------------------------------------------------------------------------------------


def test_a_yaml_document_nested_past_the_bound_is_refused_before_it_is_built() -> None:
    ok = "a:" + "".join(f"\n{'  ' * i}b{i}:" for i in range(1, MAX_DEPTH)) + " 1\n"
    assert load_yaml(ok, "doc") is not None  # MAX_DEPTH levels of mappings
    too = "a:" + "".join(f"\n{'  ' * i}b{i}:" for i in range(1, MAX_DEPTH + 1)) + " 1\n"
    with pytest.raises(TooNested, match=rf"doc: nested too deeply \(more than {MAX_DEPTH} levels, line 65\)"):
        load_yaml(too, "doc")
    for flow in ("[" * DEEP + "]" * DEEP, "[" * DEEP):  # closed or not: libyaml's own limit is 1,000
        with pytest.raises(TooNested, match="nested too deeply"):
            load_yaml(flow, "doc")


def test_yaml_aliases_count_as_the_nodes_they_stand_for() -> None:
    with pytest.raises(TooNested, match=f"stand for more than {MAX_ALIAS_NODES:,} nodes"):
        load_yaml(LAUGHS, "plan p.yaml")
    deep_anchor = "x: &x " + "[" * 40 + "1" + "]" * 40 + "\ny: " + "[" * 30 + "*x" + "]" * 30 + "\n"
    with pytest.raises(TooNested, match=r"through the alias \*x"):
        load_yaml(deep_anchor, "doc")
    merged = load_yaml("base: &b {x: 1, y: 2}\nc: {<<: *b, z: 3}\nd: [*b, *b]\n", "doc")
    assert merged["c"] == {"x": 1, "y": 2, "z": 3} and merged["d"] == [{"x": 1, "y": 2}] * 2


@pytest.mark.parametrize(("text", "said"), [
    ("a: [1,\n", "not valid YAML (line 2)"),
    ("a: " + "9" * 5000 + "\n", "a value cannot be read (Exceeds the limit (4300 digits)"),  # int()
    ("a: 2025-13-45\n", "a value cannot be read (month must be in 1..12)"),
    ("a: *nowhere\n", "not valid YAML (line 1)"),
])
def test_a_yaml_text_that_cannot_be_read_is_one_line(text: str, said: str) -> None:
    with pytest.raises(NotADocument) as exc:
        load_yaml(text, "doc")
    assert exc.value.message.startswith(f"doc: {said}") and "\n" not in exc.value.message


def test_a_json_document_nested_past_the_bound_is_refused_and_brackets_in_strings_do_not_count() -> None:
    with pytest.raises(TooNested, match=rf"w: nested too deeply \(10,000 levels; at most {MAX_DEPTH}\)"):
        load_json("[" * DEEP + "]" * DEEP, "w")
    quoted = '{"text": "' + "[{" * DEEP + '\\"]"}'
    assert load_json(quoted, "w") == {"text": "[{" * DEEP + '"]'}
    assert load_json("[" * MAX_DEPTH + "]" * MAX_DEPTH, "w") is not None
    with pytest.raises(NotADocument, match=r"^w is not JSON \(Expecting value at line 1\)$"):
        load_json("[1,", "w")
    with pytest.raises(NotADocument, match="4300 digits"):
        load_json("1" * 5000, "w")


# ---- every reader of a user's file ------------------------------------------------------------------------


def test_a_10000_deep_matrix_plan_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(deep_yaml_plan())
    one_line_exit_4(capsys, ["matrix", str(plan), "--dry-run"], f"matrix plan {plan}: nested too deeply")
    plan.write_text(LAUGHS + "matrix: {target: [{base_url: 'http://127.0.0.1:9', model: m}]}\n")
    one_line_exit_4(capsys, ["matrix", str(plan), "--dry-run"], "aliases (*name) stand for more than")


def test_a_10000_deep_profile_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text("name: mine\ngpu_price: " + "[" * DEEP + "]" * DEEP + "\n")
    estimate = ["estimate", "--gpu", "h100-sxm", "--model", "dummy:tiny", "--profile", str(profile)]
    one_line_exit_4(capsys, estimate, f"cost profile {profile}: nested too deeply")
    profile.write_text(LAUGHS + "name: mine\n")
    one_line_exit_4(capsys, estimate, "stand for more than")


def test_a_deep_gpu_catalog_override_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog = tmp_path / "gpus.yaml"
    catalog.write_text("gpus: " + "[" * DEEP + "]" * DEEP + "\n")
    monkeypatch.setenv("GPULEDGER_CATALOG", str(catalog))
    one_line_exit_4(capsys, ["gpus"], f"GPU catalog file {catalog}: nested too deeply")


JsonReader = Callable[[Path], list[str]]
JSON_READERS: dict[str, JsonReader] = {
    "bench --model-config": lambda f: ["bench", "--base-url", "http://127.0.0.1:9", "--model-config", str(f)],
    "estimate --model-config": lambda f: ["estimate", "--gpu", "h100-sxm", "--model-config", str(f)],
    "bench --workflow": lambda f: ["bench", "--task", "image", "--engine", "comfyui", "--workflow", str(f),
                                   "--base-url", "http://127.0.0.1:9"],
    "import-results": lambda f: ["import-results", str(f)],
    "lock --check": lambda f: ["lock", "--check", str(f)],
}


@pytest.mark.parametrize("reader", list(JSON_READERS))
def test_a_10000_deep_json_file_is_one_line_for_every_reader(
    reader: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = tmp_path / "deep.json"
    doc.write_text('{"a": ' + "[" * DEEP + "]" * DEEP + "}")
    one_line_exit_4(capsys, JSON_READERS[reader](doc), "nested too deeply (10,001 levels; at most 64)")


def test_a_file_of_published_points_in_yaml_with_aliases_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    points = tmp_path / "points.yaml"
    points.write_text(LAUGHS)
    one_line_exit_4(capsys, ["import-results", str(points)], f"{points}: its aliases")
