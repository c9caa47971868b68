"""Comparing the cost efficiency of runs: the ratio, what it is made of, what would flip it.

    ratio(A, B) = tokens per currency unit of A / tokens per currency unit of B   (ratio(B, A) = 1/ratio)
                = throughput ratio (A/B) x utilisation ratio (A/B) x hourly-cost ratio (B/A)

Every break-even value is checked by recomputing the cost with it (``verified_ratio`` ~ 1).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from gpuledger.cost.model import CostInputs, Evaluation, RunCost, evaluate, money_prefix
from gpuledger.cost.runview import flat, summary_number
from gpuledger.errors import InvalidInputError, UsageError
from gpuledger.records import RunInfo

BASES = ("output", "total")
SENSITIVITY_STEP = 0.20
VERIFY_TOLERANCE = 1e-6


def ratio_of(a: Evaluation, b: Evaluation, basis: str = "output") -> float:
    """Tokens per currency unit of ``a`` over that of ``b``."""
    return a.tokens_per_money(basis) / b.tokens_per_money(basis)


@dataclass(frozen=True, slots=True)
class BreakEven:
    """The value of one of B's inputs at which A and B cost the same per token (or why there is none)."""

    input: str
    run_id: str
    unit: str
    current: float | None
    value: float | None
    reason: str | None = None
    verified_ratio: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class SensitivityRow:
    input: str
    run: str  # "A" or "B"
    run_id: str
    value: float
    unit: str
    ratio_at_minus_20pct: float
    ratio_at_plus_20pct: float
    note: str | None = None

    @property
    def swing(self) -> float:
        return abs(self.ratio_at_plus_20pct - self.ratio_at_minus_20pct)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"swing": self.swing}


@dataclass(frozen=True, slots=True)
class PairComparison:
    a: RunCost
    b: RunCost
    basis: str
    ratio: float
    decomposition: dict[str, Any]
    break_even: list[BreakEven]
    sensitivity: list[SensitivityRow]
    warnings: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {
            "a": self.a.run.id,
            "b": self.b.run.id,
            "basis": self.basis,
            "ratio": self.ratio,
            "meaning": f"run {self.a.run.id} gets {self.ratio:.4g}x the {self.basis} tokens per "
            f"{self.a.currency} of run {self.b.run.id}",
            "decomposition": self.decomposition,
            "break_even": [b.to_dict() for b in self.break_even],
            "sensitivity": [s.to_dict() for s in self.sensitivity],
            "warnings": self.warnings,
        }


@dataclass(frozen=True, slots=True)
class Comparison:
    """The first run against each of the others."""

    basis: str
    currency: str
    costs: list[RunCost]
    pairs: list[PairComparison] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return self.pairs[0].ratio

    def to_dict(self) -> dict[str, Any]:
        p = money_prefix(self.currency)
        runs = []
        for c in self.costs:
            ev = c.evaluation
            runs.append(
                {
                    "run_id": c.run.id,
                    "label": c.run.label,
                    "model": c.run.model,
                    "engine": c.run.engine,
                    "devices": c.device_names,
                    "profile": c.profile.name,
                    "mode": c.profile.mode,
                    f"{p}_per_hour": ev.hourly.total,
                    f"{p}_per_1m_output_tokens": ev.cost_per_million("output"),
                    f"{p}_per_1m_tokens": ev.cost_per_million("total"),
                    f"output_tokens_per_{p}": ev.tokens_per_money("output"),
                    f"tokens_per_{p}": ev.tokens_per_money("total"),
                    "power_source": c.power.source,
                    "priced_stage": (c.operating_point or {}).get("stage"),
                }
            )
        out: dict[str, Any] = {
            "currency": self.currency,
            "basis": self.basis,
            "reference": self.costs[0].run.id,
            "runs": runs,
            "pairs": [p_.to_dict() for p_ in self.pairs],
        }
        if len(self.pairs) == 1:
            out["ratio"] = self.pairs[0].ratio
        return out


