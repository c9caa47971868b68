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
from gpuledger.cost.pricing.modelarch import ModelArch, find_known
from gpuledger.cost.pricing.operating import operating_point
from gpuledger.cost.pricing.profile import CostProfile
from gpuledger.cost.pricing.runview import cpu_device, cpu_threads, gpu_devices
from gpuledger.errors import GpuledgerError
from gpuledger.kinds.text.published import PublishedSummary
from gpuledger.kinds.text.summary import TextGenerationSummary
from gpuledger.records import RunInfo, RunSummary

Aspect = Literal["generation", "precision", "model", "workload", "scenario", "framework", "submitter",
                 "devices", "accuracy target", "division", "price basis"]
Status = Literal["differs", "unknown"]
LENGTH_TOLERANCE = 0.05  # mean lengths this far apart (relative) are another workload
LIKE_FOR_LIKE = "like for like"
VENDOR_NAMES = {"nvidia": "NVIDIA", "amd": "AMD", "intel": "Intel"}


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


class _Lookup:
    """The catalog's GPU and the known model architecture of a name, each looked up once."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self._gpus: dict[str, GpuSpec | None] = {}
        self._archs: dict[str, ModelArch | None] = {}

    def gpu(self, name: str) -> GpuSpec | None:
        if name not in self._gpus:
            self._gpus[name] = self.catalog.find(name)
        return self._gpus[name]

    def arch(self, model: str) -> ModelArch | None:
        if model not in self._archs:
            self._archs[model] = find_known(model)
        return self._archs[model]


def _summary(run: RunInfo) -> RunSummary | None:
    op = operating_point(run)
    return op.summary if op is not None else run.summary


@dataclass(frozen=True, slots=True)
class _Hardware:
    """What served the run: its catalog GPU and how many (None: not known, ``why``), or its CPU."""

    spec: GpuSpec | None
    count: int | None
    why: str
    cpu: str | None = None  # the CPU's name, for a run served by its host's CPU
    cpu_threads: int | None = None


def _gpu(run: RunInfo, summary: RunSummary | None, look: _Lookup) -> _Hardware:
    origin = summary.origin() if summary is not None else None
    if origin is not None and origin.gpu:
        spec = look.gpu(origin.gpu)
        why = "" if spec is not None else f"{origin.gpu!r} is not in the GPU catalog"
        return _Hardware(spec, origin.gpus, why)
    used, _ = gpu_devices(run)
    if not used:
        cpu = cpu_device(run) if origin is None else None
        if cpu is not None:  # served by its host's CPU (as cost prices it)
            host = run.environment.cpu.model if run.environment.cpu is not None else None
            return _Hardware(None, None, "", cpu.name or host or "a CPU", cpu_threads(run))
        return _Hardware(None, None, "no GPU recorded (no telemetry of the devices that served it)")
    name = sorted({d.name for d in used})[0]
    spec = look.gpu(name)
    return _Hardware(spec, len(used), "" if spec is not None else f"{name!r} is not in the GPU catalog")


def _generation(hw: _Hardware) -> _Known:
    if hw.cpu is not None:
        return _Known(f"CPU: {hw.cpu} (no GPU)", ("cpu", hw.cpu))
    spec = hw.spec
    if spec is None:
        return _unknown(hw.why or "GPU not known")
    arch, year = spec.fact("architecture"), spec.fact("launch_year")
    if year.value is None:
        return _unknown(f"{spec.name}: {year.reason}")
    return _Known(f"{spec.name}: {arch.text()}, {year.text()}", (spec.vendor, arch.value, year.value))


def _devices(hw: _Hardware) -> _Known:
    if hw.cpu is not None:
        threads = f" ({hw.cpu_threads} logical CPUs)" if hw.cpu_threads else ""
        return _Known(f"the host's CPU{threads}", ("cpu", hw.cpu_threads))
    if hw.count:
        return _Known(f"{hw.count} GPU(s)", hw.count)
    return _unknown(hw.why or "not recorded")


def _precision(run: RunInfo, summary: RunSummary | None, look: _Lookup) -> _Known:
    if isinstance(summary, PublishedSummary):
        if summary.precision:
            kind = normalise_dtype(summary.precision)
            return _Known(summary.precision, kind or summary.precision.lower())
        return _unknown("not published")
    value = run.config.precision()
    if value:
        kind = normalise_dtype(value)
        return _Known(value, kind or value.lower())
    arch = look.arch(run.model)
    if arch is not None and arch.dtype:
        return _Known(f"{arch.dtype} (the model's config)", arch.dtype)
    return _Known("not recorded by the run (16-bit assumed)", "16-bit assumed", assumed=True)


def _norm(text: str) -> str:
    text = text.strip().lower().split("/")[-1]
    return re.sub(r"[^a-z0-9.]+", "", text)


def _model(run: RunInfo, look: _Lookup) -> _Known:
    if not run.model.strip():
        return _unknown("not recorded")
    arch = look.arch(run.model)
    return _Known(run.model, arch.name if arch is not None else _norm(run.model))


def _is_text(summary: RunSummary | None) -> bool:
    return isinstance(summary, PublishedSummary | TextGenerationSummary)


@dataclass(frozen=True, slots=True)
class _Work:
    """The size of a unit of the run's work: a text run's mean input and output tokens per request (and
    its dataset, when named); another kind's sizes per item (``SIZE_UNITS``: tokens per step, ...)."""

    text: bool
    kind: str
    input_len: float | None = None
    output_len: float | None = None
    dataset: str | None = None
    sizes: tuple[tuple[str, str, float], ...] = ()  # (what, per, mean) of each size unit the run counted


