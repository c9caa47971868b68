"""The advisor (docs/advise.md): which catalog GPU serves YOUR model at YOUR interactivity for the least
money, and why — every figure with its origin (measured / published / estimate).

For each candidate GPU and each deployment size (1, 2, 4, 8 GPUs serving one replica):

1. does it fit: the weights + the KV cache of the sequences the interactivity allows, in the usable memory;
2. throughput at the interactivity: the roofline at the efficiency your own runs of this model measured on
   that vendor's GPUs, else the publisher's points of this model, GPU and lengths interpolated along their
   Pareto front, else the roofline at the efficiency chain of ``CarriedEfficiency`` (your runs of any model
   → published points of the GPU → gpuledger's default);
3. cost per 1M output tokens at your TCO on ONE pricing basis for the whole ranking (``--profile-tier``:
   owned by default, rented, or an InferenceX tier; a GPU with no preset of that basis is not ranked, with
   the reason — never priced on another basis), or your file per GPU (its basis said in its row), with the
   setup labour of the vendor (stated, doctor ledger, or the seed essay's example — labelled);

then each GPU's smallest deployment that serves the workload (more GPUs would be replicas of it) is ranked
by that cost, and the essay's criteria
(``cost/advise/advise_criteria.py``) are applied one after the other, each with how it moved the ranking.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pydantic import model_serializer

from gpuledger.catalog import Catalog, GpuSpec, load_catalog, normalise_dtype
from gpuledger.cost.advise.advise_criteria import NVIDIA_ONLY, QUESTIONS, Answers
from gpuledger.cost.estimate.estimate_model import EfficiencyPool, SetupLabour
from gpuledger.cost.estimate.roofline_estimate import (
    Memory,
    Workload,
    best_at_interactivity,
    choose_efficiency,
    memory_of,
)
from gpuledger.cost.pricing.document import Doc
from gpuledger.cost.pricing.modelarch import ModelArch
from gpuledger.cost.pricing.pointcost import PointCost, PointCostDoc, price_point
from gpuledger.cost.pricing.presets import TIER_WORDS, TIERS, builtin_presets, tier_name
from gpuledger.cost.pricing.profile import CostProfile
from gpuledger.cost.pricing.setup_hours import WORKDAY_HOURS, SetupHours, setup_hours_for
from gpuledger.cost.published.advise_published import interpolate, points_for
from gpuledger.errors import InvalidInputError, UsageError
from gpuledger.records import DoctorRunRecord, RunInfo

GPU_COUNTS: tuple[int, ...] = (1, 2, 4, 8)
# One pricing basis per ranking (docs/advise.md, "Cost at your TCO"): every GPU owned, every GPU rented, or
# every GPU at one InferenceX tier. Owned is the default.
PROFILE_TIERS: tuple[str, ...] = ("own", "rent", *TIERS)
DEFAULT_TIER = "own"
BASIS_WORDS: dict[str, str] = {
    "own": "owned: each GPU's -own preset (its purchase price amortised, energy at the catalog TDP)",
    "rent": "rented: each GPU's -rent preset (a typical on-demand $/GPU-hour, energy included)",
    **{t: f"at SemiAnalysis InferenceX's {t} tier: each GPU's -inferencex-{t} preset ($/GPU-hour all-in, "
          f"{TIER_WORDS[t]})" for t in TIERS},
}
BASIS_SHORT: dict[str, str] = {"own": "owned", "rent": "rented", **{t: f"InferenceX {t}" for t in TIERS}}
_MISSING_PRICE: dict[str, str] = {
    "own": "no purchase price", "rent": "no on-demand rental rate",
    **{t: f"no InferenceX {t} price" for t in TIERS},
}


@dataclass(frozen=True, slots=True)
class PricingBasis:
    """How one GPU's row is priced: the ranking's basis (a preset of the tier) or your own profile."""

    key: str  # "own" | "rent" | an InferenceX tier
    text: str
    profile: str | None  # the profile's name (None: not priced)
    yours: bool = False  # your --profile for this GPU

    @property
    def short(self) -> str:
        return BASIS_SHORT[self.key] + (" (your profile)" if self.yours else "")

    def document(self) -> PricingBasisDoc:
        return PricingBasisDoc(basis=self.key, text=self.text, profile=self.profile, yours=self.yours)


class PricingBasisDoc(Doc):
    basis: str
    text: str
    profile: str | None
    yours: bool


@dataclass(frozen=True, slots=True)
class Request:
    """What the advisor is asked: the model, the lengths, the interactivity (or SLOs, or a concurrency)."""

    arch: ModelArch
    input_len: int
    output_len: int
    interactivity: float | None = None  # tokens/s per user at least
    ttft_ms: float | None = None
    concurrency: int | None = None  # sequences in flight, fixed
    dtype: str | None = None
    gpus: tuple[str, ...] = ()
    tier: str = DEFAULT_TIER
    profiles: Mapping[str, CostProfile] = field(default_factory=dict)  # catalog key -> profile
    setup_hours: Mapping[str, float] | None = None
    answers: Answers = field(default_factory=Answers)
    gpu_counts: tuple[int, ...] = GPU_COUNTS

    def __post_init__(self) -> None:
        if self.interactivity is None and self.concurrency is None:
            raise UsageError(
                "advise needs --interactivity TOK_S_PER_USER, --slo tpot_ms=… or --concurrency N"
            )
        if self.tier not in PROFILE_TIERS:
            raise UsageError(f"--profile-tier {self.tier!r}: one of {', '.join(PROFILE_TIERS)}")
        if self.dtype is not None and normalise_dtype(self.dtype) is None:
            raise UsageError(f"--dtype {self.dtype!r}: not a dtype gpuledger knows (bf16, fp16, fp8, int4)")

    @property
    def kind(self) -> str:
        """The dtype served: the one asked, else the model config's own (DeepSeek R1: fp8), else bf16."""
        return normalise_dtype(self.dtype) or self.arch.dtype or "bf16"