# ------------------------------------------------------------------------------------- decomposition
def decompose(a: RunCost, b: RunCost, basis: str) -> dict[str, Any]:
    ea, eb = a.evaluation, b.evaluation
    thr = a.inputs.tokens_per_s(basis) / b.inputs.tokens_per_s(basis)
    util = a.inputs.utilisation / b.inputs.utilisation
    hourly = eb.hourly.total / ea.hourly.total
    ratio = thr * util * hourly
    logs = {"throughput": math.log(thr), "utilisation": math.log(util), "hourly_cost": math.log(hourly)}
    total_log = math.log(ratio)
    carried = {k: v / total_log for k, v in logs.items()} if abs(total_log) > 1e-12 else None
    comps_a, comps_b = ea.hourly.components(), eb.hourly.components()
    p = money_prefix(a.currency)
    return {
        "formula": "ratio = throughput_ratio (A/B) x utilisation_ratio (A/B) x hourly_cost_ratio (B/A)",
        "throughput_ratio": thr,
        "utilisation_ratio": util,
        "hourly_cost_ratio": hourly,
        "product": ratio,
        "share_of_log_ratio": carried,
        "share_of_log_ratio_meaning": "how much of ln(ratio) each factor carries (they sum to 1)",
        "hourly": {
            "a": {f"{k}_{p}_per_hour": v for k, v in comps_a.items()} | {"shares": ea.hourly.shares()},
            "b": {f"{k}_{p}_per_hour": v for k, v in comps_b.items()} | {"shares": eb.hourly.shares()},
            "difference_as_share_of_a": {k: (comps_b[k] - comps_a[k]) / ea.hourly.total for k in comps_a},
            "difference_meaning": "(B's component - A's component) / A's hourly cost; they sum to "
            "hourly_cost_ratio - 1",
        },
    }


# ------------------------------------------------------------------------------------- break-even
def _with_profile(inputs: CostInputs, **fields: Any) -> CostInputs:
    return replace(inputs, profile=inputs.profile.model_copy(update=fields))


def _verified(a: Evaluation, inputs_b: CostInputs, basis: str) -> float:
    return ratio_of(a, evaluate(inputs_b), basis)


def _price_field(b: RunCost) -> str:
    prof = b.profile
    if prof.rental_per_gpu_hour is not None:
        return "rental_per_gpu_hour"
    if prof.rental_per_hour is not None:
        return "rental_per_hour"
    return "gpu_price" if prof.gpu_price is not None else "host_price"


def _affine_solve(
    b_inputs: CostInputs,
    set_value: Callable[[CostInputs, float], CostInputs],
    x0: float,
    target_hourly: float,
) -> float | None:
    """x with hourly(x) = target for an hourly cost affine in x (exact for prices and hours)."""
    h0 = evaluate(set_value(b_inputs, x0)).hourly.total
    h1 = evaluate(set_value(b_inputs, x0 + 1.0)).hourly.total
    slope = h1 - h0
    if slope <= 0:
        return None
    return x0 + (target_hourly - h0) / slope


