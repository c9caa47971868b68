"""What a throughput ratio is made of: the measured (or published) ratio of two text-generation runs split
into parts that multiply to it exactly — **hardware** × **precision** × **software** × **load** — or, where a
part cannot be computed, into the parts that can and an **unexplained remainder** named as such.

The model is the roofline's (``catalog/roofline.py``, ``cost/efficiency.py``): a run's time per output token
splits into its decode share ``1 - p`` and its prefill share ``p`` (``p`` = mean TTFT ÷ mean E2E, the share
``estimate`` scales by; a published point's from its TTFT and TPOT; 0, all decode, when there is none):

- decode is memory-bound: its output rate (all ``n`` devices) = ``n × B × MBU × s ÷ bytes(s)``, where ``B`` is
  the peak bandwidth of one device, ``s`` the sequences a replica decodes at once and ``bytes(s)`` what one
  decode step reads (the weights it multiplies with, at the precision's bytes per parameter, + the KV cache
  of ``s`` sequences at their mean context, at the bytes per KV element);
- prefill is compute-bound: its time per output token = ``prefill FLOPs(I) ÷ (O × n × F × MFU)``, ``F`` the
  peak dense FLOP/s of one device at the run's precision, ``I`` and ``O`` the mean input and output tokens.

MBU and MFU are the ones that make this model give each run's own throughput (the share of peak its stack
reached over its decode and prefill time); with them the model is exact for both runs. The parts are then
found by swapping B's inputs for A's one group at a time, in this order, each factor being the throughput
after the swap ÷ before it (as the re-priced comparison's steps do, ``cost/repricing.py``):

1. **hardware**: devices, peak bandwidth and peak FLOP/s at each run's precision (weighted by B's time
   shares, as ``roofline_scale`` does);
2. **precision**: bytes per parameter and per KV element;
3. **software**: MBU and prefill MFU;
4. **load**: sequences in flight, input and output lengths (and, for a total-token basis, the tokens a
   request counts) — 1 exactly when they are the same.

Another order splits the same total otherwise; the order is stated with the result. Without the model's
architecture or the sequences in flight, only the hardware part is computed and the rest is the remainder,
saying why; without the GPUs' peaks, the whole ratio is.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gpuledger.catalog import Catalog, GpuSpec, load_catalog, normalise_dtype, peak_bandwidth, peak_compute
from gpuledger.catalog.model import Figure
from gpuledger.catalog.roofline import TB, kv_bytes, kv_cache_bytes, weight_bytes
from gpuledger.cost.pricing.efficiency import Efficiency, model_of, run_efficiency
from gpuledger.cost.pricing.modelarch import ModelArch
from gpuledger.cost.pricing.operating import operating_point
from gpuledger.cost.pricing.runview import cpu_device, gpu_devices
from gpuledger.kinds.text.published import PublishedSummary
from gpuledger.kinds.text.summary import TextGenerationSummary
from gpuledger.records import RunInfo, RunSummary

InputOrigin = Literal["catalog", "run", "published", "derived", "assumption"]
PartName = Literal["hardware", "precision", "software", "load", "remainder"]
PARTS: tuple[PartName, ...] = ("hardware", "precision", "software", "load")
ORDER = (
    "B's inputs are swapped for A's in the order hardware, precision, software, load; each factor is the "
    "modelled throughput after its swap ÷ before it, and the factors multiply to the ratio (another order "
    "would split the same total otherwise)"
)
# Units of a text-generation run the model can express per output token.
TOKEN_UNITS = ("output_token", "input_token", "token")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class SideValue(_Model):
    """One side's value of an input, and where it came from."""

    value: float | str | None
    origin: InputOrigin
    source: str = Field(max_length=2_000)


class PartInput(_Model):
    """An input of a part, with both sides."""

    name: str = Field(max_length=200)
    unit: str = Field(max_length=80)
    a: SideValue
    b: SideValue


