"""Like for like: what differs between two runs in ways that change their ratio, each with both sides and why
it matters — or "like for like" when nothing does (the seed essay's §1.2: a "5x" of a 2024 part on FP4
against a 2023 part on FP8 is not one number about two vendors).

The aspects, each read from what the runs recorded (a measured run's spec, server and telemetry; a published
point's columns) and the catalog:

- **generation**: the GPUs' architecture and launch year (``data/gpu_catalog.yaml``); parts launched in
  different years (or two architectures of one vendor) are a generation apart;
- **precision**: the weights' dtype (fp8, fp4, bf16 ...);
- **model**: the model served (a known architecture's name, else the name as recorded);
- **workload**: the mean input and output tokens of a request (5 % apart or more), or the same dataset;
- **scenario**: how the load was offered (MLPerf's offline / server / interactive, a published interactivity
  target, a measured run's concurrency or sweep stage);
- **framework**: the serving stack and its version — expected to differ between two vendors (each runs its
  own), and still part of what the ratio measures;
- **submitter**: who ran it (the GPU's vendor, a third party, or you);
- **devices**: how many GPUs produced the rates;
- **accuracy target** and **division** (MLPerf's), when a side publishes them;
- **price basis**: owned, rented or a publisher's tier, from the cost profiles of the comparison (only when
  profiles are given: a throughput ratio has no price).

An aspect one side does not record is listed as ``unknown`` (it may or may not differ); like for like means
no difference and nothing unknown, apart from the expected one (each vendor's own stack).
``closest_like_for_like`` finds, among stored runs, the pair of the headline pair's two vendors that is most
nearly like for like, and its throughput ratio.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gpuledger.catalog import Catalog, GpuSpec, load_catalog, normalise_dtype
from gpuledger.cost.pricing.modelarch import find_known
from gpuledger.cost.pricing.operating import operating_point
from gpuledger.cost.pricing.profile import CostProfile
from gpuledger.cost.pricing.runview import gpu_devices
from gpuledger.kinds.text.published import PublishedSummary
from gpuledger.kinds.text.summary import TextGenerationSummary
from gpuledger.records import RunInfo, RunSummary

Aspect = Literal["generation", "precision", "model", "workload", "scenario", "framework", "submitter",
                 "devices", "accuracy target", "division", "price basis"]
Status = Literal["differs", "unknown"]
LENGTH_TOLERANCE = 0.05  # mean lengths this far apart (relative) are another workload
LIKE_FOR_LIKE = "like for like"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Difference(_Model):
    """One aspect in which the two runs are not the same (or not known to be), with both sides."""

    aspect: Aspect
    status: Status
    a: str = Field(max_length=500)
    b: str = Field(max_length=500)
    why: str = Field(max_length=1_000)
    expected: bool = False  # part of what a cross-vendor comparison measures (each vendor's own stack)


class Likeness(_Model):
    """What differs between runs ``a`` and ``b`` (``differences``), and whether they are like for like."""

    a: str
    b: str
    differences: list[Difference] = Field(default_factory=list)
    like_for_like: bool
    summary: str = Field(max_length=2_000)

    def differs(self, aspect: Aspect) -> Difference | None:
        return next((d for d in self.differences if d.aspect == aspect and d.status == "differs"), None)

    @property
    def counted(self) -> list[Difference]:
        """The differences that make the pair not like for like (all but the expected ones)."""
        return [d for d in self.differences if not d.expected]


# ---- what one run was -------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Known:
    """An aspect's value on one side: ``text`` to show, ``key`` to compare (None: not known, ``text`` why).
    ``assumed``: gpuledger's assumption for a run that does not record it (two runs on the same assumption
    are alike; against a recorded value it is unknown)."""

    text: str
    key: object | None
    assumed: bool = False


def _unknown(why: str) -> _Known:
    return _Known(why, None)


def _summary(run: RunInfo) -> RunSummary | None:
    op = operating_point(run)
    return op.summary if op is not None else run.summary


def _gpu(run: RunInfo, summary: RunSummary | None, cat: Catalog) -> tuple[GpuSpec | None, int | None, str]:
    origin = summary.origin() if summary is not None else None
    if origin is not None and origin.gpu:
        spec = cat.find(origin.gpu)
        return spec, origin.gpus, "" if spec is not None else f"{origin.gpu!r} is not in the GPU catalog"
    used, _ = gpu_devices(run)
    if not used:
        return None, None, "no GPU recorded (no telemetry of the devices that served it)"
    name = sorted({d.name for d in used})[0]
    spec = cat.find(name)
    return spec, len(used), "" if spec is not None else f"{name!r} is not in the GPU catalog"


def _generation(spec: GpuSpec | None, why: str) -> _Known:
    if spec is None:
        return _unknown(why or "GPU not known")
    arch, year = spec.fact("architecture"), spec.fact("launch_year")
    if year.value is None:
        return _unknown(f"{spec.name}: {year.reason}")
    return _Known(f"{spec.name}: {arch.text()}, {year.text()}", (spec.vendor, arch.value, year.value))


def _precision(run: RunInfo, summary: RunSummary | None) -> _Known:
    if isinstance(summary, PublishedSummary):
        if summary.precision:
            kind = normalise_dtype(summary.precision)
            return _Known(summary.precision, kind or summary.precision.lower())
        return _unknown("not published")
    value = run.config.precision()
    if value:
        kind = normalise_dtype(value)
        return _Known(value, kind or value.lower())
    arch = find_known(run.model)
    if arch is not None and arch.dtype:
        return _Known(f"{arch.dtype} (the model's config)", arch.dtype)
    return _Known("not recorded by the run (16-bit assumed)", "16-bit assumed", assumed=True)


def _norm(text: str) -> str:
    text = text.strip().lower().split("/")[-1]
    return re.sub(r"[^a-z0-9.]+", "", text)


def _model(run: RunInfo) -> _Known:
    if not run.model.strip():
        return _unknown("not recorded")
    arch = find_known(run.model)
    return _Known(run.model, arch.name if arch is not None else _norm(run.model))


def _lengths(summary: RunSummary | None) -> tuple[float | None, float | None, str | None]:
    """(mean input tokens, mean output tokens, the dataset when named)."""
    if isinstance(summary, PublishedSummary):
        i = float(summary.input_len) if summary.input_len is not None else None
        return i, float(summary.output_len), summary.dataset
    if isinstance(summary, TextGenerationSummary) and summary.num_ok:
        return summary.input_tokens_total / summary.num_ok, summary.output_tokens_total / summary.num_ok, None
    return None, None, None


def _scenario(run: RunInfo, summary: RunSummary | None) -> _Known:
    if isinstance(summary, PublishedSummary):
        s = summary
        if s.scenario is not None:
            limits = ""
            if s.scenario != "offline" and s.ttft_ms is not None and s.tpot_ms is not None:
                limits = f" (mean TTFT {s.ttft_ms:.4g} ms, TPOT {s.tpot_ms:.4g} ms)"
            return _Known(f"{s.scenario}{limits}", s.scenario)
        if s.tokens_per_s_per_user is not None:
            return _Known(f"at {s.tokens_per_s_per_user:g} tok/s per user",
                          ("interactivity", s.tokens_per_s_per_user))
        if s.concurrency is not None:
            return _Known(f"{s.concurrency} concurrent requests", ("concurrency", s.concurrency))
        return _unknown("the point publishes no scenario, interactivity or concurrency")
    params = summary.stage_params() if summary is not None else {}
    conc = params.get("concurrency") if isinstance(params.get("concurrency"), int) else None
    conc = conc or run.config.fixed_concurrency()
    if conc:
        return _Known(f"{conc} concurrent requests (measured)", ("concurrency", conc))
    rate = params.get("rate_requests_per_s")
    if isinstance(rate, int | float):
        return _Known(f"{rate:g} requests/s (measured)", ("rate", float(rate)))
    return _unknown("the run's load is not one fixed concurrency or rate")


def _framework(run: RunInfo, summary: RunSummary | None) -> _Known:
    if isinstance(summary, PublishedSummary):
        if not summary.framework:
            return _unknown("not published")
        version = summary.framework_version
        text = summary.framework + (f" {version}" if version else "")
        return _Known(text, (summary.framework.lower(), version))
    server = run.server or {}
    kind, version = server.get("kind"), server.get("version")
    if isinstance(kind, str) and kind:
        v = version if isinstance(version, str) and version else None
        return _Known(kind + (f" {v}" if v else ""), (kind.lower(), v))
    if run.engine:
        return _Known(run.engine, (run.engine.lower(), None))
    return _unknown("not recorded")


def _submitter(summary: RunSummary | None) -> _Known:
    origin = summary.origin() if summary is not None else None
    if origin is None:
        return _Known("you (measured here)", ("you",))
    if isinstance(summary, PublishedSummary) and summary.submitter:
        role = summary.submitter_role or "role not published"
        return _Known(f"{summary.submitter} ({role})", (summary.submitter_role, summary.submitter.lower()))
    return _Known(f"{origin.source} (the publisher; third party)", ("third party", origin.source.lower()))


def _price_basis(profile: CostProfile) -> _Known:
    tier = re.search(r"-inferencex-(hyperscaler|neocloud|rental)$", profile.name)
    if tier:
        return _Known(f"publisher tier: InferenceX {tier.group(1)} ({profile.name})", ("tier", tier.group(1)))
    if profile.name.endswith("-inferencex"):
        return _Known(f"publisher tier: InferenceX neocloud ({profile.name})", ("tier", "neocloud"))
    mode = "rented" if profile.mode == "rental" else "owned"
    return _Known(f"{mode} ({profile.name or 'a profile file'})", (mode,))


def _published(summary: RunSummary | None, name: str) -> _Known | None:
    """A published-only aspect (accuracy target, division): None when the point does not have it."""
    if not isinstance(summary, PublishedSummary):
        return None
    value = getattr(summary, name)
    return _Known(str(value), value) if value is not None else None


# ---- comparing ------------------------------------------------------------------------------------
WHY: dict[Aspect, str] = {
    "generation": "parts of different generations: the ratio includes the years of hardware progress between "
                  "them, not only the vendor",
    "precision": "fewer bytes per weight read per decode step, and a faster peak at that precision: the "
                 "ratio includes the precision's speed-up",
    "model": "another model is other work per token: the ratio is not one workload's",
    "workload": "other prompt and answer lengths shift the share of prefill and the KV cache read per step",
    "scenario": "another load point (offline throughput, latency-bound serving, an interactivity target) "
                "allows other batching: the ratio depends on it",
    "framework": "the serving stack sets how much of the hardware's peak is used (MBU/MFU)",
    "submitter": "who tuned each side: a vendor on its own hardware, a third party, or you",
    "devices": "rates of all the point's GPUs together: other device counts scale them",
    "accuracy target": "a looser accuracy target allows cheaper precision or shortcuts",
    "division": "MLPerf's open division allows other models and methods than the closed one",
    "price basis": "owned, rented or a publisher's tier price the same hours differently",
}


def _compare(aspect: Aspect, a: _Known | None, b: _Known | None, out: list[Difference], *,
             expected: bool = False, why: str | None = None) -> None:
    if a is None and b is None:
        return
    ta = a.text if a is not None else "not published"
    tb = b.text if b is not None else "not published"
    if a is None or b is None or a.key is None or b.key is None or (
            (a.assumed or b.assumed) and a.key != b.key):
        out.append(Difference(aspect=aspect, status="unknown", a=ta, b=tb,
                              why=f"not known for both runs: {WHY[aspect]}"))
        return
    if a.key != b.key:
        out.append(Difference(aspect=aspect, status="differs", a=ta, b=tb, why=why or WHY[aspect],
                              expected=expected))


def _generation_diff(a: _Known, b: _Known, out: list[Difference]) -> None:
    if a.key is None or b.key is None:
        _compare("generation", a, b, out)
        return
    assert isinstance(a.key, tuple) and isinstance(b.key, tuple)
    (va, arch_a, ya), (vb, arch_b, yb) = a.key, b.key
    if ya != yb:
        gap = abs(int(ya) - int(yb))
        out.append(Difference(aspect="generation", status="differs", a=a.text, b=b.text,
                              why=f"launched {gap} year{'s' if gap > 1 else ''} apart: {WHY['generation']}"))
    elif va == vb and arch_a != arch_b:
        out.append(Difference(aspect="generation", status="differs", a=a.text, b=b.text,
                              why=f"two architectures of one vendor: {WHY['generation']}"))


def _workload_diff(sa: RunSummary | None, sb: RunSummary | None, out: list[Difference]) -> None:
    ia, oa, da = _lengths(sa)
    ib, ob, db = _lengths(sb)

    def text(i: float | None, o: float | None, d: str | None) -> str:
        parts = [f"{i:.0f} in" if i is not None else "input length not published",
                 f"{o:.0f} out" if o is not None else "output length unknown"]
        return " / ".join(parts) + (f" tokens per request ({d})" if d else " tokens per request")

    ta, tb = text(ia, oa, da), text(ib, ob, db)
    if oa is None or ob is None:
        out.append(Difference(aspect="workload", status="unknown", a=ta, b=tb,
                              why=f"not known for both runs: {WHY['workload']}"))
        return

    def apart(x: float, y: float) -> bool:
        return abs(x - y) / max(x, y) > LENGTH_TOLERANCE

    same_dataset = da is not None and da == db
    if ia is None or ib is None:
        if not same_dataset:
            out.append(Difference(aspect="workload", status="unknown", a=ta, b=tb,
                                  why="input lengths not known for both (and not one dataset): "
                                      + WHY["workload"]))
            return
        if apart(oa, ob):
            out.append(Difference(aspect="workload", status="differs", a=ta, b=tb, why=WHY["workload"]))
        return
    if apart(ia, ib) or apart(oa, ob):
        out.append(Difference(aspect="workload", status="differs", a=ta, b=tb, why=WHY["workload"]))


def likeness(
    a: RunInfo,
    b: RunInfo,
    *,
    profile_a: CostProfile | None = None,
    profile_b: CostProfile | None = None,
    catalog: Catalog | None = None,
) -> Likeness:
    """The differences between ``a`` and ``b`` that change their ratio (module docstring); the price basis
    is compared when both profiles are given."""
    cat = catalog if catalog is not None else load_catalog()
    sa, sb = _summary(a), _summary(b)
    spec_a, n_a, why_a = _gpu(a, sa, cat)
    spec_b, n_b, why_b = _gpu(b, sb, cat)
    out: list[Difference] = []
    _generation_diff(_generation(spec_a, why_a), _generation(spec_b, why_b), out)
    _compare("precision", _precision(a, sa), _precision(b, sb), out)
    _compare("model", _model(a), _model(b), out)
    _workload_diff(sa, sb, out)
    _compare("scenario", _scenario(a, sa), _scenario(b, sb), out)
    other_vendors = spec_a is not None and spec_b is not None and spec_a.vendor != spec_b.vendor
    _compare("framework", _framework(a, sa), _framework(b, sb), out, expected=other_vendors,
             why=(f"each vendor's own serving stack: {WHY['framework']} — part of what a cross-vendor ratio "
                  "measures (the software share of the gap)") if other_vendors else None)
    sub_a, sub_b = _submitter(sa), _submitter(sb)
    both_vendors = (isinstance(sub_a.key, tuple) and isinstance(sub_b.key, tuple)
                    and sub_a.key[0] == sub_b.key[0] == "vendor" and other_vendors)
    if not both_vendors:  # each vendor on its own hardware is the same kind of submission
        _compare("submitter", sub_a, sub_b, out)
    _compare("devices", _Known(f"{n_a} GPU(s)", n_a) if n_a else _unknown(why_a or "not recorded"),
             _Known(f"{n_b} GPU(s)", n_b) if n_b else _unknown(why_b or "not recorded"), out)
    _compare("accuracy target", _published(sa, "accuracy_target"), _published(sb, "accuracy_target"), out)
    _compare("division", _published(sa, "division"), _published(sb, "division"), out)
    if profile_a is not None and profile_b is not None:
        _compare("price basis", _price_basis(profile_a), _price_basis(profile_b), out)
    counted = [d for d in out if not d.expected]
    like = not counted
    if like:
        text = LIKE_FOR_LIKE + "".join(
            f" (apart from each vendor's own {d.aspect}: {d.a} vs {d.b})" for d in out if d.expected)
    else:
        text = f"not like for like: {len(counted)} difference{'s' if len(counted) > 1 else ''} (" + ", ".join(
            f"{d.aspect}{'?' if d.status == 'unknown' else ''}" for d in counted) + ")"
    return Likeness(a=a.id, b=b.id, differences=out, like_for_like=like, summary=text)


# ---- the closest like-for-like pair ---------------------------------------------------------------
class ClosestPair(_Model):
    """The stored pair most nearly like for like of the headline pair's two vendors, and its ratio."""

    headline_a: str
    headline_b: str
    a: str
    b: str
    label_a: str
    label_b: str
    likeness: Likeness
    throughput_ratio_per_gpu: float = Field(gt=0)
    rate_unit: str = "output tok/s per GPU"
    away_from_headline: int = Field(ge=0)
    why: str = Field(max_length=2_000)