def break_even(a: RunCost, b: RunCost, basis: str) -> list[BreakEven]:
    """B's price, throughput, utilisation and setup hours at which A and B cost the same per token."""
    ea = a.evaluation
    k_a = ea.tokens_per_money(basis)
    b_in = b.inputs
    prof = b.profile
    out: list[BreakEven] = []
    # target hourly cost for B at its current throughput and utilisation
    target_hourly = b.evaluation.tokens_per_hour(basis) / k_a

    # 1. B's price
    price = _price_field(b)
    current_price = float(getattr(prof, price) or 0.0)

    def set_price(inp: CostInputs, x: float) -> CostInputs:
        return _with_profile(inp, **{price: x})

    x = _affine_solve(b_in, set_price, current_price, target_hourly)
    unit = prof.unit(price)
    if x is None:
        out.append(
            BreakEven(price, b.run.id, unit, current_price, None, f"B's cost does not depend on {price}")
        )
    elif x <= 0:
        out.append(
            BreakEven(
                price,
                b.run.id,
                unit,
                current_price,
                None,
                f"B would need {price} <= 0: its other costs alone exceed A's cost per token",
            )
        )
    else:
        out.append(
            BreakEven(price, b.run.id, unit, current_price, x, None, _verified(ea, set_price(b_in, x), basis))
        )

    # 2. B's throughput (all of B's token rates scaled by one factor)
    factor = k_a / b.evaluation.tokens_per_money(basis)
    scaled = replace(
        b_in,
        output_tokens_per_s=b_in.output_tokens_per_s * factor,
        input_tokens_per_s=b_in.input_tokens_per_s * factor,
    )
    out.append(
        BreakEven(
            "output_tokens_per_s",
            b.run.id,
            "tokens/s",
            b_in.output_tokens_per_s,
            scaled.output_tokens_per_s,
            None,
            _verified(ea, scaled, basis),
        )
    )

    # 3. B's utilisation: hourly(u) = F + e*u (energy is affine in u), tokens/money = T*u / (F + e*u)
    h_full = evaluate(_with_profile(b_in, utilisation=1.0)).hourly.total
    h_half = evaluate(_with_profile(b_in, utilisation=0.5)).hourly.total
    e = (h_full - h_half) / 0.5
    f_fixed = h_full - e
    t = b_in.tokens_per_s(basis) * 3600.0
    denom = t - k_a * e
    u_star = k_a * f_fixed / denom if denom > 0 else math.inf
    if not 0 < u_star <= 1.0:
        out.append(
            BreakEven(
                "utilisation",
                b.run.id,
                "fraction of wall time serving",
                b_in.utilisation,
                None,
                "B cannot match A even at 100 % utilisation",
            )
        )
    else:
        u_in = _with_profile(b_in, utilisation=u_star)
        out.append(
            BreakEven(
                "utilisation",
                b.run.id,
                "fraction of wall time serving",
                b_in.utilisation,
                u_star,
                None,
                _verified(ea, u_in, basis),
            )
        )

    # 4. B's setup labour hours
    if prof.labour_rate_per_hour <= 0:
        out.append(
            BreakEven(
                "setup_hours",
                b.run.id,
                "hours",
                b_in.setup_hours,
                None,
                "B's labour_rate_per_hour is 0: setup hours do not change its cost",
            )
        )
    else:

        def set_hours(inp: CostInputs, s: float) -> CostInputs:
            return replace(inp, setup_hours=s)

        s_star = _affine_solve(b_in, set_hours, b_in.setup_hours, target_hourly)
        if s_star is None or s_star < 0:
            out.append(
                BreakEven(
                    "setup_hours",
                    b.run.id,
                    "hours",
                    b_in.setup_hours,
                    None,
                    "B costs more per token than A even with zero setup hours",
                )
            )
        else:
            out.append(
                BreakEven(
                    "setup_hours",
                    b.run.id,
                    "hours",
                    b_in.setup_hours,
                    s_star,
                    None,
                    _verified(ea, set_hours(b_in, s_star), basis),
                )
            )
    return out


# ------------------------------------------------------------------------------------- sensitivity
_PROFILE_INPUTS = (
    "gpu_price",
    "host_price",
    "rental_per_gpu_hour",
    "rental_per_hour",
    "electricity_per_kwh",
    "pue",
    "amortisation_months",
    "labour_rate_per_hour",
    "maintenance_hours_per_month",
    "hosting_per_month",
    "software_per_month",
    "utilisation",
)


