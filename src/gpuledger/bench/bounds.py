"""Which inputs are bounded, and by what: every number a bench run is asked for has a largest (and, where
it matters, a smallest) value, checked before anything is opened, with one line naming the bound.

A number far outside what a benchmark can do is a mistake (a copy-paste accident, a stored run that came
from elsewhere), never a workload: ``--concurrency 1000000000`` would make a billion tasks, ``--num-requests
10**23`` would never end, ``--rate 1e-300`` would wait forever for its second request, ``--seed 10**23``
cannot be stored. ``check_spec`` checks a whole spec — the one the command line made, a stored one
repeated with ``bench --like``, one a library caller built — against ``BOUNDS``; the runner checks what
only the server knows once the engine has opened it (``check_server_limits``: its context length) and
what this process can hold open (``in_flight_budget``: a connection per request in flight).

docs/contracts.md ("Which inputs are bounded") lists the same bounds.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuledger.errors import UsageError
from gpuledger.kinds.text.spec import ServerSpec, TorchSpec
from gpuledger.records import BenchSpec
from gpuledger.records.spec import DEFAULT_INPUT_LEN, DatasetSpec, RateStage, SweepLoad
from gpuledger.records.workloads import random_lengths

DAY_S = 86_400.0
# The longest a stage may send for (--duration), and so the longest mean gap a Poisson rate may have.
MAX_DURATION_S = 7 * DAY_S
MIN_RATE = 1.0 / MAX_DURATION_S
MAX_RATE = 100_000.0
MAX_CONCURRENCY = 10_000  # requests in flight against a server: one connection and one task each
MAX_BATCH = 4_096  # sequences generated together by the in-process engine
MAX_SWEEP_STAGES = 64
MAX_NUM_REQUESTS = 1_000_000  # measured requests per stage: one stored row each
MAX_WARMUP = 10_000
MAX_TOKENS = 10_000_000  # --input-len / --output-len before the server's context length is known
MAX_SEED = 2**63 - 1  # what the store (JSON, 64-bit integers) keeps
MAX_REQUEST_TIMEOUT_S = DAY_S
MAX_SLO_MS = MAX_DURATION_S * 1000.0
TELEMETRY_INTERVAL_S = (0.01, 3600.0)
SERVER_METRICS_INTERVAL_S = (0.05, 3600.0)
# File descriptors kept free beside the connections: the store, telemetry, logs, the tokenizer's session.
RESERVED_FILES = 64


@dataclass(frozen=True, slots=True)
class Bound:
    """The range of one flag's values and what the bound stands for."""

    flag: str
    low: float
    high: float
    unit: str = ""
    why: str = ""

    def check(self, value: float | None) -> None:
        """``UsageError`` naming the bound when ``value`` (None: not given) is outside it."""
        if value is None:
            return
        unit = f" {self.unit}" if self.unit else ""
        why = f" ({self.why})" if self.why else ""
        if isinstance(value, float) and not math.isfinite(value):
            raise UsageError(f"{self.flag} must be a finite number{unit}, got {value}")
        if value < self.low:
            raise UsageError(f"{self.flag} must be at least {_num(self.low)}{unit}{why}, got {_num(value)}")
        if value > self.high:
            raise UsageError(f"{self.flag} must be at most {_num(self.high)}{unit}{why}, got {_num(value)}")


def _num(value: float) -> str:
    if isinstance(value, int) or float(value).is_integer() and abs(value) < 1e16:
        return f"{int(value)}"
    return f"{value:.6g}"


