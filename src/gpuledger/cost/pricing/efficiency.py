"""MBU and MFU of a run: how much of the GPU's memory bandwidth and compute the software stack used
(docs/design.md, "Productive vs theoretical compute"; the seed essay's §1.3 and §2.4). The one place they are
computed: ``cost``, ``show``, the reports and ``estimate`` call ``run_efficiency``.

For a text-generation run (measured or published) on a GPU the catalog knows, of a model whose config is
known (``cost/pricing/modelarch.py``):

- **MBU** = bytes one decode step reads × decode steps per second ÷ (devices × peak bandwidth). Bytes per
  step = the weights a step multiplies with (every parameter but the embedding table, whose rows are
  looked up, at the dtype's bytes; of a mixture of experts only the experts the step's tokens are routed to)
  + the KV cache of every sequence in flight at its mean context (input + output ÷ 2): 2 × layers × KV heads
  × head dim × bytes × context per sequence. Decode steps per second over decode time only: 1000 ÷ the
  run's mean TPOT (a published point: its tokens/s per user, or 1000 ÷ its TPOT).
- **MFU** = achieved FLOP/s ÷ (devices × peak dense FLOP/s at the dtype): every input token's prefill
  FLOPs and every output token's decode FLOPs (2 × active parameters + attention at the token's context)
  over the window.
- **prefill MFU** = a prefill's FLOPs ÷ the mean TTFT ÷ (devices × peak): the compute efficiency of the
  prefill alone, which the no-run estimate carries. A batch of the in-process engine prefills together
  (its FLOPs × the batch); a server's (or a published point's) TTFT includes queueing, so its figure is a
  lower bound (``prefill_mfu_lower_bound``), shown but not carried to an estimate.

Not computable is a reason, never a zero: an unknown model, a CPU run, a GPU not in the catalog, no TPOT.

Every figure says where it is from, in exact words (``FigureOrigin``): **measured** (a run gpuledger
measured), **derived from published** (gpuledger's arithmetic over a publisher's rates, with its own
assumptions — the replica size, the KV cache's bytes, the dtype, the sequences in flight — listed in
``assumptions`` and named in ``text()``), **estimate** (a model: carried to another GPU, or a default).
MBU and MFU are never "published": no publisher gives them; gpuledger derives them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Literal

from gpuledger.catalog import Catalog, GpuSpec, load_catalog, normalise_dtype, peak_bandwidth, peak_compute
from gpuledger.catalog.roofline import TB, USABLE_MEMORY_FRACTION, kv_bytes, kv_cache_bytes, weight_bytes
from gpuledger.cost.pricing.document import EfficiencyDoc
from gpuledger.cost.pricing.modelarch import (
    ModelArch,
    arch_from_config,
    arch_from_shape,
    config_dtype,
    find_known,
)
from gpuledger.cost.pricing.runview import cpu_device, gpu_devices
from gpuledger.errors import GpuledgerError
from gpuledger.kinds.text.published import PublishedSummary
from gpuledger.kinds.text.spec import ServerSpec, TorchSpec
from gpuledger.kinds.text.summary import TextGenerationSummary
from gpuledger.records import RunInfo, RunSummary

# The provenance words (docs/advise.md): "published" is a figure as its publisher gave it (a rate); a figure
# gpuledger computed from published ones under its own assumptions is "derived from published".
FigureOrigin = Literal["measured", "published", "derived from published", "estimate"]
DERIVED: Final = "derived from published"
NA_TEXT = "n/a"


def pct_text(value: float | None) -> str:
    """A utilisation with significant digits: ``41 %``, ``3.2 %``, ``0.0058 %`` (never a "0 %" that hides
    a figure)."""
    if value is None:
        return NA_TEXT
    v = value * 100
    digits = 2 if v < 10 else 3
    return f"{float(f'{v:.{digits}g}'):g} %"


@dataclass(frozen=True, slots=True)
class Efficiency:
    """MBU, MFU and prefill MFU of one run, each a value or the reason there is none, with every input."""

    origin: FigureOrigin | None  # None: nothing could be computed
    label: str  # where the run's figures come from ("measured on ...", "published by ..., not measured here")
    mbu: float | None = None
    mfu: float | None = None
    prefill_mfu: float | None = None
    reasons: dict[str, str] = field(default_factory=dict)  # metric -> why it is not available
    gpu: str | None = None
    devices: int | None = None
    model: str | None = None
    dtype: str | None = None
    basis: dict[str, Any] = field(default_factory=dict)
    assumptions: list[str] = field(default_factory=list)
    prefill_mfu_lower_bound: bool = False  # from a TTFT that includes queueing (a server's)
    applies: bool = True  # False: the run's work is not text generation (its own figures say more)
    premises: tuple[str, ...] = ()  # derived from published: gpuledger's assumptions, in a few words each

    @classmethod
    def missing(cls, reason: str, label: str = "", applies: bool = True) -> Efficiency:
        return cls(None, label, reasons={"mbu": reason, "mfu": reason, "prefill_mfu": reason},
                   applies=applies)

    def as_estimate(self, how: str) -> Efficiency:
        """The same figures of a run scaled to another GPU (``estimate``): an estimate, said how."""
        from dataclasses import replace

        return replace(self, origin="estimate" if self.origin is not None else None, label=how)

    @property
    def available(self) -> bool:
        return self.mbu is not None or self.mfu is not None

    def figure(self, name: str) -> float | None:
        value = getattr(self, name)
        return value if isinstance(value, float) else None

    def provenance(self) -> str:
        """``"measured"``, ``"estimate"``, or ``"derived from published, assuming one replica of 8 GPUs,
        16-bit KV cache, ..."``: the origin with the assumptions a derived figure rests on."""
        if self.premises and self.origin in (DERIVED, "estimate"):
            return f"{self.origin}, assuming {', '.join(self.premises)}"
        return str(self.origin)

    def text(self) -> str:
        """``"MBU 41 %, MFU 3.2 % (measured)"`` or ``"n/a — why"``."""
        if not self.available:
            return f"{NA_TEXT} — {self.reasons.get('mbu') or self.reasons.get('mfu') or 'not computable'}"
        parts = []
        for name, value in (("MBU", self.mbu), ("MFU", self.mfu)):
            parts.append(f"{name} {pct_text(value)}" if value is not None else
                         f"{name} {NA_TEXT} ({self.reasons.get(name.lower(), 'not computable')})")
        return ", ".join(parts) + f" ({self.provenance()})"

    def document(self) -> EfficiencyDoc:
        """The figures as the ``efficiency`` block of a cost, show or estimate document."""
        return EfficiencyDoc(
            origin=self.origin, label=self.label, mbu=self.mbu, mfu=self.mfu, prefill_mfu=self.prefill_mfu,
            prefill_mfu_lower_bound=self.prefill_mfu_lower_bound, reasons=dict(self.reasons),
            applies=self.applies, gpu=self.gpu, devices=self.devices, model=self.model, dtype=self.dtype,
            basis=dict(self.basis), assumptions=list(self.assumptions),
            # derived from published only: the assumptions its origin words name (``provenance()``)
            premises=list(self.premises) if self.premises else None,
            provenance=self.provenance() if self.premises else None,
            method="docs/advise.md#mbu-and-mfu (gpuledger.cost.pricing.efficiency)",
        )