def _variants(inputs: CostInputs) -> list[tuple[str, float, str, Callable[[float], CostInputs]]]:
    """(name, base value, unit, factor -> changed inputs) for every input that is set and non-zero."""
    out: list[tuple[str, float, str, Callable[[float], CostInputs]]] = []
    prof = inputs.profile
    for name in _PROFILE_INPUTS:
        value = getattr(prof, name)
        if not value:
            continue
        if prof.mode == "rental" and name in ("electricity_per_kwh", "pue"):
            continue

        def change(f: float, name: str = name, value: float = float(value)) -> CostInputs:
            new = value * f
            if name == "utilisation":
                new = min(new, 1.0)
            if name == "pue":
                new = max(new, 1.0)
            return _with_profile(inputs, **{name: new})

        out.append((name, float(value), prof.unit(name), change))
    if prof.mode == "ownership" and inputs.power_serving_w > 0:

        def power(f: float) -> CostInputs:
            return replace(
                inputs, power_serving_w=inputs.power_serving_w * f, power_idle_w=inputs.power_idle_w * f
            )

        out.append(("power_w", inputs.power_serving_w, "W (serving and idle together)", power))

    def throughput(f: float) -> CostInputs:
        return replace(
            inputs,
            output_tokens_per_s=inputs.output_tokens_per_s * f,
            input_tokens_per_s=inputs.input_tokens_per_s * f,
        )

    out.append(
        ("throughput", inputs.output_tokens_per_s, "output tokens/s (all token rates together)", throughput)
    )
    if inputs.setup_hours and prof.labour_rate_per_hour:

        def setup(f: float) -> CostInputs:
            return replace(inputs, setup_hours=inputs.setup_hours * f)

        out.append(("setup_hours", inputs.setup_hours, "hours", setup))
    return out


def sensitivity(a: RunCost, b: RunCost, basis: str) -> list[SensitivityRow]:
    """Each input of A and of B moved -20 % and +20 % (one at a time) -> the ratio; largest swing first."""
    rows: list[SensitivityRow] = []
    ea, eb = a.evaluation, b.evaluation
    for side, cost in (("A", a), ("B", b)):
        for name, value, unit, change in _variants(cost.inputs):
            lo_ev = evaluate(change(1.0 - SENSITIVITY_STEP))
            hi_ev = evaluate(change(1.0 + SENSITIVITY_STEP))
            if side == "A":
                lo, hi = ratio_of(lo_ev, eb, basis), ratio_of(hi_ev, eb, basis)
            else:
                lo, hi = ratio_of(ea, lo_ev, basis), ratio_of(ea, hi_ev, basis)
            note = None
            if name == "utilisation" and value * (1 + SENSITIVITY_STEP) > 1.0:
                note = "+20 % capped at utilisation 1.0"
            if name == "pue" and value * (1 - SENSITIVITY_STEP) < 1.0:
                note = "-20 % floored at PUE 1.0"
            rows.append(SensitivityRow(name, side, cost.run.id, value, unit, lo, hi, note))
    rows.sort(key=lambda r: r.swing, reverse=True)
    return rows


# ------------------------------------------------------------------------------------- warnings
# Environment/config keys are compared by their words (``torch.cuda_version`` -> torch, cuda, version).
_VENDOR_STACK_WORDS = frozenset(
    {"driver", "cuda", "rocm", "hip", "nvml", "amdsmi", "nccl", "rccl", "cudnn", "miopen", "amdgpu", "kfd"}
)
_SOFTWARE_WORDS = frozenset(
    {
        "torch",
        "vllm",
        "sglang",
        "llama",
        "llamacpp",
        "ollama",
        "tgi",
        "transformers",
        "engine",
        "tensorrt",
        "triton",
        "xformers",
        "flash",
        "python",
    }
)
_IGNORED_ENV_WORDS = frozenset(
    {
        "hash",
        "time",
        "timestamp",
        "date",
        "host",
        "hostname",
        "machine",
        "uuid",
        "serial",
        "pid",
        "collected",
        "created",
        "duration",
        "at",
    }
)
_IGNORED_CONFIG_WORDS = frozenset(
    {"url", "host", "port", "path", "file", "dir", "label", "db", "store", "secret", "password", "seed",
     "like", "metrics"}
)


