"""What the production-like workloads add to a server run's dataset spec (``records.spec.DatasetSpec``), and
the rules its fields follow — the command line's one-line messages:

- ``turns`` (``--turns all|N``): a ``sharegpt`` or ``jsonl`` file's conversations replayed turn by turn,
  each conversation a session (``workload/conversations.py``); ``think_time_s`` (``--think-time``) the pause
  between an answer and the session's next turn.
- ``prefix_len`` / ``prefix_ratio`` and ``prefix_groups`` (``--prefix-len P`` or ``--prefix-ratio R``,
  ``--prefix-groups G``): random prompts in G groups, each group's prompts starting with the same P tokens
  (``workload/shared.py``).
- the ``trace`` dataset (``--trace FILE``): a trace's arrival times and lengths (``workload/traces.py``),
  replayed by ``records.load.TraceLoad``.

Every number is bounded here (the spec's validators run for the command line, ``--like`` and stored specs).
"""

from __future__ import annotations

from typing import Literal, Protocol

MAX_TURNS = 1000
MAX_THINK_TIME_S = 3600.0
MAX_PREFIX_GROUPS = 1_000_000
MAX_PREFIX_TOKENS = 10_000_000
TURN_DATASETS = ("sharegpt", "jsonl")

Turns = int | Literal["all"]


class _Dataset(Protocol):
    name: str
    input_len: int | None
    output_len: int | None
    range_ratio: float
    turns: Turns | None
    think_time_s: float | None
    prefix_len: int | None
    prefix_groups: int | None
    prefix_ratio: float | None


def parse_turns(text: str | None) -> Turns | None:
    """``--turns all`` or ``--turns N``; None when not given. ``ValueError`` with the flag's line else."""
    if text is None:
        return None
    value = text.strip().lower()
    if value == "all":
        return "all"
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"--turns takes all or a number of turns, got {text!r}") from None


# The random dataset's --output-len when none is given.
DEFAULT_RANDOM_OUTPUT_LEN = 128


def random_lengths(ds: _Dataset, default_input_len: int) -> tuple[int, int, int, int]:
    """(lowest, highest) prompt and (lowest, highest) output lengths the random dataset draws: its
    ``--input-len`` / ``--output-len`` (else the defaults) less and more the range ratio. The one rule
    the prompts are made by and the server's limits are checked against."""
    in_len = ds.input_len or default_input_len
    out_len = ds.output_len or DEFAULT_RANDOM_OUTPUT_LEN
    r = ds.range_ratio
    lo_i, lo_o = max(1, int(in_len * (1 - r))), max(1, int(out_len * (1 - r)))
    return lo_i, max(lo_i, int(in_len * (1 + r))), lo_o, max(lo_o, int(out_len * (1 + r)))


def lowest_input(ds: _Dataset, default_len: int) -> int:
    """The shortest prompt the random dataset draws (its ``--input-len`` less the range ratio)."""
    return random_lengths(ds, default_len)[0]


def workload_problem(ds: _Dataset, default_input_len: int) -> str | None:
    """The first rule ``ds`` breaks (the module docstring), or None."""
    if ds.turns is not None:
        if ds.name not in TURN_DATASETS:
            return f"--turns replays the conversations of --dataset sharegpt or jsonl, not {ds.name}"
        if ds.turns != "all" and not 1 <= ds.turns <= MAX_TURNS:
            return f"--turns must be all or 1 to {MAX_TURNS}, got {ds.turns}"
    if ds.think_time_s is not None:
        if ds.turns is None:
            return "--think-time is the pause between the turns of a session: give --turns all or --turns N"
        if not 0.0 <= ds.think_time_s <= MAX_THINK_TIME_S:
            return f"--think-time must be 0 to {MAX_THINK_TIME_S:g} seconds, got {ds.think_time_s}"
    return _prefix_problem(ds, default_input_len)


def _prefix_problem(ds: _Dataset, default_input_len: int) -> str | None:
    asked = [f for f, v in (("--prefix-len", ds.prefix_len), ("--prefix-ratio", ds.prefix_ratio),
                            ("--prefix-groups", ds.prefix_groups)) if v is not None]
    if not asked:
        return None
    if ds.name != "random":
        return f"{asked[0]} shapes the prompts of --dataset random, not {ds.name}"
    if ds.prefix_len is not None and ds.prefix_ratio is not None:
        return "give --prefix-len or --prefix-ratio, not both"
    if ds.prefix_len is None and ds.prefix_ratio is None:
        return "--prefix-groups needs the shared prefix's length: --prefix-len P or --prefix-ratio R"
    if ds.prefix_groups is not None and not 1 <= ds.prefix_groups <= MAX_PREFIX_GROUPS:
        return f"--prefix-groups must be 1 to {MAX_PREFIX_GROUPS:,}, got {ds.prefix_groups}"
    if ds.prefix_ratio is not None and not 0.0 < ds.prefix_ratio < 1.0:
        return f"--prefix-ratio must be between 0 and 1 (the share of each prompt), got {ds.prefix_ratio}"
    if ds.prefix_len is not None and not 1 <= ds.prefix_len <= MAX_PREFIX_TOKENS:
        return f"--prefix-len must be 1 to {MAX_PREFIX_TOKENS:,} tokens, got {ds.prefix_len}"
    low = lowest_input(ds, default_input_len)
    shared = prefix_tokens(ds, default_input_len) or 0
    if shared >= low:
        flag = "--prefix-len" if ds.prefix_len is not None else "--prefix-ratio"
        return (
            f"{flag} makes a prefix of {shared} tokens, leaving no tokens of their own to prompts of {low} "
            "tokens (--input-len less --range-ratio): give a shorter prefix or longer prompts"
        )
    return None


def prefix_tokens(ds: _Dataset, default_input_len: int) -> int | None:
    """The shared prefix's tokens (``--prefix-len``, or ``--prefix-ratio`` of ``--input-len``), None: none."""
    if ds.prefix_len is not None:
        return ds.prefix_len
    if ds.prefix_ratio is not None:
        return max(1, round(ds.prefix_ratio * (ds.input_len or default_input_len)))
    return None


# The workload record (``RunInfo.workload``) keeps what the run was asked to send and, beside it, what it
# observed while it made and sent its prompts: how long sends waited for a prompt, how exactly the server's
# tokenizer met the lengths (and with how many calls), the server's own prompt counts, notes, warm-up
# requests that failed — and, for a repeat of a group (``bench --repeat``, a matrix cell), its repeat
# record. Comparing two runs' workloads (compare's warnings, the gate's like-for-like) leaves these out.
REPEAT_KEY = "repeat"
OBSERVED_WORKLOAD = ("prompt_waits", "input_len_exact_ratio", "input_len_how", "prompt_tokens_check",
                     "prompt_notes", "warmup.failed", REPEAT_KEY)


def observed_workload_key(key: str) -> bool:
    """Is ``key`` (a dotted key of a flattened workload record) one the run observed, not one it was
    asked for?"""
    return any(key == o or key.startswith(o + ".") for o in OBSERVED_WORKLOAD)


__all__ = [
    "OBSERVED_WORKLOAD",
    "REPEAT_KEY",
    "MAX_PREFIX_GROUPS",
    "MAX_THINK_TIME_S",
    "MAX_TURNS",
    "TURN_DATASETS",
    "Turns",
    "lowest_input",
    "observed_workload_key",
    "parse_turns",
    "prefix_tokens",
    "workload_problem",
]
