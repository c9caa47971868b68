"""``gpuledger bench``'s options for the production-like workloads (docs/bench.md, "Workloads"): multi-turn
sessions, shared prefixes, trace replay. The values make ``kinds.text.options.TextOptions``; their rules are
``records/workloads.py``'s."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

TurnsOpt = Annotated[
    str | None,
    typer.Option("--turns", help="sharegpt / jsonl: replay each conversation turn by turn as a session, "
                 "every request with the history (the server's replies): all, or the first N turns."),
]
ThinkTimeOpt = Annotated[
    float | None,
    typer.Option("--think-time", help="With --turns: seconds between an answer and the session's next turn."),
]
PrefixLenOpt = Annotated[
    int | None,
    typer.Option("--prefix-len", help="random: prompts start with a shared prefix of P tokens (one per "
                 "group)."),
]
PrefixRatioOpt = Annotated[
    float | None,
    typer.Option("--prefix-ratio", help="random: the shared prefix as a share of --input-len (instead of "
                 "--prefix-len)."),
]
PrefixGroupsOpt = Annotated[
    int | None,
    typer.Option("--prefix-groups", help="random: G groups of prompts, each sharing its own prefix "
                 "(default 1)."),
]
TraceOpt = Annotated[
    Path | None,
    typer.Option("--trace", help="Replay a trace's arrival times and lengths: Mooncake JSONL (hash_ids as "
                 "shared blocks) or BurstGPT CSV/JSONL."),
]
TraceSpeedOpt = Annotated[
    float | None,
    typer.Option("--trace-speed", help="With --trace: replay X times faster than recorded (default 1)."),
]