@dataclass(frozen=True, slots=True)
class Option:
    """One deployment: ``devices`` x ``spec``, its fit, throughput and where that comes from."""

    spec: GpuSpec
    devices: int
    memory: Memory
    origin: str  # of the throughput: "estimate" | "published" | "derived from published"
    how: str
    tokens_per_s_per_user: float | None = None
    output_tokens_per_s: float | None = None  # all devices
    total_tokens_per_s: float | None = None
    concurrency: float | None = None
    ttft_ms: float | None = None
    problem: str | None = None  # why it cannot serve the workload (does not fit, too slow)

    @property
    def serves(self) -> bool:
        return self.problem is None and self.output_tokens_per_s is not None


@dataclass(frozen=True, slots=True)
class Priced:
    option: Option
    cost: PointCost | None
    setup: SetupHours
    excluded: str | None = None  # the criterion that removed it

    @property
    def per_1m(self) -> float:
        return self.cost.per_1m_output if self.cost is not None else math.inf


@dataclass(frozen=True, slots=True)
class Row:
    spec: GpuSpec
    rank: int | None
    best: Priced | None
    options: tuple[Priced, ...]
    status: str  # "ranked" | why not
    why: tuple[str, ...]
    basis: PricingBasis

    def document(self) -> RowDoc:
        return RowDoc(
            rank=self.rank,
            gpu=self.spec.key,
            name=self.spec.name,
            vendor=self.spec.vendor,
            status=self.status,
            pricing_basis=self.basis.document(),
            best=_priced_doc(self.best) if self.best is not None else None,
            options=[_priced_doc(p) for p in self.options],
            why=list(self.why),
        )


@dataclass(frozen=True, slots=True)
class Effect:
    key: str
    answer: str
    effect: str
    moved: tuple[tuple[str, int | None, int | None], ...]  # (GPU name, rank before, rank after)

    def text(self, most: int = 4) -> str:
        if not self.moved:
            return f"{self.effect}; the order did not change"
        moves = "; ".join(f"{n} {_rank(b)} → {_rank(a)}" for n, b, a in self.moved[:most])
        more = f" and {len(self.moved) - most} more" if len(self.moved) > most else ""
        return f"{self.effect}; moved: {moves}{more}"

    def document(self) -> EffectDoc:
        question, essay, choices = QUESTIONS[self.key]
        return EffectDoc(key=self.key, question=question, essay=essay, choices=choices, answer=self.answer,
                         effect=self.effect,
                         moved=[Moved(gpu=n, rank_before=b, rank_after=a) for n, b, a in self.moved])

    @property
    def question(self) -> str:
        return QUESTIONS[self.key][0]