class ThroughputPart(_Model):
    """A factor of the throughput ratio (A ÷ B), what it stands for, and its inputs."""

    part: PartName
    factor: float = Field(gt=0)
    what: str = Field(max_length=2_000)
    inputs: list[PartInput] = Field(default_factory=list)


class NotComputed(_Model):
    part: PartName
    reason: str = Field(max_length=2_000)


class ThroughputDecomposition(_Model):
    """``throughput_ratio`` (A ÷ B, the compared unit's rate of all each run's devices) = the product of
    ``throughput_parts``; the parts that could not be computed are in ``not_computed`` and in the
    remainder."""

    a: str
    b: str
    unit: str
    rate_unit: str
    throughput_a: float = Field(gt=0)
    throughput_b: float = Field(gt=0)
    throughput_ratio: float = Field(gt=0)
    throughput_parts: list[ThroughputPart]
    not_computed: list[NotComputed] = Field(default_factory=list)
    order: str = ORDER
    model: str = (
        "decode: n x peak bandwidth x MBU x sequences / bytes per step; prefill: prefill FLOPs / (output "
        "tokens x n x peak FLOP/s x MFU); weighted by each run's decode and prefill share of its time "
        "(gpuledger.cost.comparison.decomposition)"
    )

    def product(self) -> float:
        return math.prod(p.factor for p in self.throughput_parts)

    def part(self, name: PartName) -> ThroughputPart | None:
        return next((p for p in self.throughput_parts if p.part == name), None)


class DecompositionError(ValueError):
    """The two runs have no throughput ratio to split (no rate of the unit, not text generation)."""


# ---- one side's inputs --------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Value:
    value: float | str | None
    origin: InputOrigin
    source: str

    def model(self) -> SideValue:
        return SideValue(value=self.value, origin=self.origin, source=self.source)


@dataclass(frozen=True, slots=True)
class _Side:
    run: RunInfo
    summary: RunSummary
    rate: float  # of the compared unit, all devices
    per_output: float  # units per output token (1 for output tokens)
    rates: InputOrigin  # "run" (measured) or "published"
    spec: GpuSpec | None
    spec_why: str
    devices: _Value
    dtype: str | None
    dtype_value: _Value
    prefill: _Value  # p, the prefill share of the time
    eff: Efficiency
    arch: ModelArch | None
    arch_why: str

    @property
    def output_rate(self) -> float:
        return self.rate / self.per_output

    @property
    def p(self) -> float:
        return float(self.prefill.value) if isinstance(self.prefill.value, float) else 0.0


def _where(run: RunInfo, summary: RunSummary) -> tuple[InputOrigin, str]:
    origin = summary.origin()
    if origin is None:
        return "run", f"measured by run {run.id}"
    return "published", origin.label


def _prefill_share(run: RunInfo, summary: RunSummary) -> _Value:
    if isinstance(summary, PublishedSummary):
        s = summary
        if s.ttft_ms is not None and s.tpot_ms is not None and s.output_len >= 1:
            e2e = s.ttft_ms + s.tpot_ms * (s.output_len - 1)
            return _Value(s.ttft_ms / e2e, "derived",
                          f"published TTFT {s.ttft_ms:.4g} ms / (TTFT + TPOT {s.tpot_ms:.4g} ms x (output "
                          f"{s.output_len} - 1)); {s.origin().label}")
        return _Value(0.0, "assumption", "the point publishes no TTFT and TPOT: its whole time counted as "
                                         "decode (its MBU then includes its prefill time)")
    share, how = summary.compute_share()
    if share is None:
        return _Value(0.0, "assumption", f"no prefill share ({how}): the run counted as decode only")
    return _Value(share, "run", f"{how} (run {run.id})")