# ---- what the run ran -------------------------------------------------------------------------------
def model_of(run: RunInfo) -> tuple[ModelArch | None, str]:
    """The architecture of the run's model, and (when none) why."""
    spec = run.config
    if isinstance(spec, TorchSpec) and spec.model is not None:
        m = spec.model
        known = find_known(m.name or m.spec) if m.kind in (None, "dummy") else None
        if known is not None:
            return known, ""
        if m.shape is not None:
            name = m.name or m.spec
            return arch_from_shape(m.shape, spec.parameter_count(), name=name,
                                   source="the shape and parameter count the run recorded"), ""
    if isinstance(spec, ServerSpec) and spec.model_architecture is not None:
        rec = spec.model_architecture
        return arch_from_config(rec.config, name=run.model or rec.path, origin="config.json",
                                source=f"{rec.path} (bench --model-config)"), ""
    names = [n for n in (run.model, getattr(spec, "model", None)) if isinstance(n, str) and n.strip()]
    for name in names:
        known = find_known(name)
        if known is not None:
            return known, ""
    shown = names[0] if names else "(not recorded)"
    return None, (
        f"model {shown!r} has no known config (a dummy:NAME or known model, or bench --model-config PATH)"
    )


def _gpu_of(run: RunInfo, summary: RunSummary, cat: Catalog, gpu: str | None,
            gpus: int | None) -> tuple[GpuSpec | None, int, str, FigureOrigin]:
    """(catalog GPU, devices, why none, origin of the run's figures)."""
    used, _ = gpu_devices(run)
    origin = summary.origin()
    if used:
        names = sorted({d.name for d in used})
        spec = cat.find(names[0])
        why = "" if spec is not None else f"GPU {names[0]!r} is not in the GPU catalog (its peaks are needed)"
        return spec, len(used), why, "measured"
    if origin is not None and origin.gpu:
        spec = cat.find(origin.gpu)
        why = "" if spec is not None else f"GPU {origin.gpu!r} is not in the GPU catalog"
        # MBU and MFU of a published point are gpuledger's arithmetic over the published rates.
        return spec, origin.gpus or 1, why, DERIVED
    if gpu:
        spec = cat.find(gpu)
        why = "" if spec is not None else f"GPU {gpu!r} is not in the GPU catalog"
        return spec, gpus or 1, why, "measured"
    if cpu_device(run) is not None:
        return None, 0, "a CPU run: MBU and MFU are shares of a GPU's catalog peaks", "measured"
    return None, 0, (
        "the run records no GPU (no telemetry of the devices that served it; cost --gpu NAME says which)"
    ), "measured"