def _rank(r: int | None) -> str:
    return f"#{r}" if r is not None else "not ranked"


@dataclass(frozen=True, slots=True)
class Advice:
    request: Request
    rows: tuple[Row, ...]
    baseline: tuple[str, ...]  # the order before any criterion (GPU keys)
    effects: tuple[Effect, ...]
    unanswered: tuple[str, ...]
    assumptions: tuple[str, ...]
    currency: str

    @property
    def ranked(self) -> list[Row]:
        return [r for r in self.rows if r.rank is not None]

    @property
    def mixed_basis(self) -> bool:
        """The ranked rows are not all on the ranking's basis (your --profile of another): each row says its
        own."""
        return len({r.basis.short for r in self.ranked}) > 1

    def basis_text(self) -> str:
        return basis_text(self.request)

    def document(self) -> AdviceDocument:
        """``advise --json``."""
        rq = self.request
        a = rq.arch
        return AdviceDocument(
            model=AdvisedModel(name=a.name, source=a.source, params=a.params),
            workload=AdvisedWorkload(input_len=rq.input_len, output_len=rq.output_len,
                                     tokens_per_s_per_user=rq.interactivity, ttft_ms=rq.ttft_ms,
                                     concurrency=rq.concurrency, dtype=rq.kind),
            profile_tier=rq.tier,
            pricing_basis=RankingBasis(basis=rq.tier, text=self.basis_text(), mixed=self.mixed_basis),
            currency=self.currency,
            ranking=[r.document() for r in self.rows],
            baseline_order=list(self.baseline),
            criteria=[e.document() for e in self.effects],
            unanswered=[Question.of(k) for k in self.unanswered],
            assumptions=list(self.assumptions),
        )


def _priced_doc(p: Priced) -> PricedDoc:
    o = p.option
    per_gpu = None if o.output_tokens_per_s is None else o.output_tokens_per_s / o.devices
    return PricedDoc(
        devices=o.devices,
        fits=o.memory.fits,
        memory=o.memory,
        serves=o.serves,
        problem=o.problem,
        excluded_by=p.excluded,
        throughput=OptionThroughput(
            tokens_per_s_per_user=o.tokens_per_s_per_user,
            output_tokens_per_s=o.output_tokens_per_s,
            output_tokens_per_s_per_gpu=per_gpu,
            total_tokens_per_s=o.total_tokens_per_s,
            concurrency=o.concurrency,
            ttft_ms=o.ttft_ms,
            origin=o.origin,
            how=o.how,
        ),
        cost=p.cost.document() if p.cost is not None else None,
        setup_labour=SetupLabour.of(p.setup),
    )


# ---- the document (``advise --json``) ------------------------------------------------------------
class OptionThroughput(Doc):
    """What one deployment serves, and where the figures come from (estimate, published, derived)."""

    tokens_per_s_per_user: float | None
    output_tokens_per_s: float | None
    output_tokens_per_s_per_gpu: float | None
    total_tokens_per_s: float | None
    concurrency: float | None
    ttft_ms: float | None
    origin: str
    how: str


class PricedDoc(Doc):
    """One deployment of a GPU (``devices`` of it): its fit, what it serves, its price, or why not."""

    devices: int
    fits: bool
    memory: Memory
    serves: bool
    problem: str | None
    excluded_by: str | None
    throughput: OptionThroughput
    cost: PointCostDoc | None
    setup_labour: SetupLabour


class RowDoc(Doc):
    """One GPU of the ranking: its rank (None: not ranked, ``status`` says why), its best deployment and
    every one tried, the basis it is priced on, and why."""

    rank: int | None
    gpu: str
    name: str
    vendor: str
    status: str
    pricing_basis: PricingBasisDoc
    best: PricedDoc | None
    options: list[PricedDoc]
    why: list[str]


class Moved(Doc):
    gpu: str
    rank_before: int | None
    rank_after: int | None


class EffectDoc(Doc):
    """A criterion answered, and what it did to the ranking."""

    key: str
    question: str
    essay: str
    choices: str
    answer: str
    effect: str
    moved: list[Moved]


