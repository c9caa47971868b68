"""Parsing a structured document a user hands over (YAML, JSON), never deeper or larger than a bound.

:mod:`gpuledger.boundedio` bounds the bytes of a file; this module bounds what its parse may build. PyYAML's
composer and the JSON decoder recurse once per level of nesting, so a plan of 10,000 nested ``[`` ended in
a ``RecursionError`` (exit 70); a YAML alias (``*a``) stands for its whole anchored node, so nine lines of
aliases to aliases (the "billion laughs") stand for 10⁹ nodes that validating, dumping or storing the
document would build. Every user file gpuledger parses goes through :func:`load_yaml`, :func:`yaml_mapping`
or :func:`load_json`: a matrix plan, a cost profile (``--profile FILE``), the GPU catalog's overrides, a
presets or criteria file, ``--model-config``, ``--workflow``, a file of published points, a lock file.

- nesting deeper than ``MAX_DEPTH`` levels (a mapping or a list inside another; aliases counted as the
  nodes they stand for) is :class:`TooNested` (``InvalidInputError``, exit 4), found before any of the
  document is built: a YAML document is read as a stream of events first, a JSON text's brackets are
  counted outside its strings;
- YAML aliases that stand for more than ``MAX_ALIAS_NODES`` nodes in all are :class:`TooNested` too;
- a text that does not parse, or holds a value Python cannot hold (an integer of more than 4,300 digits,
  a date that is not one), is :class:`NotADocument` (``InvalidInputError``, exit 4) naming the line.

Every error is one line naming the document (``what``) and the bound; the parsed value is what
``yaml.safe_load`` / ``json.loads`` return for a document within the bounds.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

import yaml

from gpuledger.errors import InvalidInputError

# Levels of nesting a user's document may have; gpuledger's own formats use fewer than 10.
MAX_DEPTH = 64
# Nodes that a YAML document's aliases may stand for, in all (each alias counts its anchor's whole node).
MAX_ALIAS_NODES = 100_000

_EVENT_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser when present
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


class NotADocument(InvalidInputError):
    """A text that is not valid YAML / JSON, or holds a value that cannot be read (exit 4)."""


class TooNested(InvalidInputError):
    """A document nested deeper than ``MAX_DEPTH``, or whose aliases expand beyond ``MAX_ALIAS_NODES``."""


def _line(event: Any, before: str = "") -> str:
    """`` (line N)`` where ``event`` (or a YAML error) is, after ``before`` when given."""
    mark = getattr(event, "start_mark", None) or getattr(event, "problem_mark", None)
    at = f"line {mark.line + 1}" if mark is not None else ""
    inside = ", ".join(p for p in (before, at) if p)
    return f" ({inside})" if inside else ""


def _check_yaml(text: str, what: str, loader: Any = _EVENT_LOADER) -> None:
    """The nesting and the alias expansion of ``text``'s YAML, from its events (nothing is built)."""
    # Each open collection: [nodes inside it, the height of its deepest child], and its anchor.
    stack: list[list[int]] = []
    open_anchors: list[str | None] = []
    anchors: dict[str, tuple[int, int]] = {}  # anchor -> (nodes, height) of the node it names
    expanded = 0

    def done(anchor: str | None, nodes: int, height: int) -> None:
        if anchor is not None:
            anchors[anchor] = (nodes, height)
        if stack:
            stack[-1][0] += nodes
            stack[-1][1] = max(stack[-1][1], height)

    for event in yaml.parse(text, Loader=loader):
        if isinstance(event, yaml.CollectionStartEvent):
            if len(stack) >= MAX_DEPTH:
                raise TooNested(f"{what}: nested too deeply{_line(event, f'more than {MAX_DEPTH} levels')}")
            stack.append([0, 0])
            open_anchors.append(event.anchor)
        elif isinstance(event, yaml.CollectionEndEvent):
            nodes, height = stack.pop()
            done(open_anchors.pop(), nodes + 1, height + 1)
        elif isinstance(event, yaml.ScalarEvent):
            done(event.anchor, 1, 0)
        elif isinstance(event, yaml.AliasEvent):
            nodes, height = anchors.get(event.anchor or "", (1, 0))  # an unknown one: the parse says so
            if len(stack) + height > MAX_DEPTH:
                through = f"more than {MAX_DEPTH} levels through the alias *{event.anchor}"
                raise TooNested(f"{what}: nested too deeply{_line(event, through)}")
            expanded += nodes
            if expanded > MAX_ALIAS_NODES:
                raise TooNested(f"{what}: its aliases (*name) stand for more than {MAX_ALIAS_NODES:,} "
                                f"nodes{_line(event)}")
            done(None, nodes, height)


def load_yaml(text: str, what: str) -> Any:
    """``yaml.safe_load(text)`` of a document within the bounds (module docstring); :class:`TooNested` or
    :class:`NotADocument` otherwise. ``what`` names the document in the error (``matrix plan p.yaml``)."""
    try:
        try:
            _check_yaml(text, what)
        except yaml.YAMLError:
            if _EVENT_LOADER is not yaml.SafeLoader:  # libyaml stops at 1,000 levels with a parse error:
                _check_yaml(text, what, yaml.SafeLoader)  # say it is too deep if it is
            raise
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise NotADocument(f"{what}: not valid YAML{_line(exc)}") from None
    except (ValueError, OverflowError) as exc:  # a scalar Python cannot hold: 10**5000, 2025-13-45
        raise NotADocument(f"{what}: a value cannot be read ({_short(exc)})") from None


def yaml_mapping(text: str, what: str) -> dict[str, Any]:
    """:func:`load_yaml` of a document that must hold a mapping (an empty one is ``{}``)."""
    data = load_yaml(text, what)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InvalidInputError(f"{what}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def json_depth(text: str) -> int:
    """How deeply ``text``'s JSON nests (its brackets outside strings; 0 for a scalar)."""
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    if not brackets:
        return 0
    return max(accumulate(1 if c in "[{" else -1 for c in brackets))


def load_json(text: str, what: str) -> Any:
    """``json.loads(text)`` of a document within the bounds (module docstring); :class:`TooNested` or
    :class:`NotADocument` (``WHAT is not JSON (why at line N)``) otherwise."""
    depth = json_depth(text)
    if depth > MAX_DEPTH:
        raise TooNested(f"{what}: nested too deeply ({depth:,} levels; at most {MAX_DEPTH})")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise NotADocument(f"{what} is not JSON ({exc.msg} at line {exc.lineno})") from None
    except ValueError as exc:  # an integer of more than 4,300 digits
        raise NotADocument(f"{what} is not JSON gpuledger can read ({_short(exc)})") from None


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 120 else text[:120] + "…"


__all__ = ["MAX_ALIAS_NODES", "MAX_DEPTH", "NotADocument", "TooNested", "json_depth", "load_json",
           "load_yaml", "yaml_mapping"]