def _dtype_of(run: RunInfo, summary: RunSummary, arch: ModelArch) -> tuple[str | None, str]:
    if isinstance(summary, PublishedSummary) and summary.precision:
        kind = normalise_dtype(summary.precision)
        return kind, f"published precision {summary.precision}"
    value = run.config.precision()
    if value and normalise_dtype(value):
        return normalise_dtype(value), "recorded by the run"
    if isinstance(run.config, ServerSpec) and run.config.model_architecture is not None:
        found = config_dtype(run.config.model_architecture.config)
        if found is not None:
            return found, f"the model's config.json ({run.config.model_architecture.path})"
    if arch.dtype is not None:
        return arch.dtype, f"the model's config ({arch.source})"
    note = "the run does not record the dtype: 16-bit assumed"
    if run.engine == "ollama":
        note += " (Ollama usually serves 4-bit GGUF weights: MBU would then be about 3.5x too high)"
    return None, note


@dataclass(frozen=True, slots=True)
class _Load:
    input_len: float
    output_len: float
    in_tps: float
    out_tps: float
    concurrency: float | None
    concurrency_how: str
    steps_per_s: float | None
    steps_how: str
    ttft_s: float | None


def _load_of(run: RunInfo, summary: RunSummary) -> _Load | str:
    """The workload the figures need, or why it is not there."""
    if isinstance(summary, PublishedSummary):
        s = summary
        if s.input_len is None or s.input_tokens_per_s is None:
            return f"the point does not publish its mean input length ({s.input_len_reason})"
        conc, how = (float(s.concurrency), "published concurrency") if s.concurrency else (None, "")
        steps, steps_how = None, "the point publishes neither tokens/s per user nor TPOT"
        if s.tokens_per_s_per_user:
            steps, steps_how = s.tokens_per_s_per_user, "published tokens/s per user (1 ÷ TPOT)"
        elif s.tpot_ms:
            steps, steps_how = 1000.0 / s.tpot_ms, "1000 ÷ published TPOT"
        if conc is None and steps:
            conc = s.output_tokens_per_s / steps
            how = "output tok/s ÷ tokens/s per user (sequences decoding at once)"
        return _Load(s.input_len, s.output_len, s.input_tokens_per_s, s.output_tokens_per_s, conc, how,
                     steps, steps_how, None if s.ttft_ms is None else s.ttft_ms / 1000.0)
    if not isinstance(summary, TextGenerationSummary):
        return "MBU and MFU are defined for text generation (this run measured another kind of work)"
    s2 = summary
    if not s2.num_ok or not s2.output_tokens_total:
        return "no successful request produced output tokens"
    conc_value = getattr(s2, "concurrency", None) or run.config.fixed_concurrency()
    in_flight: float | None = float(conc_value) if conc_value else None
    how = "the run's fixed concurrency" if in_flight else ""
    e2e = s2.e2e_ms.mean
    if in_flight is None and s2.requests_per_s and e2e:
        in_flight = s2.requests_per_s * e2e / 1000.0
        how = "requests/s × mean E2E (Little's law: the mean in flight)"
    tpot = s2.tpot_ms.mean or s2.itl_ms.mean
    steps = 1000.0 / tpot if tpot else None
    steps_how = ("1000 ÷ mean TPOT (decode time only)" if s2.tpot_ms.mean else "1000 ÷ mean ITL") if steps \
        else "no request had a TPOT (none streamed more than one token)"
    ttft = s2.ttft_ms.mean
    return _Load(s2.input_tokens_total / s2.num_ok, s2.output_tokens_total / s2.num_ok,
                 s2.input_tokens_per_s or 0.0, s2.output_tokens_per_s or 0.0, in_flight, how, steps,
                 steps_how, None if ttft is None else ttft / 1000.0)