BOUNDS: dict[str, Bound] = {b.flag: b for b in (
    Bound("--concurrency", 1, MAX_CONCURRENCY, why="requests in flight: a connection and a task each"),
    Bound("--sweep", 1, MAX_CONCURRENCY, why="a stage's requests in flight"),
    Bound("--rate", MIN_RATE, MAX_RATE, "requests/s",
          why=f"the mean gap between sends is at most {MAX_DURATION_S / DAY_S:g} days, the longest stage"),
    Bound("--num-requests", 1, MAX_NUM_REQUESTS, why="per stage; each is a stored row"),
    Bound("--duration", 1e-3, MAX_DURATION_S, "s", why="per stage"),
    Bound("--warmup", 0, MAX_WARMUP),
    Bound("--input-len", 1, MAX_TOKENS, "tokens", why="the server's context length bounds it further"),
    Bound("--output-len", 1, MAX_TOKENS, "tokens", why="the server's context length bounds it further"),
    Bound("--seed", 0, MAX_SEED, why="a 63-bit integer"),
    Bound("--request-timeout", 1e-3, MAX_REQUEST_TIMEOUT_S, "s"),
    Bound("--telemetry-interval", *TELEMETRY_INTERVAL_S, "s"),
    Bound("--server-metrics-interval", *SERVER_METRICS_INTERVAL_S, "s"),
    Bound("--slo", 1e-3, MAX_SLO_MS, "ms"),
)}
TORCH_BOUNDS: dict[str, Bound] = {**BOUNDS, "--concurrency": Bound(
    "--concurrency", 1, MAX_BATCH, why="the in-process engine's batch: sequences generated together")}


def check_spec(spec: BenchSpec) -> None:
    """``UsageError`` (exit 2) with the flag's bound for the first value of ``spec`` outside it (see the
    module docstring). Kinds of spec this module does not know check their own fields."""
    if isinstance(spec, ServerSpec):
        _server(spec)
    elif isinstance(spec, TorchSpec):
        _torch(spec)


def _server(spec: ServerSpec) -> None:
    b = BOUNDS
    if spec.dataset is not None:
        _dataset(spec.dataset)
    stages = spec.load.run_stages() if spec.load is not None else []
    if len(stages) > MAX_SWEEP_STAGES:
        raise UsageError(f"--sweep runs at most {MAX_SWEEP_STAGES} stages, got {len(stages)}")
    for stage in stages:
        if isinstance(stage, RateStage):
            b["--rate"].check(stage.rate_requests_per_s)
            b["--concurrency"].check(stage.max_concurrency)
        else:
            b["--sweep" if isinstance(spec.load, SweepLoad) else "--concurrency"].check(stage.in_flight())
    b["--num-requests"].check(spec.num_requests_per_stage)
    b["--duration"].check(spec.duration_s)
    b["--warmup"].check(spec.warmup)
    b["--seed"].check(spec.seed)
    b["--request-timeout"].check(spec.request_timeout_s)
    b["--telemetry-interval"].check(spec.telemetry_interval_s())
    b["--server-metrics-interval"].check(spec.server_metrics_interval_s)
    _slo(spec.slo)
    per_stage = spec.requests_per_stage()
    for stage in stages:
        # A count-bounded Poisson stage lasts count / rate on average: at most the longest stage.
        if isinstance(stage, RateStage) and per_stage is not None and spec.duration_s is None:
            expected = per_stage / stage.rate_requests_per_s
            if expected > MAX_DURATION_S:
                raise UsageError(
                    f"--rate {stage.rate_requests_per_s:g} with --num-requests {per_stage} takes "
                    f"{expected / DAY_S:,.1f} days on average, more than the longest stage "
                    f"({MAX_DURATION_S / DAY_S:g} days): raise --rate, lower --num-requests or give "
                    "--duration"
                )


def _dataset(ds: DatasetSpec) -> None:
    b = BOUNDS
    b["--input-len"].check(ds.input_len)
    b["--output-len"].check(ds.output_len)
    b["--seed"].check(ds.seed)


def _torch(spec: TorchSpec) -> None:
    b = TORCH_BOUNDS
    b["--concurrency"].check(spec.batch_size)
    b["--input-len"].check(spec.input_tokens)
    b["--output-len"].check(spec.output_tokens)
    b["--num-requests"].check(spec.requests_planned)
    b["--seed"].check(spec.seed)
    _slo(spec.slo)


def _slo(slo: Mapping[str, float] | None) -> None:
    for key, value in (slo or {}).items():
        bound = BOUNDS["--slo"]
        Bound(f"--slo {key}", bound.low, bound.high, bound.unit).check(value)


# ------------------------------------------------------------------------------ what the server knows


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """What the server said bounds a request: its context length (prompt + output tokens) and where that
    came from; the longest prompt it takes when it says so separately (TGI)."""

    context_length: int | None = None
    source: str | None = None
    max_input_tokens: int | None = None

    @classmethod
    def of(cls, details: Mapping[str, Any]) -> ServerLimits:
        """From ``ServerInfo.details`` as the engine filled it (``context_length``, ...)."""

        def count(key: str) -> int | None:
            v = details.get(key)
            return v if type(v) is int and 0 < v < 2**31 else None

        src = details.get("context_length_source")
        return cls(count("context_length"), src if isinstance(src, str) else None, count("max_input_tokens"))