class Question(Doc):
    """A criterion the advisor asks (docs/advise.md), with the essay's words for it and its choices."""

    key: str
    question: str
    essay: str
    choices: str

    @classmethod
    def of(cls, key: str) -> Question:
        question, essay, choices = QUESTIONS[key]
        return cls(key=key, question=question, essay=essay, choices=choices)


class AdvisedModel(Doc):
    name: str
    source: str
    params: int
    origin: Literal["published config"] = "published config"


class AdvisedWorkload(Doc):
    input_len: int
    output_len: int
    tokens_per_s_per_user: float | None
    ttft_ms: float | None
    concurrency: int | None
    dtype: str


class RankingBasis(Doc):
    """The ranking's one pricing basis (``mixed``: a GPU you gave ``--profile`` is priced with it)."""

    basis: str
    default: str = DEFAULT_TIER
    text: str
    mixed: bool
    rule: str = ("one basis for the whole ranking: a GPU without a preset of it is not ranked (never priced "
                 "on another basis); a GPU you gave --profile is priced with it, its basis in its row")


class AdviceDocument(Doc):
    """``gpuledger advise --json``: every GPU ranked by its cost per 1M output tokens at your TCO, with the
    criteria's effects and every figure's origin."""

    advice: Literal[True] = True
    label: str = "ranked by cost per 1M output tokens at your TCO; every figure says where it is from"
    model: AdvisedModel
    workload: AdvisedWorkload
    profile_tier: str
    pricing_basis: RankingBasis
    currency: str
    ranking: list[RowDoc]
    baseline_order: list[str]
    criteria: list[EffectDoc]
    unanswered: list[Question]
    assumptions: list[str]
    html: str | None = None  # the HTML report written beside it (advise --html FILE)

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        if self.html is None:
            out.pop("html")
        return out


# ---- candidates and their prices -----------------------------------------------------------------
def candidates(rq: Request, catalog: Catalog) -> list[GpuSpec]:
    """The GPUs asked for, else every data-centre GPU with the peaks the roofline needs."""
    if rq.gpus:
        return [catalog.resolve(g) for g in dict.fromkeys(rq.gpus)]
    return [s for s in catalog if s.segment == "datacenter" and s.device_figure("bandwidth_tb_s").available
            and s.device_figure("fp16_tflops").available and s.device_figure("memory_gb").available]


def basis_text(rq: Request) -> str:
    """The ranking's pricing basis in words, saying when it is the default."""
    default = " (the default; --profile-tier to choose)" if rq.tier == DEFAULT_TIER else ""
    return f"{BASIS_WORDS[rq.tier]} — one basis for every GPU{default}"


def preset_name(key: str, tier: str) -> str:
    """The preset of GPU ``key`` on basis ``tier``: ``b200-own``, ``b200-rent``, ``b200-inferencex-rental``,
    ..."""
    found = next((t for t in TIERS if t == tier), None)
    return tier_name(key, found) if found is not None else f"{key}-{tier}"


def profile_for(rq: Request, spec: GpuSpec, presets: Mapping[str, CostProfile]) -> CostProfile | str:
    """The profile a GPU is priced with — yours, else the preset of the ranking's basis — or why it has none
    (a GPU without a preset of the basis is never priced on another)."""
    if spec.key in rq.profiles:
        return rq.profiles[spec.key]
    name = preset_name(spec.key, rq.tier)
    found = presets.get(name)
    if found is not None:
        return found
    others = [t for t in PROFILE_TIERS if t != rq.tier and preset_name(spec.key, t) in presets]
    hint = f"--profile-tier {' or '.join(others)}, or " if others else ""
    return (f"no {name} preset: the catalog has {_MISSING_PRICE[rq.tier]} for {spec.name}, so it is not "
            f"priced {BASIS_SHORT[rq.tier]} (never on another basis; {hint}--profile {spec.key}=FILE)")


def basis_for(rq: Request, spec: GpuSpec, profile: CostProfile | str) -> PricingBasis:
    """The pricing basis of ``spec``'s row."""
    if isinstance(profile, CostProfile) and spec.key in rq.profiles:
        key = "own" if profile.mode == "ownership" else "rent"
        words = "owned" if key == "own" else "rented"
        return PricingBasis(key, f"{words}: your profile {profile.name or '(unnamed)'} for {spec.name}",
                            profile.name, True)
    return PricingBasis(rq.tier, BASIS_WORDS[rq.tier],
                        profile.name if isinstance(profile, CostProfile) else None)