def _dtype(run: RunInfo, summary: RunSummary, eff: Efficiency) -> tuple[str | None, _Value]:
    origin, where = _where(run, summary)
    if eff.origin is not None:
        how = str(eff.basis.get("dtype_source") or "")
        if eff.dtype is None:
            return None, _Value("16-bit (assumed)", "assumption", how or "the run does not record its dtype")
        return eff.dtype, _Value(eff.dtype, "published" if "published" in how else "run", f"{how}; {where}")
    if isinstance(summary, PublishedSummary) and summary.precision:
        kind = normalise_dtype(summary.precision)
        return kind, _Value(kind or summary.precision, "published", f"published precision; {where}")
    value = run.config.precision()
    kind = normalise_dtype(value) if value else None
    if kind is not None:
        return kind, _Value(kind, origin, f"recorded by the run; {where}")
    return None, _Value("16-bit (assumed)", "assumption", "the run does not record its dtype: 16-bit assumed")


def _devices(run: RunInfo, summary: RunSummary, cat: Catalog) -> tuple[GpuSpec | None, str, _Value]:
    """The catalog GPU and how many produced the rates: a published point's own, else the GPUs the run's
    telemetry shows it used (as ``cost/efficiency.py`` finds them)."""
    origin = summary.origin()
    if origin is not None and origin.gpu:
        spec = cat.find(origin.gpu)
        n = origin.gpus or 1
        why = "" if spec is not None else f"GPU {origin.gpu!r} is not in the GPU catalog"
        return spec, why, _Value(float(n), "published", f"{n} x {origin.gpu}; {origin.label}")
    used, _ = gpu_devices(run)
    if not used:
        why = ("the run was served by its host's CPU: the catalog's peaks are GPUs'" if cpu_device(run)
               is not None else "the run records no GPU (no telemetry of the devices that served it)")
        return None, why, _Value(None, "run", why)
    name = sorted({d.name for d in used})[0]
    spec = cat.find(name)
    why = "" if spec is not None else f"GPU {name!r} is not in the GPU catalog (its peaks are needed)"
    return spec, why, _Value(float(len(used)), "run", f"{len(used)} x {name} in the run's telemetry")


def _side(run: RunInfo, summary: RunSummary | None, unit: str, cat: Catalog) -> _Side:
    if summary is None:
        op = operating_point(run)
        summary = op.summary.without_stages() if op is not None else run.summary
    if summary is None:
        raise DecompositionError(f"run {run.id} has no summary: no throughput to compare")
    if not isinstance(summary, TextGenerationSummary | PublishedSummary) or unit not in TOKEN_UNITS:
        raise DecompositionError(
            f"run {run.id}: the throughput decomposition models text generation (output, input or total "
            f"tokens), not {unit!r} of a {summary.kind} run"
        )
    rate = summary.rate(unit)
    out = summary.rate("output_token")
    if not rate or rate <= 0 or not out or out <= 0:
        raise DecompositionError(f"run {run.id} has no {unit} rate to compare")
    eff = run_efficiency(run, summary, catalog=cat)
    spec, spec_why, devices = _devices(run, summary, cat)
    dtype, dtype_value = _dtype(run, summary, eff)
    arch, arch_why = model_of(run)
    rates, _ = _where(run, summary)
    return _Side(run, summary, rate, rate / out, rates, spec, spec_why, devices, dtype, dtype_value,
                 _prefill_share(run, summary), eff, arch, arch_why)


# ---- the model ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _State:
    """The roofline's inputs for one configuration (module docstring)."""

    n: float
    bw: float  # bytes/s of one device
    flops: float  # FLOP/s of one device at the precision
    wb: float
    kb: float
    mbu: float | None  # None: no decode time
    mfu: float | None  # None: no prefill time
    seqs: float
    input_len: float
    output_len: float
    per_output: float

    def time_per_unit(self, arch: ModelArch) -> float:
        decode = 0.0
        if self.mbu is not None:
            context = self.input_len + self.output_len / 2.0
            step = (arch.read_params_per_step(self.seqs) * self.wb
                    + kv_cache_bytes(arch.kv_elements_per_token, self.kb, context, self.seqs))
            decode = step / (self.n * self.bw * self.mbu * self.seqs)
        prefill = 0.0
        if self.mfu is not None:
            prefill = arch.prefill_flops(self.input_len) / (self.output_len * self.n * self.flops * self.mfu)
        return (decode + prefill) / self.per_output