def check_server_limits(spec: BenchSpec, limits: ServerLimits) -> list[str]:
    """``UsageError`` when the asked lengths cannot hold on this server (a prompt longer than its context:
    every request would fail); the warnings to store when they hold only in part (prompt + output over the
    context: the server shortens the outputs)."""
    if not isinstance(spec, ServerSpec) or spec.dataset is None:
        return []
    ctx = limits.context_length
    ds = spec.dataset
    where = f"the server's context length, {ctx} tokens ({limits.source or 'as the server reports it'})"
    prompt_cap = min(v for v in (ctx, limits.max_input_tokens) if v is not None) if (
        ctx is not None or limits.max_input_tokens is not None) else None
    longest = longest_input(ds)
    if longest is not None and prompt_cap is not None and longest > prompt_cap:
        asked = ds.input_len or DEFAULT_INPUT_LEN
        span = "" if longest == asked else f" (up to {longest} with --range-ratio {ds.range_ratio:g})"
        given = "" if ds.input_len else " (the default)"
        cap = where if prompt_cap == ctx else f"the server's longest prompt, {prompt_cap} tokens"
        raise UsageError(
            f"--input-len {asked}{given}{span} is more than {cap}: every such request would fail",
            hint="lower --input-len, or serve the model with a longer context",
        )
    if ctx is None:
        return []
    out_longest = longest_output(ds)
    if out_longest is not None and out_longest >= ctx:
        given = "" if ds.output_len else " (the default)"
        asked = ds.output_len or out_longest
        raise UsageError(f"--output-len {asked}{given} leaves no room for a prompt in {where}")
    if longest is not None and out_longest is not None and longest + out_longest > ctx:
        return [
            f"prompt + output tokens (up to {longest} + {out_longest}) exceed {where}: the server shortens "
            "the outputs that do not fit (the summary's output_len_mismatch counts them)"
        ]
    return []


def longest_input(ds: DatasetSpec) -> int | None:
    """The longest prompt the random dataset asks for, its --input-len defaulted as the prompts are made
    (None: the dataset brings its own prompts)."""
    return random_lengths(ds, DEFAULT_INPUT_LEN)[1] if ds.name == "random" else None


def longest_output(ds: DatasetSpec) -> int | None:
    """The longest output asked for: the random dataset's (its --output-len defaulted as the prompts are
    made), else the --output-len given (None: each prompt's own)."""
    if ds.name == "random":
        return random_lengths(ds, DEFAULT_INPUT_LEN)[3]
    return ds.output_len


# ------------------------------------------------------------------------------ what this process holds


def in_flight_budget(wanted: int | None) -> int:
    """How many requests this process can keep in flight (each holds a connection, one file descriptor):
    the soft open-file limit less ``RESERVED_FILES``, raised towards the hard limit when ``wanted`` needs
    more (as ``ulimit -n`` would). ``UsageError`` when ``wanted`` is more than even the hard limit allows;
    ``wanted`` None (a Poisson rate without a cap): the budget itself, at most ``MAX_CONCURRENCY``."""
    try:
        import resource
    except ImportError:  # not a POSIX system: the operating system's own limit applies
        return wanted or MAX_CONCURRENCY
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = (wanted or MAX_CONCURRENCY) + RESERVED_FILES
    if soft != resource.RLIM_INFINITY and need > soft:
        target = need if hard == resource.RLIM_INFINITY else min(need, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    budget = MAX_CONCURRENCY if soft == resource.RLIM_INFINITY else max(1, soft - RESERVED_FILES)
    if wanted is not None and wanted > budget:
        raise UsageError(
            f"--concurrency {wanted} needs {wanted + RESERVED_FILES} open files and this process may open "
            f"{soft} (ulimit -n; hard limit {'unlimited' if hard == resource.RLIM_INFINITY else hard}): "
            f"at most {budget} requests can be in flight",
            hint="raise the limit (ulimit -n) or lower --concurrency",
        )
    return min(wanted or budget, budget, MAX_CONCURRENCY)