# ---- throughput of one deployment ----------------------------------------------------------------
def evaluate(rq: Request, spec: GpuSpec, devices: int, pool: EfficiencyPool,
             published: Sequence[RunInfo]) -> Option:
    """Fit and throughput of ``devices`` x ``spec`` (module docstring: in which order the sources)."""
    arch, i, o = rq.arch, rq.input_len, rq.output_len
    own = [(r, e, v) for r, e, v in pool.own if e.model == arch.name and v == spec.vendor]
    if own:
        eff = choose_efficiency(spec, own, [])
        source = f"roofline at {eff.text()} of {arch.name}: MBU {eff.label}"
    else:
        if rq.interactivity is not None and rq.concurrency is None:
            found = interpolate(points_for(published, arch, spec.key, i, o, rq.kind), rq.interactivity)
            if not isinstance(found, str):
                out = found.output_tokens_per_s_per_gpu * devices
                total = found.total_tokens_per_s_per_gpu * devices
                conc = max(1, math.ceil(out / found.tokens_per_s_per_user))
                mem = memory_of(arch, spec, devices, Workload(i, o, conc), rq.kind)
                problem = None if mem.fits else f"does not fit: {mem.reason}"
                return Option(spec, devices, mem, found.origin, found.how, found.tokens_per_s_per_user, out,
                              total, conc, None, problem)
        eff = pool.carried(spec)
        source = f"roofline at {eff.text()}: MBU {eff.label}"
    point = best_at_interactivity(arch, spec, devices, i, o, rq.kind, eff,
                                  min_tokens_per_s_per_user=rq.interactivity, max_ttft_ms=rq.ttft_ms,
                                  concurrency=rq.concurrency)
    if point is not None and point.at_floor:
        source += (f"; the decode step is the per-step overhead floor ({point.step_s * 1e3:.3g} ms), not the "
                   f"bandwidth bound ({point.memory_bound_s * 1e3:.3g} ms): the throughput is an upper bound")
    if point is None:
        one = memory_of(arch, spec, devices, Workload(i, o, 1), rq.kind)
        if not one.fits:
            return Option(spec, devices, one, "estimate", source, problem=f"does not fit: {one.reason}")
        want = []
        if rq.interactivity is not None:
            want.append(f"{rq.interactivity:g} tok/s/user")
        if rq.ttft_ms is not None:
            want.append(f"TTFT ≤ {rq.ttft_ms:g} ms")
        return Option(spec, devices, one, "estimate", source,
                      problem=f"too slow: even one sequence does not reach {' and '.join(want)} (estimate)")
    problem = None if point.memory.fits else f"does not fit: {point.memory.reason}"
    if problem is None and rq.interactivity is not None and point.tokens_per_s_per_user < rq.interactivity:
        problem = (f"too slow: {point.tokens_per_s_per_user:.3g} tok/s/user at {rq.concurrency} in flight "
                   "(estimate)")
    return Option(spec, devices, point.memory, "estimate", source, point.tokens_per_s_per_user,
                  point.output_tokens_per_s, point.total_tokens_per_s, float(point.workload.concurrency),
                  point.ttft_ms, problem)


# ---- ranking -------------------------------------------------------------------------------------
@dataclass(slots=True)
class _State:
    setup: dict[str, SetupHours]
    excluded: dict[str, str]  # GPU key or "key:devices" -> why


def _price(option: Option, profile: CostProfile | str, setup: SetupHours) -> Priced:
    if not option.serves or isinstance(profile, str) or option.output_tokens_per_s is None:
        return Priced(option, None, setup)
    cost = price_point(profile, option.spec, option.devices, option.output_tokens_per_s,
                       option.total_tokens_per_s or option.output_tokens_per_s, setup_hours=setup.hours,
                       setup_source=setup.source, rate_origin=option.origin)
    return Priced(option, cost, setup)