def _work(summary: RunSummary | None) -> _Work:
    if isinstance(summary, PublishedSummary):
        i = float(summary.input_len) if summary.input_len is not None else None
        return _Work(True, summary.kind, i, float(summary.output_len), summary.dataset)
    if isinstance(summary, TextGenerationSummary):
        if not summary.num_ok:
            return _Work(True, summary.kind)
        return _Work(True, summary.kind, summary.input_tokens_total / summary.num_ok,
                     summary.output_tokens_total / summary.num_ok)
    if summary is None or not summary.num_ok:
        return _Work(False, summary.kind if summary is not None else "")
    work = summary.work()
    sizes = tuple((what, per, w.count / summary.num_ok) for unit, what, per in summary.SIZE_UNITS
                  if (w := work.get(unit)) is not None)
    return _Work(False, summary.kind, sizes=sizes)


def _scenario(run: RunInfo, summary: RunSummary | None) -> _Known | None:
    """How the load was offered; None for a kind of work without one (a training run) that records none."""
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
    if not _is_text(summary):
        return None
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


@dataclass(frozen=True, slots=True)
class _Facts:
    """What one run was, aspect by aspect (read once: ``closest_like_for_like`` compares every pair)."""

    id: str
    label: str
    vendor: str | None
    per_gpu: float | None  # output tokens per second per GPU
    generation: _Known
    precision: _Known
    model: _Known
    work: _Work
    scenario: _Known | None
    framework: _Known
    submitter: _Known
    devices: _Known
    accuracy: _Known | None
    division: _Known | None


def _facts(run: RunInfo, look: _Lookup, summary: RunSummary | None = None) -> _Facts:
    s = summary if summary is not None else _summary(run)
    hw = _gpu(run, s, look)
    rate = s.rate("output_token") if s is not None else None
    per_gpu = rate / hw.count if rate and rate > 0 and hw.count else None
    return _Facts(
        id=run.id, label=run.label or run.id, vendor=hw.spec.vendor if hw.spec is not None else None,
        per_gpu=per_gpu, generation=_generation(hw), precision=_precision(run, s, look),
        model=_model(run, look), work=_work(s), scenario=_scenario(run, s), framework=_framework(run, s),
        submitter=_submitter(s),
        devices=_devices(hw), accuracy=_published(s, "accuracy_target"), division=_published(s, "division"),
    )


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