def _figure_value(fig: Figure) -> _Value:
    return _Value(fig.value, "catalog", fig.provenance() or (fig.reason or ""))


def _peaks(side: _Side) -> tuple[Figure, Figure, str] | str:
    if side.spec is None:
        return side.spec_why or "the run's GPU is not in the catalog"
    bw = peak_bandwidth(side.spec)
    flops, basis = peak_compute(side.spec, side.dtype)
    if bw.value is None:
        return f"{side.spec.name} has no memory bandwidth in the catalog ({bw.reason})"
    if flops.value is None and side.p > 0:
        return f"{side.spec.name} has no dense FLOP/s figure in the catalog ({flops.reason})"
    return bw, flops, basis


def _hardware_part(a: _Side, b: _Side) -> ThroughputPart | str:
    pa, pb = _peaks(a), _peaks(b)
    for side, peaks in (("A", pa), ("B", pb)):
        if isinstance(peaks, str):
            return f"{side}: {peaks}"
    assert not isinstance(pa, str) and not isinstance(pb, str)
    bw_a, fl_a, basis_a = pa
    bw_b, fl_b, basis_b = pb
    na, nb = float(a.devices.value or 1.0), float(b.devices.value or 1.0)
    assert bw_a.value is not None and bw_b.value is not None
    decode = (nb * bw_b.value) / (na * bw_a.value)
    prefill = 0.0
    if b.p > 0:
        assert fl_a.value is not None and fl_b.value is not None
        prefill = (nb * fl_b.value) / (na * fl_a.value)
    factor = 1.0 / ((1.0 - b.p) * decode + b.p * prefill)
    assert a.spec is not None and b.spec is not None
    what = (f"peak bandwidth per device x devices for decode, dense FLOP/s at each run's precision for "
            f"prefill, weighted by B's time shares ({1 - b.p:.0%} decode, {b.p:.0%} prefill): "
            f"A {na:g} x {a.spec.name} {bw_a.value:g} TB/s, {fl_a.value if fl_a.value is not None else '—'} "
            f"TFLOPS ({basis_a}); B {nb:g} x {b.spec.name} {bw_b.value:g} TB/s, "
            f"{fl_b.value if fl_b.value is not None else '—'} TFLOPS ({basis_b})")
    inputs = [
        PartInput(name="devices", unit="GPUs", a=a.devices.model(), b=b.devices.model()),
        PartInput(name="peak memory bandwidth per device", unit="TB/s", a=_figure_value(bw_a).model(),
                  b=_figure_value(bw_b).model()),
        PartInput(name="peak dense FLOP/s per device at the run's precision", unit="TFLOPS",
                  a=_figure_value(fl_a).model(), b=_figure_value(fl_b).model()),
        PartInput(name="prefill share of the time", unit="ratio", a=a.prefill.model(), b=b.prefill.model()),
    ]
    return ThroughputPart(part="hardware", factor=factor, what=what, inputs=inputs)


@dataclass(frozen=True, slots=True)
class _Load:
    seqs: _Value
    input_len: _Value
    output_len: _Value


def _load(side: _Side) -> _Load | str:
    """The sequences a replica decodes at once and the mean lengths, from the run's MBU basis."""
    eff = side.eff
    basis = eff.basis
    seqs = basis.get("sequences_in_flight")
    i, o = basis.get("mean_input_tokens"), basis.get("mean_output_tokens")
    if not isinstance(seqs, int | float) or not isinstance(i, int | float) or not isinstance(o, int | float):
        return eff.reasons.get("mbu") or "the sequences in flight are not known"
    origin: InputOrigin = "derived" if side.rates == "published" else "run"
    where = _where(side.run, side.summary)[1]
    replica = basis.get("replica_devices")
    how = str(basis.get("sequences_source") or "")
    if isinstance(replica, int) and side.devices.value is not None and replica != int(side.devices.value):
        how += (f"; x {replica} / {int(side.devices.value)}: one replica spans {replica} GPUs (efficiency's "
                "assumption)")
        origin = "assumption" if side.rates == "published" else origin
    lengths: InputOrigin = "published" if side.rates == "published" else "run"
    return _Load(_Value(float(seqs), origin, f"{how}; {where}"),
                 _Value(float(i), lengths, f"mean input tokens; {where}"),
                 _Value(float(o), lengths, f"mean output tokens; {where}"))


