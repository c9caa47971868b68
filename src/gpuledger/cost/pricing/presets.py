"""Built-in cost presets (derived from the GPU catalog + ``data/cost_presets.yaml``), loading a profile by
name or file, and choosing a default profile for a run."""

from __future__ import annotations

import datetime as dt
import difflib
import functools
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpuledger.catalog import Catalog, GpuSpec, load_catalog
from gpuledger.catalog.catalog import parse_yaml_mapping, validation_message
from gpuledger.catalog.model import Confidence, Figure, Segment, SourceIn
from gpuledger.cost.pricing.profile import (
    MONEY_FIELDS,
    CostProfile,
    normalise_arch,
    parse_profile,
    read_profile_file,
    unknown_field_error,
)
from gpuledger.cost.pricing.runview import cpu_device, cpu_threads, gpu_devices
from gpuledger.errors import InvalidInputError, NotFoundError
from gpuledger.records import RunInfo

PRESETS_NAME = "cost_presets.yaml"
MAX_EXTENDS_DEPTH = 5


class PresetFigure(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    value: float = Field(ge=0)
    source: str
    confidence: Confidence = "published"
    note: str | None = None


class CpuDefaults(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tdp_w_per_thread: PresetFigure
    power_fraction_of_tdp: PresetFigure
    rental_per_vcpu_hour: PresetFigure  # arm64 (AWS Graviton)
    rental_per_vcpu_hour_x86_64: PresetFigure


Tier = Literal["hyperscaler", "neocloud", "rental"]
TIERS: tuple[Tier, ...] = ("hyperscaler", "neocloud", "rental")
# The tier the old ``<gpu>-inferencex`` preset always was.
LEGACY_TIER: Tier = "neocloud"
TIER_WORDS: dict[Tier, str] = {
    "hyperscaler": "owning as a hyperscaler, 4-year economic life",
    "neocloud": "owning as a large neocloud, 4-year economic life",
    "rental": "renting from a neocloud, 3-year contract with 25 % upfront",
}


class GpuTiers(BaseModel):
    """One GPU's InferenceX $/GPU-hour on each tier."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    hyperscaler: float = Field(gt=0, le=1e6)
    neocloud: float = Field(gt=0, le=1e6)
    rental: float = Field(gt=0, le=1e6)


class InferencexTiers(BaseModel):
    """``inferencex_tiers:``: the three $/GPU-hour tiers per catalog GPU, their source and what they mean."""

    model_config = ConfigDict(extra="forbid")

    source: str
    meaning: str
    gpus: dict[str, GpuTiers]


class PresetsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: Literal["gpuledger-cost-presets"]
    version: Literal[1]
    sources: dict[str, SourceIn]
    ownership: dict[Segment, dict[str, PresetFigure]]
    rental: dict[str, PresetFigure]
    inferencex_tiers: InferencexTiers | None = None
    cpu: CpuDefaults
    profiles: dict[str, dict[str, Any]] = Field(default_factory=dict)


@functools.lru_cache(maxsize=1)
def presets_file() -> PresetsFile:
    text = resources.files("gpuledger").joinpath("data", PRESETS_NAME).read_text(encoding="utf-8")
    where = f"built-in {PRESETS_NAME}"
    try:
        doc = PresetsFile.model_validate(parse_yaml_mapping(text, where))
    except ValidationError as exc:
        raise InvalidInputError(validation_message(exc, where)) from exc
    return doc


def provenance(fig: PresetFigure, doc: PresetsFile) -> str:
    """``"Uptime Institute ... (2024)"`` (+ ``", estimate"``, ``"; note"``)."""
    src = doc.sources.get(fig.source)
    if src is None:
        raise InvalidInputError(f"built-in {PRESETS_NAME}: unknown source {fig.source!r}")
    text = f"{src.title.strip()} ({src.date})"
    if fig.confidence == "estimate":
        text += ", estimate"
    if fig.note:
        text += f"; {fig.note}"
    return text


def catalog_provenance(fig: Figure) -> str:
    text = f"catalog: {fig.provenance()}"
    if fig.note:
        text += f"; {fig.note}"
    return text


@dataclass(frozen=True, slots=True)
class CpuPowerDefaults:
    tdp_w_per_thread: float
    power_fraction_of_tdp: float
    rental_per_vcpu_hour: float
    tdp_source: str
    fraction_source: str
    rental_source: str
    arch: str  # the architecture whose instance price ``rental_per_vcpu_hour`` is




def cpu_defaults(arch: str | None = None) -> CpuPowerDefaults:
    """CPU power defaults and the cloud price of a vCPU of ``arch`` (x86_64 or arm64; an unknown
    architecture gets the arm64 price, the default ``cpu-cloud`` preset)."""
    doc = presets_file()
    c = doc.cpu
    x86 = arch is not None and normalise_arch(arch) == "x86_64"
    rent = c.rental_per_vcpu_hour_x86_64 if x86 else c.rental_per_vcpu_hour
    return CpuPowerDefaults(
        c.tdp_w_per_thread.value,
        c.power_fraction_of_tdp.value,
        rent.value,
        provenance(c.tdp_w_per_thread, doc),
        provenance(c.power_fraction_of_tdp, doc),
        provenance(rent, doc),
        "x86_64" if x86 else "arm64",
    )


def _defaults(block: dict[str, PresetFigure], doc: PresetsFile) -> tuple[dict[str, Any], dict[str, str]]:
    values = {name: fig.value for name, fig in block.items()}
    sources = {name: provenance(fig, doc) for name, fig in block.items()}
    return values, sources


def tier_name(key: str, tier: Tier) -> str:
    """``b200-inferencex-hyperscaler``: the preset of one GPU's InferenceX tier."""
    return f"{key}-inferencex-{tier}"


def _source_text(doc: PresetsFile, key: str) -> str:
    src = doc.sources.get(key)
    if src is None:
        raise InvalidInputError(f"built-in {PRESETS_NAME}: unknown source {key!r}")
    return f"{src.title.strip()} ({src.date}){f' {src.url}' if src.url else ''}"


def tier_presets(spec: GpuSpec, doc: PresetsFile) -> list[CostProfile]:
    """``<key>-inferencex-{hyperscaler,neocloud,rental}`` and the old ``<key>-inferencex`` (the neocloud
    tier) for a GPU with InferenceX tiers; [] for one without."""
    tiers = doc.inferencex_tiers
    prices = tiers.gpus.get(spec.key) if tiers is not None else None
    if tiers is None or prices is None:
        return []
    out: list[CostProfile] = []
    for tier in TIERS:
        values, sources = _defaults(doc.rental, doc)
        price = float(getattr(prices, tier))
        sources["rental_per_gpu_hour"] = f"{_source_text(doc, tiers.source)}: {spec.name}, {tier} tier"
        description = (
            f"{spec.name} at SemiAnalysis InferenceX's {tier} tier, {price:g} USD per GPU-hour all-in "
            f"({TIER_WORDS[tier]}, the segment as {_source_text(doc, tiers.meaning)} describes it; their "
            "capex/opex inputs are not public)"
        )
        out.append(CostProfile(name=tier_name(spec.key, tier), description=description, currency="USD",
                               rental_per_gpu_hour=price, sources=sources, **values))
        if tier == LEGACY_TIER:
            out.append(out[-1].model_copy(update={
                "name": f"{spec.key}-inferencex",
                "description": f"{description}; the same as {tier_name(spec.key, tier)} (its old name)",
            }))
    return out


def gpu_presets(spec: GpuSpec, doc: PresetsFile) -> list[CostProfile]:
    """``<key>-own``, ``<key>-rent``, ``<key>-inferencex`` (and the InferenceX tiers) for one catalog GPU
    (those its figures allow)."""
    out: list[CostProfile] = []
    price = spec.figure("launch_price_usd")
    if price.value is not None:
        values, sources = _defaults(doc.ownership[spec.segment], doc)
        sources["gpu_price"] = catalog_provenance(price)
        out.append(
            CostProfile(
                name=f"{spec.key}-own",
                description=f"{spec.name}, owned: {'street' if price.is_estimate else 'launch'} price "
                f"amortised over {values.get('amortisation_months', 48):g} months, {spec.segment} defaults",
                currency="USD",
                gpu_price=price.value,
                sources=sources,
                **values,
            )
        )
    rent = spec.figure("rental_usd_per_gpu_hour")
    if rent.value is not None:
        values, sources = _defaults(doc.rental, doc)
        sources["rental_per_gpu_hour"] = catalog_provenance(rent)
        out.append(
            CostProfile(
                name=f"{spec.key}-rent",
                description=f"{spec.name}, rented on demand at a typical neocloud rate",
                currency="USD",
                rental_per_gpu_hour=rent.value,
                sources=sources,
                **values,
            )
        )
    tiered = tier_presets(spec, doc)
    out.extend(tiered)
    ix = spec.figure("inferencex_usd_per_gpu_hour")
    if ix.value is not None and not tiered:
        values, sources = _defaults(doc.rental, doc)
        sources["rental_per_gpu_hour"] = catalog_provenance(ix)
        out.append(
            CostProfile(
                name=f"{spec.key}-inferencex",
                description=f"{spec.name} at SemiAnalysis InferenceX's all-in neocloud-owned $/GPU-hour "
                "(their capex/opex inputs are not public)",
                currency="USD",
                rental_per_gpu_hour=ix.value,
                sources=sources,
                **values,
            )
        )
    return out


def builtin_presets(catalog: Catalog | None = None) -> dict[str, CostProfile]:
    """Every built-in preset by name: catalog-derived ones, then the hand-written ones."""
    doc = presets_file()
    cat = catalog if catalog is not None else load_catalog()
    out: dict[str, CostProfile] = {}
    for spec in cat:
        for prof in gpu_presets(spec, doc):
            out[prof.name] = prof
    for name, raw in doc.profiles.items():
        data = dict(raw)
        data["name"] = name
        data["sources"] = {
            str(k): provenance(PresetFigure(value=0, source=str(v)), doc)
            for k, v in dict(raw.get("sources", {})).items()
        }
        out[name] = parse_profile(data, f"built-in {PRESETS_NAME}: profiles.{name}")
    return out


def _looks_like_path(text: str) -> bool:
    return text.endswith((".yaml", ".yml")) or "/" in text or "\\" in text or Path(text).is_file()


class ExchangeRate(BaseModel):
    """``exchange_rate:`` in a profile file that ``extends`` a profile in another currency: converts
    the money fields it inherits. ``rate`` is units of this file's ``currency`` per one unit of
    ``from`` (USD -> CNY 7.1: 1 USD = 7.1 CNY), with where the rate came from and its date."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, populate_by_name=True)

    from_: str = Field(alias="from", pattern=r"^[A-Za-z]{3}$")
    rate: float = Field(gt=0, le=1e9)
    source: str = Field(min_length=1, max_length=500)
    date: dt.date


def _check_keys(data: dict[Any, Any], where: str) -> None:
    """A file named as a profile must look like one: its keys are profile fields (or ``extends``,
    ``exchange_rate``). Errors never echo what the file holds beyond a key that is a field name."""
    known = set(CostProfile.model_fields) | {"extends", "exchange_rate"}
    if data and not any(isinstance(k, str) and k in known for k in data):
        raise InvalidInputError(
            f"{where}: not a cost profile (none of its {len(data):,} top-level keys is a profile field)",
            hint="see docs/cost.md for the fields of a cost profile",
        )
    for key in data:
        if key not in known:
            raise unknown_field_error(key, where)


def _money(profile: CostProfile, name: str) -> str:
    return f"{name} ({getattr(profile, name):,g} {profile.unit(name)})"


def _convert_currency(
    data: dict[str, Any], base: CostProfile, extends: str, merged: dict[str, Any], sources: dict[str, str],
    user_fields: set[str], where: str,
) -> None:
    """The money fields ``merged`` inherits from ``base`` are in ``base.currency``: refuse a change of
    currency that would re-label them, or convert them at the file's ``exchange_rate``."""
    raw_rate = data.pop("exchange_rate", None)
    cur = data.get("currency", base.currency)
    cur = cur.strip().upper() if isinstance(cur, str) else cur
    inherited = [f for f in MONEY_FIELDS if f not in user_fields and getattr(base, f)]
    if cur == base.currency:
        if raw_rate is not None:
            raise InvalidInputError(
                f"{where}: exchange_rate: applies only when this file's currency differs from the "
                f"profile it extends ({extends} is in {base.currency}, and so is this file)"
            )
        return
    if raw_rate is None:
        if inherited:
            raise InvalidInputError(
                f"{where}: currency {cur}, but {', '.join(_money(base, f) for f in inherited)} "
                f"{'is' if len(inherited) == 1 else 'are'} inherited from {extends} in {base.currency}: "
                "the numbers would be re-labelled, not converted",
                hint=f"give those fields in {cur} in this file, or convert them with exchange_rate: "
                f"{{from: {base.currency}, rate: <{cur} per {base.currency}>, source: \"where the rate "
                "comes from\", date: YYYY-MM-DD}",
            )
        return
    try:
        rate = ExchangeRate.model_validate(raw_rate)
    except ValidationError as exc:
        raise InvalidInputError(validation_message(exc, f"{where}: exchange_rate")) from exc
    if rate.from_.upper() != base.currency:
        raise InvalidInputError(
            f"{where}: exchange_rate.from is {rate.from_.upper()}, but {extends} is in {base.currency}"
        )
    for name in inherited:
        merged[name] = getattr(base, name) * rate.rate
        sources[name] = (
            f"{base.source_of(name)}; converted from {getattr(base, name):,g} {base.currency} at "
            f"{rate.rate:g} {cur} per {base.currency} ({rate.source}, {rate.date.isoformat()})"
        )


def _from_file(path: Path, catalog: Catalog | None, depth: int) -> CostProfile:
    data = read_profile_file(path)
    where = f"profile {path}"
    _check_keys(data, where)
    extends = data.pop("extends", None)
    user_fields = {k for k in data if k not in ("name", "description", "sources", "exchange_rate")}
    own_sources = data.get("sources", {})
    if not isinstance(own_sources, dict):
        raise InvalidInputError(
            f"{where}: sources: expected a mapping of field -> where the figure came from"
        )
    sources = {k: f"profile file {path}" for k in user_fields}
    merged: dict[str, Any] = {}
    if extends is not None:
        if not isinstance(extends, str) or not extends:
            raise InvalidInputError(f"{where}: extends: expected a preset name or a file path")
        if depth >= MAX_EXTENDS_DEPTH:
            raise InvalidInputError(f"{where}: extends: more than {MAX_EXTENDS_DEPTH} levels (a cycle?)")
        base_ref = extends if not _looks_like_path(extends) else str((path.parent / extends).resolve())
        try:
            base = _load(base_ref, catalog, depth + 1)
        except (InvalidInputError, NotFoundError) as exc:
            raise type(exc)(f"{where}: extends: {exc.message}", hint=exc.hint) from exc
        merged = base.model_dump()
        sources = {k: v for k, v in base.sources.items() if k not in user_fields} | sources
        _convert_currency(data, base, extends, merged, sources, user_fields, where)
    elif "exchange_rate" in data:
        raise InvalidInputError(
            f"{where}: exchange_rate: applies only with extends (it converts the money fields a file "
            "inherits from a profile in another currency)"
        )
    merged.update(data)
    merged["sources"] = sources | {str(k): str(v) for k, v in own_sources.items()}
    merged.setdefault("name", path.stem)
    if "name" not in data:
        merged["name"] = path.stem
    return parse_profile(merged, where)


def _load(name_or_path: str, catalog: Catalog | None, depth: int) -> CostProfile:
    if _looks_like_path(name_or_path):
        return _from_file(Path(name_or_path).expanduser(), catalog, depth)
    presets = builtin_presets(catalog)
    found = presets.get(name_or_path)
    if found is not None:
        return found
    near = difflib.get_close_matches(name_or_path, list(presets), n=4, cutoff=0.5)
    hint = (f"did you mean: {', '.join(near)}? " if near else "") + "`gpuledger profiles` lists the presets"
    raise NotFoundError(f"no cost profile {name_or_path!r} (neither a preset nor a file)", hint=hint)


def load_profile(name_or_path: str, catalog: Catalog | None = None) -> CostProfile:
    """A preset by name (``h100-sxm-own``) or a YAML file (which may start from a preset with
    ``extends: <preset or file>`` and override fields). Errors name the field (InvalidInputError) or
    the missing profile (NotFoundError)."""
    return _load(name_or_path, catalog, 0)


def gpu_default_profile(spec: GpuSpec) -> CostProfile:
    """The default preset for a run on ``spec``: ``-own``, else ``-rent``, else ``-inferencex``."""
    presets = {p.name: p for p in gpu_presets(spec, presets_file())}
    for suffix in ("-own", "-rent", "-inferencex"):
        if f"{spec.key}{suffix}" in presets:
            return presets[f"{spec.key}{suffix}"]
    raise NotFoundError(
        f"the catalog has no price for {spec.name} (neither a purchase price nor a rental rate)",
        hint="write a cost profile (docs/cost.md) and pass it with --profile",
    )


def default_profile_for(run: RunInfo, catalog: Catalog | None = None) -> CostProfile:
    """A starting profile for a run: the catalog preset of the GPU it ran on (or, for a published point,
    was published on; ownership when the catalog knows a purchase price, else rental), or for a CPU-only
    run ``cpu-cloud`` scaled to the run's logical CPU count when recorded. Every figure keeps its source in
    ``profile.sources``."""
    cat = catalog if catalog is not None else load_catalog()
    used, _idle = gpu_devices(run)
    origin = run.summary.origin() if run.summary is not None and not used else None
    if origin is not None and origin.gpu:
        # A published point: the catalog preset of the GPU it was published on.
        return gpu_default_profile(cat.resolve(origin.gpu))
    if used:
        names = sorted({d.name for d in used})
        spec = cat.find(names[0])
        if spec is None:
            raise NotFoundError(
                f"run {run.id} ran on {names[0]!r}, which is not in the GPU catalog",
                hint="pass --profile with your own prices, or add the GPU to the catalog (docs/cost.md)",
            )
        return gpu_default_profile(spec)
    if cpu_device(run) is None and not run.telemetry_summary:
        raise InvalidInputError(
            f"run {run.id} records no devices (no telemetry summary): there is nothing to base a default "
            "cost profile on",
            hint="pass --profile with your prices (and power_w, gpu_count)",
        )
    base = builtin_presets(cat)["cpu-cloud"]
    threads = cpu_threads(run)
    arch = run_arch(run)
    defaults = cpu_defaults(arch)
    if threads is None and defaults.arch == "arm64":
        return base
    vcpus = threads or 2  # the presets' reference instance size (2 vCPU) when the run does not say
    sources = dict(base.sources)
    counted = f"{threads} logical CPUs recorded in run {run.id}" if threads else "2 vCPU (not recorded)"
    sources["rental_per_hour"] = f"{defaults.rental_source} x {counted}"
    return base.model_copy(
        update={
            "name": f"cpu-cloud-{defaults.arch}-{vcpus}vcpu",
            "description": f"CPU-only run priced as a {vcpus}-vCPU {defaults.arch} cloud instance "
            f"(the run's architecture: {arch or 'not recorded'})",
            "rental_per_hour": defaults.rental_per_vcpu_hour * vcpus,
            "cpu_arch": defaults.arch,
            "sources": sources,
        }
    )


def run_arch(run: RunInfo) -> str | None:
    """The CPU architecture the run's machine had (its environment fingerprint's ``arch``)."""
    return run.environment.arch or None
