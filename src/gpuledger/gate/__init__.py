"""The upgrade check (seed §8.1): judge a new driver, ROCm, PyTorch or vLLM like a test.

``gate(store, BASELINE, CANDIDATE, thresholds)`` -> ``GateVerdict`` (``gate/model.py``): each metric
PASS, FAIL, NOT DISTINGUISHABLE or NOT AVAILABLE with both values, the change and its 95 % interval
(``gate/judge.py``; statistics: ``gate/stats.py``), what changed in the stack (``gate/stack.py``) and
whether the two sides are like for like (``gate/like.py``); ``rerun_spec`` makes the spec that runs a
baseline's workload again (``gate --run``). Renderers: ``gate/render.py``. docs/gate.md has the rules and
the CI recipes.
"""

from gpuledger.gate.judge import Side, gate, judge, side, sides
from gpuledger.gate.metrics import CATALOGUE, parse_thresholds
from gpuledger.gate.model import GateVerdict, MetricJudgement, StackDiff, StackDrift
from gpuledger.gate.rerun import rerun_spec

__all__ = [
    "CATALOGUE",
    "GateVerdict",
    "MetricJudgement",
    "Side",
    "StackDiff",
    "StackDrift",
    "gate",
    "judge",
    "parse_thresholds",
    "rerun_spec",
    "side",
    "sides",
]