@dataclass(frozen=True, slots=True)
class _Full:
    arch: ModelArch
    states: tuple[_State, _State]
    loads: tuple[_Load, _Load]
    bytes_: tuple[tuple[_Value, _Value], tuple[_Value, _Value]]  # (weight, kv) per side
    effs: tuple[tuple[_Value, _Value], tuple[_Value, _Value]]  # (MBU, MFU) per side


def _state(side: _Side, load: _Load, arch: ModelArch) -> tuple[_State, tuple[_Value, _Value],
                                                                 tuple[_Value, _Value]] | str:
    peaks = _peaks(side)
    if isinstance(peaks, str):
        return peaks
    bw, flops, _ = peaks
    assert bw.value is not None
    wb, wb_how = weight_bytes(side.dtype)
    kb, kb_how = kv_bytes(side.dtype)
    n = float(side.devices.value or 1.0)
    seqs = float(load.seqs.value or 0.0)
    i, o = float(load.input_len.value or 0.0), float(load.output_len.value or 0.0)
    if seqs <= 0 or o <= 0:
        return "no sequences or no output tokens to model"
    p = side.p
    t_out = side.output_rate
    mbu: float | None = None
    if p < 1.0:
        context = i + o / 2.0
        step = (arch.read_params_per_step(seqs) * wb
                + kv_cache_bytes(arch.kv_elements_per_token, kb, context, seqs))
        decode_rate = t_out / (1.0 - p)
        mbu = step * decode_rate / (n * bw.value * TB * seqs)
    mfu: float | None = None
    if p > 0.0:
        if flops.value is None or i <= 0:
            return "a prefill share without a FLOP/s figure or an input length"
        mfu = arch.prefill_flops(i) * t_out / (o * n * flops.value * TB * p)
    state = _State(n, bw.value * TB, (flops.value or 0.0) * TB, wb, kb, mbu, mfu, seqs, i, o, side.per_output)
    dtype_origin = side.dtype_value.origin
    weights = _Value(wb, dtype_origin if side.dtype else "assumption", f"{wb_how}; {side.dtype_value.source}")
    kv = _Value(kb, "assumption", kb_how)
    where = _where(side.run, side.summary)[1]
    eff_origin: InputOrigin = "derived"
    reported = side.eff.mbu
    mbu_how = ("bytes per decode step x decode steps per second of decode time (output tok/s / decode share "
               f"/ sequences) / (devices x peak bandwidth); {where}")
    if reported is not None:
        mbu_how += f"; cost reports MBU {reported:.3g} (from {side.eff.provenance()})"
    effs = (_Value(mbu, eff_origin, mbu_how) if mbu is not None else
            _Value(None, "derived", "no decode time (the run is all prefill)"),
            _Value(mfu, eff_origin, "prefill FLOPs per output token x output tok/s / prefill share / "
                                    f"(devices x peak FLOP/s); {where}") if mfu is not None else
            _Value(None, "derived", "no prefill time (prefill share 0)"))
    return state, (weights, kv), effs


