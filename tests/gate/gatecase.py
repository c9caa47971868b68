"""What the gate tests share beside their fixtures: the programmed server's pace and the load every run sends
(delays large against what a loaded 2-core machine adds to a sleep, a few ms: a 30 % slower TPOT is 24 ms
more per token, far outside the noise of timers; a 10 % threshold is 8 ms per token), and a verdict's
metrics by key."""

from __future__ import annotations

from typing import Any

TTFT_S = 0.15
ITL_S = 0.08
LOAD = ("--dataset", "random", "--input-len", "16", "--output-len", "8", "--concurrency", "6",
        "--num-requests", "24")


def judged(verdict: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The verdict's metrics by key."""
    return {m["metric"]: m for m in verdict["metrics"]}