def _words(key: str) -> set[str]:
    return {w for w in re.split(r"[^a-z0-9]+", key.lower()) if w}


def _strip_local(version: Any) -> Any:
    """``"2.5.1+cu121"`` -> ``"2.5.1"``: builds for different vendors differ by design."""
    return version.split("+", 1)[0] if isinstance(version, str) else version


def _vendor(cost: RunCost) -> str:
    vendors = {
        str(d.get("vendor")) for d in cost.run.telemetry_summary if d.get("vendor") in ("nvidia", "amd")
    }
    return ",".join(sorted(vendors)) or cost.kind


def environment_differences(a: RunCost, b: RunCost) -> tuple[list[str], list[str]]:
    """(warnings, notes) about environment keys that differ."""
    env_a, env_b = flat(a.run.environment or {}), flat(b.run.environment or {})
    same_vendor = _vendor(a) == _vendor(b)
    warns: list[str] = []
    notes: list[str] = []
    for key in sorted(set(env_a) | set(env_b)):
        low = key.lower()
        words = _words(low)
        if words & _IGNORED_ENV_WORDS:
            continue
        va, vb = env_a.get(key), env_b.get(key)
        is_stack = bool(words & _VENDOR_STACK_WORDS)
        is_software = bool(words & _SOFTWARE_WORDS)
        if not (is_stack or is_software):
            continue
        if is_stack and not same_vendor:
            if va != vb:
                notes.append(f"environment {key}: {va!r} vs {vb!r} (different vendor stacks; expected)")
            continue
        if _strip_local(va) != _strip_local(vb):
            warns.append(f"environments differ: {key} = {va!r} (A) vs {vb!r} (B)")
    return warns, notes


def _mean_per_request(cost: RunCost, key: str) -> float | None:
    total, ok = summary_number(cost.run, key), summary_number(cost.run, "num_ok")
    return total / ok if total is not None and ok else None


def _queueing(run: RunInfo) -> str | None:
    """How the run's server queued requests (``server.state``, read from its /metrics): a phrase, "" when
    it did not, None when unknown."""
    from gpuledger.bench.server_state import QUEUE_NOTE_MS

    state = (run.server or {}).get("state") or {}
    if not isinstance(state, dict):
        return None
    waiting = state.get("waiting")
    peak = waiting.get("max") if isinstance(waiting, dict) else None
    queue = state.get("queue_time_ms_mean")
    known = False
    if isinstance(peak, int | float):
        known = True
        if peak > 0:
            return f"up to {peak:g} waiting"
    if isinstance(queue, int | float):
        known = True
        if queue >= QUEUE_NOTE_MS:
            return f"{queue:.0f} ms mean queue time"
    return "" if known else None


def _saturation_warnings(ra: RunInfo, rb: RunInfo) -> list[str]:
    """Two runs at different operating points: one server queued requests, the other did not."""
    qa, qb = _queueing(ra), _queueing(rb)
    if qa is None or qb is None or bool(qa) == bool(qb):
        return []
    busy, idle, how = ("A", "B", qa) if qa else ("B", "A", qb)
    return [
        f"{busy}'s server kept requests waiting in its queue ({how}) while {idle}'s did not: "
        f"{busy} was measured at saturation, {idle} below it — its latency includes queueing and its "
        "throughput is its ceiling; compare at the same operating point (a --sweep shows both)"
    ]