def replica_devices(arch: ModelArch, spec: GpuSpec, devices: int, wbytes: float, extra_bytes: float) -> int:
    """The fewest devices (``devices`` doubled until it fits) whose usable memory holds the weights and
    ``extra_bytes`` per device-count multiple of ``devices`` (the KV of the point's sequences)."""
    mem = spec.device_figure("memory_gb").value
    if mem is None:
        return devices
    n = devices
    while n < 1024:
        if arch.params * wbytes + extra_bytes * n / devices <= n * mem * 1e9 * USABLE_MEMORY_FRACTION:
            return n
        n *= 2
    return n


# ---- the figures ----------------------------------------------------------------------------------
def run_efficiency(
    run: RunInfo,
    summary: RunSummary | None = None,
    *,
    catalog: Catalog | None = None,
    gpu: str | None = None,
    gpus: int | None = None,
) -> Efficiency:
    """MBU, MFU and prefill MFU of ``run`` (of ``summary``: a sweep's priced stage; default the run's).
    ``gpu``/``gpus``: the GPU that served a run with no telemetry of its devices (``cost --gpu``)."""
    try:
        return _efficiency(run, summary if summary is not None else run.summary, catalog, gpu, gpus)
    except GpuledgerError as exc:  # a model config the arithmetic refuses, a catalog file that is wrong
        return Efficiency.missing(exc.message)