def _full(a: _Side, b: _Side) -> _Full | str:
    if a.arch is None or b.arch is None:
        which, why = ("A", a.arch_why) if a.arch is None else ("B", b.arch_why)
        return f"{which}: {why} (the bytes a decode step reads and the prefill FLOPs need it)"
    if a.arch.name != b.arch.name:
        return (f"the runs served different models ({a.arch.name} vs {b.arch.name}): their bytes per step "
                "are not one model's")
    loads = []
    for name, side in (("A", a), ("B", b)):
        load = _load(side)
        if isinstance(load, str):
            return f"{name}: {load}"
        loads.append(load)
    built = []
    for name, side, load in (("A", a, loads[0]), ("B", b, loads[1])):
        got = _state(side, load, a.arch)
        if isinstance(got, str):
            return f"{name}: {got}"
        built.append(got)
    (sa, ba, ea), (sb, bb, eb) = built
    return _Full(a.arch, (sa, sb), (loads[0], loads[1]), (ba, bb), (ea, eb))


# Each part's swap of B's inputs for A's (module docstring), in order.
SWAPS: tuple[tuple[PartName, Callable[[_State, _State], _State]], ...] = (
        ("hardware", lambda s, t: replace(s, n=t.n, bw=t.bw, flops=t.flops)),
        ("precision", lambda s, t: replace(s, wb=t.wb, kb=t.kb)),
        ("software", lambda s, t: replace(s, mbu=t.mbu, mfu=t.mfu)),
        ("load", lambda s, t: replace(s, seqs=t.seqs, input_len=t.input_len, output_len=t.output_len,
                                      per_output=t.per_output)),
)


def _chain(full: _Full) -> dict[PartName, float]:
    state, target = full.states[1], full.states[0]
    out: dict[PartName, float] = {}
    time = state.time_per_unit(full.arch)
    for part, swap in SWAPS:
        state = swap(state, target)
        after = state.time_per_unit(full.arch)
        out[part] = time / after
        time = after
    return out


def _pair(name: str, unit: str, a: _Value, b: _Value) -> PartInput:
    return PartInput(name=name, unit=unit, a=a.model(), b=b.model())


def _what_precision(full: _Full, a: _Side, b: _Side) -> str:
    (wa, ka), (wbv, kbv) = full.bytes_
    return (f"bytes per parameter and per KV element a decode step reads: A {a.dtype or '16-bit'} "
            f"({wa.value:g} + {ka.value:g} bytes), B {b.dtype or '16-bit'} "
            f"({wbv.value:g} + {kbv.value:g} bytes)")


def _pct(v: float | str | None) -> str:
    return f"{float(v) * 100:.3g} %" if isinstance(v, float) else "—"


def _what_software(full: _Full) -> str:
    (ma, fa), (mb, fb) = full.effs
    return (f"the share of peak each stack reaches: MBU A {_pct(ma.value)} vs B {_pct(mb.value)}, prefill "
            f"MFU A {_pct(fa.value)} vs B {_pct(fb.value)}")


def _what_load(full: _Full) -> str:
    la, lb = full.loads
    same = (la.seqs.value, la.input_len.value, la.output_len.value) == (
        lb.seqs.value, lb.input_len.value, lb.output_len.value)
    def num(v: _Value) -> str:
        return f"{float(v.value or 0):.4g}"

    text = (f"sequences a replica decodes at once A {num(la.seqs)} vs B {num(lb.seqs)}; mean input/output "
            f"tokens A {num(la.input_len)}/{num(la.output_len)} vs B {num(lb.input_len)}/"
            f"{num(lb.output_len)}")
    return text + (" (the same load: x1)" if same else "")