def _rows(options: Mapping[str, list[Option]], profiles: Mapping[str, CostProfile | str],
          specs: Sequence[GpuSpec], state: _State, bases: Mapping[str, PricingBasis]) -> list[Row]:
    rows: list[Row] = []
    for spec in specs:
        profile = profiles[spec.key]
        setup = state.setup[spec.vendor]
        priced = []
        for opt in options[spec.key]:
            p = _price(opt, profile, setup)
            why = state.excluded.get(spec.key) or state.excluded.get(f"{spec.key}:{opt.devices}")
            priced.append(replace(p, excluded=why) if why else p)
        ok = [p for p in priced if p.cost is not None and p.excluded is None]
        # The fewest GPUs that serve it: more would be replicas of it, at the same cost per token (the
        # ideal roofline would favour ever larger tensor-parallel groups, whose communication it ignores).
        best = min(ok, key=lambda p: p.option.devices) if ok else None
        why_lines: tuple[str, ...] = ()
        if best is not None:
            status, why_lines = "ranked", _why(best, priced)
        elif isinstance(profile, str):
            status = f"not priced: {profile}"
        elif any(p.excluded for p in priced if p.cost is not None):
            first = next(p for p in priced if p.excluded)
            status = f"excluded: {first.excluded}"
        else:
            status = "no deployment of 1-8 GPUs serves the workload"
            why_lines = tuple(f"{p.option.devices} GPU(s): {p.option.problem}"
                              for p in priced if p.option.problem)
        rows.append(Row(spec, None, best, tuple(priced), status, why_lines, bases[spec.key]))
    ranked = sorted((r for r in rows if r.best is not None), key=lambda r: r.best.per_1m if r.best else 0.0)
    order = {r.spec.key: n for n, r in enumerate(ranked, start=1)}
    out = [replace(r, rank=order.get(r.spec.key)) for r in rows]
    return sorted(out, key=lambda r: (r.rank is None, r.rank or 0, r.spec.key))


def _why(best: Priced, priced: Sequence[Priced]) -> tuple[str, ...]:
    o = best.option
    lines = [f"{o.devices} GPU(s): {o.memory.reason}"]
    smaller = [p for p in priced if p.option.devices < o.devices and p.option.problem]
    if smaller:
        lines.append(f"fewer GPUs: {smaller[-1].option.problem}")
    lines.append(f"throughput ({o.origin}): {o.how}")
    if best.cost is not None:
        h = best.cost.hourly
        cur = best.cost.profile.currency
        lines.append(f"setup {best.setup.hours:g} h ({best.setup.origin}) amortised: labour {h.labour:.3g} "
                     f"of {h.total:.3g} {cur}/h; profile {best.cost.profile.name}")
    return tuple(lines)


def _order(rows: Sequence[Row]) -> dict[str, int | None]:
    return {r.spec.key: r.rank for r in rows}


def _moved(before: Sequence[Row], after: Sequence[Row]) -> tuple[tuple[str, int | None, int | None], ...]:
    b, a = _order(before), _order(after)
    names = {r.spec.key: r.spec.name for r in after}
    return tuple((names[k], b[k], a[k]) for k in a if a[k] != b.get(k))