@dataclass(frozen=True, slots=True)
class _Diff:
    """A ``Difference`` before it is one (the closest pair's search weighs many pairs, keeps one)."""

    aspect: Aspect
    status: Status
    a: str
    b: str
    why: str
    expected: bool = False

    def model(self) -> Difference:
        return Difference(aspect=self.aspect, status=self.status, a=self.a, b=self.b, why=self.why,
                          expected=self.expected)


WORK_WHY = ("another size of a unit of work (a step, a batch) is other work per unit: the ratio is not one "
            "workload's")


def _compare(aspect: Aspect, a: _Known | None, b: _Known | None, out: list[_Diff], *,
             expected: bool = False, why: str | None = None) -> None:
    if a is None and b is None:
        return
    ta = a.text if a is not None else "not published"
    tb = b.text if b is not None else "not published"
    if a is None or b is None or a.key is None or b.key is None or (
            (a.assumed or b.assumed) and a.key != b.key):
        out.append(_Diff(aspect=aspect, status="unknown", a=ta, b=tb,
                              why=f"not known for both runs: {WHY[aspect]}"))
        return
    if a.key != b.key:
        out.append(_Diff(aspect=aspect, status="differs", a=ta, b=tb, why=why or WHY[aspect],
                              expected=expected))


def _generation_diff(a: _Known, b: _Known, out: list[_Diff]) -> None:
    if a.key is None or b.key is None or not (
            isinstance(a.key, tuple) and isinstance(b.key, tuple) and len(a.key) == len(b.key) == 3):
        _compare("generation", a, b, out)
        return
    (va, arch_a, ya), (vb, arch_b, yb) = a.key, b.key
    if ya != yb:
        gap = abs(int(str(ya)) - int(str(yb)))
        out.append(_Diff(aspect="generation", status="differs", a=a.text, b=b.text,
                              why=f"launched {gap} year{'s' if gap > 1 else ''} apart: {WHY['generation']}"))
    elif va == vb and arch_a != arch_b:
        out.append(_Diff(aspect="generation", status="differs", a=a.text, b=b.text,
                              why=f"two architectures of one vendor: {WHY['generation']}"))


def _apart(x: float, y: float) -> bool:
    return abs(x - y) / max(x, y) > LENGTH_TOLERANCE


def _text_of(w: _Work) -> str:
    if not w.text:
        if not w.sizes:
            return f"{w.kind or 'no'} work, no size per item recorded"
        return ", ".join(f"{value:.4g} {per}" for _, per, value in w.sizes)
    parts = [f"{w.input_len:.0f} in" if w.input_len is not None else "input length not published",
             f"{w.output_len:.0f} out" if w.output_len is not None else "output length unknown"]
    return " / ".join(parts) + (f" tokens per request ({w.dataset})" if w.dataset else " tokens per request")


def _workload_diff(wa: _Work, wb: _Work, out: list[_Diff]) -> None:
    ta, tb = _text_of(wa), _text_of(wb)
    if wa.text != wb.text or wa.kind != wb.kind:
        out.append(_Diff(aspect="workload", status="differs", a=ta, b=tb,
                              why=f"another kind of work ({wa.kind or '?'} vs {wb.kind or '?'}): {WORK_WHY}"))
        return
    if not wa.text:
        sizes_b = {what: value for what, _, value in wb.sizes}
        apart = [what for what, _, value in wa.sizes if what in sizes_b and _apart(value, sizes_b[what])]
        if apart:
            out.append(_Diff(aspect="workload", status="differs", a=ta, b=tb,
                                  why=f"different {', '.join(apart)}: {WORK_WHY}"))
        return
    oa, ob = wa.output_len, wb.output_len
    if oa is None or ob is None:
        out.append(_Diff(aspect="workload", status="unknown", a=ta, b=tb,
                              why=f"not known for both runs: {WHY['workload']}"))
        return
    ia, ib = wa.input_len, wb.input_len
    same_dataset = wa.dataset is not None and wa.dataset == wb.dataset
    if ia is None or ib is None:
        if not same_dataset:
            out.append(_Diff(aspect="workload", status="unknown", a=ta, b=tb,
                                  why="input lengths not known for both (and not one dataset): "
                                      + WHY["workload"]))
            return
        if _apart(oa, ob):
            out.append(_Diff(aspect="workload", status="differs", a=ta, b=tb, why=WHY["workload"]))
        return
    if _apart(ia, ib) or _apart(oa, ob):
        out.append(_Diff(aspect="workload", status="differs", a=ta, b=tb, why=WHY["workload"]))