def _efficiency(run: RunInfo, summary: RunSummary | None, catalog: Catalog | None, gpu: str | None,
                gpus: int | None) -> Efficiency:
    if summary is None:
        return Efficiency.missing("the run has no summary")
    origin = summary.origin()
    label = f"measured by run {run.id}" if origin is None else f"derived by gpuledger from rates {origin.by}"
    load = _load_of(run, summary)
    if isinstance(load, str):
        return Efficiency.missing(load, label, applies=isinstance(summary, TextGenerationSummary))
    cat = catalog if catalog is not None else load_catalog()
    spec, n, why, fig_origin = _gpu_of(run, summary, cat, gpu, gpus)
    if spec is None:
        return Efficiency.missing(why, label)
    arch, why = model_of(run)
    if arch is None:
        return Efficiency.missing(why, label)
    dtype, dtype_how = _dtype_of(run, summary, arch)
    wb, wb_how = weight_bytes(dtype)
    kb, kb_how = kv_bytes(dtype)
    assumptions = [] if dtype else [dtype_how]
    context = load.input_len + load.output_len / 2.0
    reasons: dict[str, str] = {}
    basis: dict[str, Any] = {
        "model": arch.label, "gpu": spec.name, "devices": n, "dtype": dtype, "dtype_source": dtype_how,
        "weight_bytes_per_param": wb, "kv_bytes_per_element": kb, "kv_bytes_source": kb_how,
        "mean_input_tokens": load.input_len, "mean_output_tokens": load.output_len,
        "mean_decode_context_tokens": context,
    }
    peak_f, basis_f = peak_compute(spec, dtype)
    bw = peak_bandwidth(spec)
    # A published point normalised per GPU of a model one GPU cannot hold ran on a replica of several.
    replica = n
    conc = load.concurrency
    if fig_origin == DERIVED and conc is not None:
        kv_point = kv_cache_bytes(arch.kv_elements_per_token, kb, load.input_len + load.output_len, conc)
        replica = replica_devices(arch, spec, n, wb, kv_point)
        if replica != n:
            assumptions.append(
                f"the point's rates are for {n} GPU(s) but {arch.name} at {wb:g} bytes per weight needs "
                f"more memory: assumed one replica spans {replica} GPUs (the fewest, doubling, whose usable "
                f"{USABLE_MEMORY_FRACTION:.0%} of memory holds the weights and the KV cache), serving "
                f"{replica // n}x the point's sequences"
            )
    mbu: float | None = None
    if bw.value is None:
        reasons["mbu"] = f"{spec.name} has no memory bandwidth in the catalog"
    elif conc is None:
        reasons["mbu"] = "the sequences in flight are not known (no concurrency, no requests/s and E2E)"
    elif load.steps_per_s is None:
        reasons["mbu"] = load.steps_how
    else:
        seqs = conc * replica / n
        weights = arch.read_params_per_step(seqs) * wb
        kv = kv_cache_bytes(arch.kv_elements_per_token, kb, context, seqs)
        mbu = (weights + kv) * load.steps_per_s / (replica * bw.value * TB)
        if mbu > 1.0:
            assumptions.append(
                f"MBU {pct_text(mbu)} is over 100 %: a decode step cannot read that much — the model, its "
                "dtype (quantised weights read as 16-bit?) or the GPU is not what the run served"
            )
        basis.update(sequences_in_flight=seqs, sequences_source=load.concurrency_how,
                     weight_bytes_per_step=weights, kv_bytes_per_step=kv, bytes_per_step=weights + kv,
                     decode_steps_per_s=load.steps_per_s, decode_steps_source=load.steps_how,
                     replica_devices=replica, peak_bandwidth_tb_s=bw.value)
    mfu: float | None = None
    prefill: float | None = None
    if peak_f.value is None:
        reasons["mfu"] = reasons["prefill_mfu"] = f"{spec.name} has no dense FLOPS figure in the catalog"
    else:
        prefill_per_token = arch.prefill_flops(load.input_len) / load.input_len if load.input_len else 0.0
        decode_per_token = arch.flops_per_token(context)
        flops = load.in_tps * prefill_per_token + load.out_tps * decode_per_token
        mfu = flops / (n * peak_f.value * TB)
        basis.update(flops_per_s=flops, prefill_flops_per_input_token=prefill_per_token,
                     decode_flops_per_output_token=decode_per_token, peak_tflops=peak_f.value,
                     peak_tflops_basis=basis_f)
        if load.ttft_s and load.input_len:
            batch = conc if isinstance(run.config, TorchSpec) and conc else 1.0
            prefill = batch * arch.prefill_flops(load.input_len) / load.ttft_s / (replica * peak_f.value * TB)
            basis["prefill_batch"] = batch
            if not isinstance(run.config, TorchSpec):
                assumptions.append("prefill MFU from the mean TTFT, which includes queueing: a lower bound")
        else:
            reasons["prefill_mfu"] = "no TTFT (prefill time) recorded"
    lower = prefill is not None and not isinstance(run.config, TorchSpec)
    premises: tuple[str, ...] = ()
    if fig_origin == DERIVED:
        premises, listed = _derived_premises(replica, n, wb, dtype, dtype_how, kb, kb_how, load)
        assumptions = [*listed, *(a for a in assumptions if a not in listed)]
    return Efficiency(fig_origin, label, mbu, mfu, prefill, reasons, spec.key, n, arch.name, dtype, basis,
                      assumptions, lower, premises=premises)


def _derived_premises(replica: int, n: int, wb: float, dtype: str | None, dtype_how: str, kb: float,
                      kb_how: str, load: _Load) -> tuple[tuple[str, ...], list[str]]:
    """What gpuledger assumed to derive a published point's MBU and MFU: (a few words each, the sentences)."""
    size = f"{wb:g} byte{'' if wb == 1 else 's'}"
    short = [f"one replica of {replica} GPU{'s' if replica > 1 else ''}",
             f"{dtype or '16-bit'} weights ({size})", f"{kb:g}-byte KV cache"]
    listed = [
        f"derived from published: one replica spans {replica} GPU(s)" + (
            "" if replica != n else " (the point's own GPU count)"),
        f"derived from published: weights at {size} each ({dtype_how})",
        f"derived from published: {kb_how}",
    ]
    if load.concurrency is not None:
        listed.append(f"derived from published: sequences in flight from {load.concurrency_how}")
        if load.concurrency_how != "published concurrency":
            short.append("sequences in flight from tok/s per user")
    if load.steps_per_s is not None:
        listed.append(f"derived from published: decode steps per second from {load.steps_how}")
    return tuple(short), listed