def decompose_throughput(
    a: RunInfo,
    b: RunInfo,
    *,
    summary_a: RunSummary | None = None,
    summary_b: RunSummary | None = None,
    unit: str = "output_token",
    catalog: Catalog | None = None,
) -> ThroughputDecomposition:
    """The throughput ratio A ÷ B of ``unit`` (default output tokens; each run's priced stage of a sweep
    unless ``summary_*`` says which) split into its parts (module docstring). ``DecompositionError`` when
    there is no such ratio (not text generation, no rate)."""
    cat = catalog if catalog is not None else load_catalog()
    sa, sb = _side(a, summary_a, unit, cat), _side(b, summary_b, unit, cat)
    ratio = sa.rate / sb.rate
    info = sa.summary.unit(unit)
    parts: list[ThroughputPart] = []
    missing: list[NotComputed] = []
    hardware = _hardware_part(sa, sb)
    full = _full(sa, sb) if not isinstance(hardware, str) else hardware
    if isinstance(full, _Full):
        factors = _chain(full)
        (wa, ka), (wb_, kb_) = full.bytes_
        (ma, fa), (mb, fb) = full.effs
        la, lb = full.loads
        assert not isinstance(hardware, str)
        parts = [
            hardware.model_copy(update={"factor": factors["hardware"]}),
            ThroughputPart(part="precision", factor=factors["precision"], what=_what_precision(full, sa, sb),
                           inputs=[_pair("bytes per parameter", "bytes", wa, wb_),
                                   _pair("bytes per KV element", "bytes", ka, kb_)]),
            ThroughputPart(part="software", factor=factors["software"], what=_what_software(full),
                           inputs=[_pair("MBU", "ratio", ma, mb), _pair("prefill MFU", "ratio", fa, fb)]),
            ThroughputPart(part="load", factor=factors["load"], what=_what_load(full),
                           inputs=[_pair("sequences a replica decodes at once", "sequences", la.seqs,
                                         lb.seqs),
                                   _pair("mean input tokens", "tokens", la.input_len, lb.input_len),
                                   _pair("mean output tokens", "tokens", la.output_len, lb.output_len),
                                   _pair("prefill share of the time", "ratio", sa.prefill, sb.prefill)]),
        ]
    else:
        why = full
        if isinstance(hardware, str):
            missing.append(NotComputed(part="hardware", reason=hardware))
        else:
            parts.append(hardware)
        missing.extend(NotComputed(part=p, reason=why) for p in ("precision", "software", "load"))
        rest = ratio / math.prod(p.factor for p in parts) if parts else ratio
        names = ", ".join(m.part for m in missing)
        parts.append(ThroughputPart(
            part="remainder", factor=rest,
            what=f"unexplained remainder: {names} together, not split ({why})",
            inputs=[_pair("throughput", info.rate_text, _Value(sa.rate, sa.rates, _where(a, sa.summary)[1]),
                          _Value(sb.rate, sb.rates, _where(b, sb.summary)[1]))],
        ))
    return ThroughputDecomposition(
        a=a.id, b=b.id, unit=unit, rate_unit=f"{info.rate_text} (all the run's devices)",
        throughput_a=sa.rate, throughput_b=sb.rate, throughput_ratio=ratio,
        throughput_parts=parts, not_computed=missing,
    )


def unsplit(a: RunInfo, b: RunInfo, *, unit: str, rate_unit: str, throughput_a: float, throughput_b: float,
            reason: str) -> ThroughputDecomposition:
    """The throughput ratio of two runs the model cannot take apart (``decompose_throughput`` raised
    ``DecompositionError``: not text generation, no rate of the unit): one part, the unexplained remainder,
    saying why."""
    def side(run: RunInfo) -> _Value:
        summary = run.summary
        origin = summary.origin() if summary is not None else None
        if origin is None:
            return _Value(None, "run", f"measured by run {run.id}")
        return _Value(None, "published", origin.label)

    va, vb = side(a), side(b)
    inputs = [PartInput(name="throughput", unit=rate_unit,
                        a=SideValue(value=throughput_a, origin=va.origin, source=va.source),
                        b=SideValue(value=throughput_b, origin=vb.origin, source=vb.source))]
    names = ", ".join(PARTS)
    remainder = ThroughputPart(part="remainder", factor=throughput_a / throughput_b,
                               what=f"unexplained remainder: {names} together, not split ({reason})",
                               inputs=inputs)
    return ThroughputDecomposition(
        a=a.id, b=b.id, unit=unit, rate_unit=rate_unit, throughput_a=throughput_a, throughput_b=throughput_b,
        throughput_ratio=throughput_a / throughput_b, throughput_parts=[remainder],
        not_computed=[NotComputed(part=part, reason=reason) for part in PARTS],
    )