def comparison_warnings(a: RunCost, b: RunCost) -> list[str]:
    ra, rb = a.run, b.run
    out: list[str] = []
    if ra.model != rb.model:
        out.append(f"different models: {ra.model!r} (A) vs {rb.model!r} (B)")
    wa, wb = flat(ra.workload or {}), flat(rb.workload or {})
    same_file = wa.get("sha256") is not None and wa.get("sha256") == wb.get("sha256")
    # A dataset file read from another place is the same workload when its bytes are the same.
    diff = sorted(
        k for k in set(wa) | set(wb) if wa.get(k) != wb.get(k) and not (same_file and k == "path")
    )
    if diff:
        out.append(
            "different workloads: "
            + ", ".join(f"{k} = {wa.get(k)!r} vs {wb.get(k)!r}" for k in diff[:6])
            + (f" (+{len(diff) - 6} more)" if len(diff) > 6 else "")
        )
    ca, cb = flat(ra.config or {}), flat(rb.config or {})
    cdiff = sorted(
        k
        for k in set(ca) | set(cb)
        if ca.get(k) != cb.get(k) and not (_words(k) & _IGNORED_CONFIG_WORDS) and "api_key" not in k.lower()
    )
    if cdiff:
        out.append(
            "different run settings: " + ", ".join(f"{k} = {ca.get(k)!r} vs {cb.get(k)!r}" for k in cdiff[:6])
        )
    for key, what in (("output_tokens_total", "output"), ("input_tokens_total", "input")):
        ma, mb = _mean_per_request(a, key), _mean_per_request(b, key)
        if ma and mb and abs(ma - mb) / max(ma, mb) > 0.05:
            out.append(f"different {what} lengths: {ma:.1f} vs {mb:.1f} tokens per request on average")
    for side, run in (("A", ra), ("B", rb)):
        mismatch = summary_number(run, "output_len_mismatch")
        if mismatch:
            out.append(
                f"run {run.id} ({side}): {int(mismatch)} request(s) got a different output length "
                "than requested"
            )
        if run.status != "complete":
            out.append(f"run {run.id} ({side}) is {run.status}, not complete")
    out.extend(_saturation_warnings(ra, rb))
    if ra.engine != rb.engine:
        out.append(f"different engines: {ra.engine!r} (A) vs {rb.engine!r} (B)")
    sa, sb = flat(ra.server or {}), flat(rb.server or {})
    for key in sorted(set(sa) & set(sb)):
        if "version" in key.lower() and sa[key] != sb[key] and ra.engine == rb.engine:
            out.append(f"different {ra.engine or 'engine'} versions: {sa[key]!r} (A) vs {sb[key]!r} (B)")
    env_warns, _ = environment_differences(a, b)
    out.extend(env_warns)
    if a.power.estimate != b.power.estimate:
        out.append(f"power basis differs: A {a.power.source}; B {b.power.source}")
    if a.inputs.utilisation != b.inputs.utilisation:
        out.append(
            f"the profiles assume different utilisation: {a.inputs.utilisation:.0%} (A) vs "
            f"{b.inputs.utilisation:.0%} (B)"
        )
    return out


# ------------------------------------------------------------------------------------- entry point
def compare_pair(a: RunCost, b: RunCost, basis: str = "output") -> PairComparison:
    ratio = ratio_of(a.evaluation, b.evaluation, basis)
    return PairComparison(
        a,
        b,
        basis,
        ratio,
        decompose(a, b, basis),
        break_even(a, b, basis),
        sensitivity(a, b, basis),
        comparison_warnings(a, b),
    )


def compare(runs_costs: Sequence[RunCost], basis: str = "output") -> Comparison:
    """The first run against each of the others. All must be priced in one currency (no silent FX)."""
    if basis not in BASES:
        raise UsageError(f"--basis must be one of {', '.join(BASES)} (got {basis!r})")
    costs = list(runs_costs)
    if len(costs) < 2:
        raise UsageError("compare needs at least two runs")
    currencies = {c.currency for c in costs}
    if len(currencies) > 1:
        listing = ", ".join(f"{c.run.id}: {c.currency} ({c.profile.name})" for c in costs)
        raise InvalidInputError(
            f"the runs are priced in different currencies ({listing}); gpuledger does no currency conversion",
            hint="use cost profiles in one currency",
        )
    pairs = [compare_pair(costs[0], other, basis) for other in costs[1:]]
    return Comparison(basis, costs[0].currency, costs, pairs)