def _differences(fa: _Facts, fb: _Facts, profile_a: CostProfile | None = None,
                 profile_b: CostProfile | None = None) -> list[_Diff]:
    out: list[_Diff] = []
    _generation_diff(fa.generation, fb.generation, out)
    _compare("precision", fa.precision, fb.precision, out)
    _compare("model", fa.model, fb.model, out)
    _workload_diff(fa.work, fb.work, out)
    _compare("scenario", fa.scenario, fb.scenario, out)
    other_vendors = fa.vendor is not None and fb.vendor is not None and fa.vendor != fb.vendor
    _compare("framework", fa.framework, fb.framework, out, expected=other_vendors,
             why=(f"each vendor's own serving stack: {WHY['framework']} — part of what a cross-vendor ratio "
                  "measures (the software share of the gap)") if other_vendors else None)
    sub_a, sub_b = fa.submitter, fb.submitter
    both_vendors = (isinstance(sub_a.key, tuple) and isinstance(sub_b.key, tuple)
                    and sub_a.key[0] == sub_b.key[0] == "vendor" and other_vendors)
    if not both_vendors:  # each vendor on its own hardware is the same kind of submission
        _compare("submitter", sub_a, sub_b, out)
    _compare("devices", fa.devices, fb.devices, out)
    _compare("accuracy target", fa.accuracy, fb.accuracy, out)
    _compare("division", fa.division, fb.division, out)
    if profile_a is not None and profile_b is not None:
        _compare("price basis", _price_basis(profile_a), _price_basis(profile_b), out)
    return out


def _counted(diffs: Sequence[_Diff]) -> tuple[int, int]:
    """(differences that count, of which unknown)."""
    counted = [d for d in diffs if not d.expected]
    return len(counted), sum(1 for d in counted if d.status == "unknown")


def _likeness(fa: _Facts, fb: _Facts, profile_a: CostProfile | None = None,
              profile_b: CostProfile | None = None) -> Likeness:
    out = [d.model() for d in _differences(fa, fb, profile_a, profile_b)]
    counted = [d for d in out if not d.expected]
    like = not counted
    if like:
        text = LIKE_FOR_LIKE + "".join(
            f" (apart from each vendor's own {d.aspect}: {d.a} vs {d.b})" for d in out if d.expected)
    else:
        text = f"not like for like: {len(counted)} difference{'s' if len(counted) > 1 else ''} (" + ", ".join(
            f"{d.aspect}{'?' if d.status == 'unknown' else ''}" for d in counted) + ")"
    return Likeness(a=fa.id, b=fb.id, differences=out, like_for_like=like, summary=text)


def likeness(
    a: RunInfo,
    b: RunInfo,
    *,
    profile_a: CostProfile | None = None,
    profile_b: CostProfile | None = None,
    summary_a: RunSummary | None = None,
    summary_b: RunSummary | None = None,
    catalog: Catalog | None = None,
) -> Likeness:
    """The differences between ``a`` and ``b`` that change their ratio (module docstring); the price basis
    is compared when both profiles are given. ``summary_*``: what was priced of each (a sweep's stage;
    default the stage ``gpuledger cost`` prices)."""
    look = _Lookup(catalog if catalog is not None else load_catalog())
    return _likeness(_facts(a, look, summary_a), _facts(b, look, summary_b), profile_a, profile_b)


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


class ClosestSearch(_Model):
    """``compare``'s search of its store for the closest like-for-like pair of a pair that is not like for
    like: how many runs it read (the newest, at most ``limit``), the pair it found, or why there is none."""

    searched: int = Field(ge=0)
    limit: int = Field(ge=1)
    found: ClosestPair | None
    why: str = Field(max_length=3_000)  # where it looked, then the pair's own why