def _per_gpu(run: RunInfo, cat: Catalog) -> float | None:
    s = _summary(run)
    rate = s.rate("output_token") if s is not None else None
    _, n, _ = _gpu(run, s, cat)
    if not rate or rate <= 0 or not n:
        return None
    return rate / n


def _vendor(run: RunInfo, cat: Catalog) -> str | None:
    spec, _, _ = _gpu(run, _summary(run), cat)
    return spec.vendor if spec is not None else None


def closest_like_for_like(
    pair: tuple[RunInfo, RunInfo],
    candidates: Sequence[RunInfo],
    *,
    catalog: Catalog | None = None,
) -> ClosestPair | None:
    """Among ``candidates`` (stored runs), the pair (A on the headline A's vendor, B on B's) with the fewest
    differences between its two sides — nothing unknown first — and then the fewest from the headline pair
    (each side against the headline's side of its vendor); its output tokens per second per GPU, A ÷ B. None
    when no candidate pair has both vendors."""
    cat = catalog if catalog is not None else load_catalog()
    head_a, head_b = pair
    va, vb = _vendor(head_a, cat), _vendor(head_b, cat)
    if va is None or vb is None:
        return None
    skip = {head_a.id, head_b.id}
    side_a = [r for r in candidates if r.id not in skip and _vendor(r, cat) == va and _per_gpu(r, cat)]
    side_b = [r for r in candidates if r.id not in skip and _vendor(r, cat) == vb and _per_gpu(r, cat)]
    best: tuple[tuple[int, int, int, str, str], RunInfo, RunInfo, Likeness, int] | None = None
    away_a = {r.id: len(likeness(head_a, r, catalog=cat).counted) for r in side_a}
    away_b = {r.id: len(likeness(head_b, r, catalog=cat).counted) for r in side_b}
    for x in side_a:
        for y in side_b:
            if x.id == y.id:
                continue
            like = likeness(x, y, catalog=cat)
            unknown = sum(1 for d in like.counted if d.status == "unknown")
            away = away_a[x.id] + away_b[y.id]
            key = (len(like.counted), unknown, away, x.id, y.id)
            if best is None or key < best[0]:
                best = (key, x, y, like, away)
    if best is None:
        return None
    _, x, y, like, away = best
    ra, rb = _per_gpu(x, cat), _per_gpu(y, cat)
    assert ra is not None and rb is not None
    why = (f"of {len(side_a)} x {len(side_b)} stored pairs of the two vendors, the one with the fewest "
           f"differences between its sides ({like.summary}), then the fewest from the headline pair ({away})")
    return ClosestPair(headline_a=head_a.id, headline_b=head_b.id, a=x.id, b=y.id, label_a=x.label or x.id,
                       label_b=y.label or y.id, likeness=like, throughput_ratio_per_gpu=ra / rb,
                       away_from_headline=away, why=why)