def _apply(key: str, answers: Answers, rq: Request, specs: Sequence[GpuSpec], state: _State,
           profiles: Mapping[str, CostProfile | str]) -> str:
    """Change ``state`` by one answered criterion; returns what it did."""
    if key == "framework":
        fw = answers.framework
        if fw in NVIDIA_ONLY:
            for s in specs:
                if s.vendor != "nvidia":
                    state.excluded[s.key] = f"{fw} runs on NVIDIA only (framework)"
            return f"{fw} runs on NVIDIA GPUs only: AMD GPUs are not ranked"
        return f"{fw} runs on both vendors' GPUs (ROCm builds): nothing removed"
    if key == "team":
        team = answers.team
        amd, nvidia = state.setup.get("amd"), state.setup.get("nvidia")
        if team in ("rocm", "both") and amd is not None and nvidia is not None:
            if amd.origin != "essay example":
                return f"the team knows ROCm; the AMD setup hours are {amd.origin} ({amd.hours:g} h): kept"
            why = (f"team knows ROCm: the essay's two-week ROCm setup replaced by the NVIDIA setup "
                   f"({nvidia.hours:g} h)")
            state.setup["amd"] = SetupHours(nvidia.hours, why, "team answer")
            return f"the team has run ROCm before: AMD setup {amd.hours:g} h → {nvidia.hours:g} h"
        return f"team {team}: the essay's example (an afternoon on CUDA, two weeks on ROCm) stands"
    if key == "time_to_production_days":
        days = answers.time_to_production_days or 0.0
        hit = []
        for s in specs:
            need = state.setup[s.vendor].hours / WORKDAY_HOURS
            if need > days:
                state.excluded[s.key] = f"setup takes {need:.3g} working days, more than your {days:g}"
                hit.append(s.name)
        return (f"deployments whose setup takes more than {days:g} working days are not ranked"
                + (f" ({', '.join(hit)})" if hit else ""))
    if key == "memory_gb":
        need = answers.memory_gb or 0.0
        for s in specs:
            mem = s.device_figure("memory_gb").value or 0.0
            for n in rq.gpu_counts:
                if n * mem < need:
                    state.excluded[f"{s.key}:{n}"] = f"{n} x {mem:g} GB < the {need:g} GB you need"
        return f"deployments with less than {need:g} GB of GPU memory together are not ranked"
    if key == "budget_per_hour":
        budget = answers.budget_per_hour or 0.0
        for s in specs:
            prof = profiles[s.key]
            if isinstance(prof, str):
                continue
            for n in rq.gpu_counts:
                # The hourly cost a ranked row shows (its power at the profile's utilisation, host and idle
                # power included): the rate served does not enter it.
                setup = state.setup[s.vendor]
                try:
                    h = price_point(prof, s, n, 1.0, 1.0, setup_hours=setup.hours, setup_source=setup.source,
                                    rate_origin="estimate").hourly
                except InvalidInputError:
                    continue  # no TDP to price: the row says so where it is priced
                if h.total > budget:
                    state.excluded[f"{s.key}:{n}"] = (
                        f"{n} GPU(s) cost {h.total:.3g} {prof.currency}/h, over your {budget:g}"
                    )
        return f"deployments over {budget:g} per hour are not ranked"
    raise InvalidInputError(f"unknown criterion {key!r}")


def advise(
    rq: Request,
    pool: EfficiencyPool,
    published: Sequence[RunInfo],
    *,
    catalog: Catalog | None = None,
    doctor_records: Sequence[DoctorRunRecord] | None = None,
) -> Advice:
    """Rank the candidate GPUs for ``rq`` (module docstring)."""
    cat = catalog if catalog is not None else load_catalog()
    specs = candidates(rq, cat)
    if not specs:
        raise InvalidInputError("no candidate GPU: none in the catalog has the figures the roofline needs")
    presets = builtin_presets(cat)
    profiles = {s.key: profile_for(rq, s, presets) for s in specs}
    bases = {s.key: basis_for(rq, s, profiles[s.key]) for s in specs}
    currencies = {p.currency for p in profiles.values() if not isinstance(p, str)}
    if len(currencies) > 1:
        raise InvalidInputError(
            f"the profiles are in {', '.join(sorted(currencies))}: give them in one currency to rank them"
        )
    options = {s.key: [evaluate(rq, s, n, pool, published) for n in rq.gpu_counts] for s in specs}
    vendors = {s.vendor for s in specs} | {"nvidia", "amd"}
    state = _State({v: setup_hours_for(v, rq.setup_hours, doctor_records) for v in vendors}, {})
    rows = _rows(options, profiles, specs, state, bases)
    baseline = tuple(r.spec.key for r in rows if r.rank is not None)
    effects = []
    given = rq.answers.model_dump(exclude_none=True)
    for key in QUESTIONS:
        if key not in given:
            continue
        effect = _apply(key, rq.answers, rq, specs, state, profiles)
        after = _rows(options, profiles, specs, state, bases)
        effects.append(Effect(key, str(given[key]), effect, _moved(rows, after)))
        rows = after
    assumptions = (
        "one deployment of N GPUs serves one replica (tensor parallel); throughput and memory as the "
        "roofline or the published points say (docs/advise.md)",
        "ranked by the cost per 1M output tokens of each GPU's smallest deployment that serves the workload "
        "(a larger one is replicas of it: the same cost per token)",
        f"pricing basis: {basis_text(rq)}; a GPU without a preset of that basis is not ranked "
        "(never priced on another basis)",
    )
    return Advice(rq, tuple(rows), baseline, tuple(effects),
                  tuple(k for k in QUESTIONS if k not in given), assumptions,
                  currencies.pop() if currencies else "USD")