def _closest(head_a: _Facts, head_b: _Facts, candidates: Sequence[_Facts]) -> ClosestPair | str:
    va, vb = head_a.vendor, head_b.vendor
    if va is None or vb is None:
        which = "A" if va is None else "B"
        return f"{which} has no GPU of the catalog: no vendor to look for"
    skip = {head_a.id, head_b.id}
    side_a = [f for f in candidates if f.id not in skip and f.vendor == va and f.per_gpu]
    side_b = [f for f in candidates if f.id not in skip and f.vendor == vb and f.per_gpu]
    if not side_a or not side_b:
        missing = va if not side_a else vb
        return f"no other run with an output rate on a GPU of {VENDOR_NAMES.get(missing, missing)}"
    best: tuple[tuple[int, int, int, str, str, str, str], _Facts, _Facts, int] | None = None
    away_a = {f.id: _counted(_differences(head_a, f))[0] for f in side_a}
    away_b = {f.id: _counted(_differences(head_b, f))[0] for f in side_b}
    for x in side_a:
        for y in side_b:
            if x.id == y.id:
                continue
            count, unknown = _counted(_differences(x, y))
            away = away_a[x.id] + away_b[y.id]
            key = (count, unknown, away, x.label, y.label, x.id, y.id)  # ties: by label, stable across stores
            if best is None or key < best[0]:
                best = (key, x, y, away)
    if best is None:
        return "no pair of two different runs of the two vendors"
    _, x, y, away = best
    like = _likeness(x, y)
    assert x.per_gpu is not None and y.per_gpu is not None
    why = (f"of {len(side_a)} x {len(side_b)} stored pairs of the two vendors, the one with the fewest "
           f"differences between its sides ({like.summary}), then the fewest from the headline pair ({away})")
    return ClosestPair(headline_a=head_a.id, headline_b=head_b.id, a=x.id, b=y.id, label_a=x.label,
                       label_b=y.label, likeness=like, throughput_ratio_per_gpu=x.per_gpu / y.per_gpu,
                       away_from_headline=away, why=why)


def _candidates(runs: Sequence[RunInfo], look: _Lookup) -> list[_Facts]:
    out = []
    for run in runs:
        try:
            out.append(_facts(run, look))
        except GpuledgerError:  # a sweep with no stage to price: not a candidate
            continue
    return out


def closest_like_for_like(
    pair: tuple[RunInfo, RunInfo],
    candidates: Sequence[RunInfo],
    *,
    catalog: Catalog | None = None,
) -> ClosestPair | None:
    """Among ``candidates`` (stored runs), the pair (A on the headline A's vendor, B on B's) with the fewest
    differences between its two sides — nothing unknown first — and then the fewest from the headline pair
    (each side against the headline's side of its vendor), then the first by label; its output tokens per
    second per GPU, A ÷ B. None when no candidate pair has both vendors."""
    look = _Lookup(catalog if catalog is not None else load_catalog())
    found = _closest(_facts(pair[0], look), _facts(pair[1], look), _candidates(candidates, look))
    return found if isinstance(found, ClosestPair) else None


def closest_search(
    pair: tuple[RunInfo, RunInfo],
    stored: Sequence[RunInfo],
    *,
    limit: int,
    summaries: tuple[RunSummary | None, RunSummary | None] = (None, None),
    catalog: Catalog | None = None,
) -> ClosestSearch:
    """``closest_like_for_like`` over ``stored`` (the newest ``limit`` runs of a store), with why when none
    is found; ``summaries``: what was priced of the pair's two runs."""
    look = _Lookup(catalog if catalog is not None else load_catalog())
    head_a, head_b = _facts(pair[0], look, summaries[0]), _facts(pair[1], look, summaries[1])
    found = _closest(head_a, head_b, _candidates(stored, look))
    within = f"among the {len(stored)} newest runs of the store" if len(stored) >= limit else (
        f"among the store's {len(stored)} runs")
    if isinstance(found, ClosestPair):
        return ClosestSearch(searched=len(stored), limit=limit, found=found, why=f"{within}: {found.why}")
    return ClosestSearch(searched=len(stored), limit=limit, found=None, why=f"none {within}: {found}")
