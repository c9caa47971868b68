"""Loading the GPU catalog (built-in data + the user's additions) and looking parts up."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import platformdirs
from pydantic import ValidationError

from gpuledger.boundeddoc import yaml_mapping
from gpuledger.boundedio import read_text
from gpuledger.catalog.model import (
    BARE_SOURCE,
    FIGURE_UNITS,
    PCI_VENDOR_IDS,
    CatalogFile,
    Fact,
    FactIn,
    Figure,
    FigureIn,
    GpuIn,
    GpuSpec,
    SourceIn,
    parse_hex_id,
)
from gpuledger.catalog.names import close_matches, normalise_name
from gpuledger.errors import InvalidInputError, NotFoundError

CATALOG_ENV = "GPULEDGER_CATALOG"
BUILTIN_NAME = "gpu_catalog.yaml"
# A YAML file a user names (a catalog's overrides, a matrix plan): gpuledger's own are a few KB.
MAX_YAML_FILE_BYTES = 16 * 1024**2


def user_catalog_path() -> Path:
    """Where the user's own entries live: ``$GPULEDGER_CATALOG``, else
    ``<user config dir>/gpuledger/gpus.yaml``."""
    env = os.environ.get(CATALOG_ENV)
    if env:
        return Path(env).expanduser()
    return Path(platformdirs.user_config_dir("gpuledger")) / "gpus.yaml"


def validation_message(exc: ValidationError, where: str) -> str:
    """One line naming the field, e.g.
    ``"gpus.yaml: gpus.my-gpu.memory_gb.value: Input should be a valid number"``."""
    first = exc.errors()[0]
    loc = ".".join(str(p) for p in first["loc"])
    msg = first["msg"]
    if first["type"] == "extra_forbidden":
        msg = "unknown field"
    more = len(exc.errors()) - 1
    tail = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
    return f"{where}: {loc or '(top level)'}: {msg}{tail}"


def read_yaml_mapping(path: Path, what: str) -> dict[str, Any]:
    """A YAML file that must hold a mapping, at most ``MAX_YAML_FILE_BYTES`` and within the bounds of
    ``gpuledger.boundeddoc``; errors name the file."""
    try:
        text = read_text(path, MAX_YAML_FILE_BYTES, what=f"{what} {path}")  # /dev/zero, a FIFO: bounded
    except FileNotFoundError as exc:
        raise NotFoundError(f"{what} not found: {path}") from exc
    except OSError as exc:
        raise InvalidInputError(f"{what} {path} cannot be read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise InvalidInputError(
            f"{what} {path}: not UTF-8 text (byte {exc.start:,}; a binary file?)"
        ) from None
    return parse_yaml_mapping(text, f"{what} {path}")


# A YAML text that must hold a mapping, parsed within boundeddoc's bounds (nesting, aliases).
parse_yaml_mapping = yaml_mapping


class Catalog:
    """GPU specifications by key, name and PCI id. Later files override earlier entries with the same key."""

    def __init__(self) -> None:
        self._gpus: dict[str, GpuSpec] = {}
        self._sources: dict[str, SourceIn] = {}
        self.files: list[str] = []

    # ------------------------------------------------------------------ building
    def add_file(self, doc: CatalogFile, origin: str) -> None:
        self._sources.update(doc.sources)
        for key, entry in doc.gpus.items():
            self._gpus[key] = self._build(key, entry, origin)
        self.files.append(origin)

    def _figure(self, key: str, name: str, fig: FigureIn | None, origin: str) -> Figure | None:
        if fig is None:
            return None
        unit = FIGURE_UNITS[name]
        if fig.value is None:
            return Figure(None, unit, reason=fig.reason, note=fig.note)
        src_id = fig.source or ""
        src = self._sources.get(src_id)
        if src is None:
            raise InvalidInputError(
                f"{origin}: gpus.{key}.{name}.source: unknown source {src_id!r} (add it under `sources:`)"
            )
        return Figure(
            value=fig.value,
            unit=unit,
            source=src.title.strip(),
            source_id=src_id,
            url=src.url,
            date=fig.date or src.date,
            confidence=fig.confidence,
            note=fig.note,
            low=fig.low,
            high=fig.high,
        )

    def _fact(self, key: str, name: str, fact: FactIn | None, origin: str) -> Fact | None:
        if fact is None:
            return None
        value: str | int | None = getattr(fact, "value", None)
        if value is None:
            return Fact(None, reason=fact.reason, note=fact.note)
        if fact.source == BARE_SOURCE:  # a bare value in the file: as written there
            return Fact(value, source=f"as written in {origin}", note=fact.note)
        src_id = fact.source or ""
        src = self._sources.get(src_id)
        if src is None:
            raise InvalidInputError(
                f"{origin}: gpus.{key}.{name}.source: unknown source {src_id!r} (add it under `sources:`)"
            )
        return Fact(value=value, source=src.title.strip(), source_id=src_id, url=src.url,
                    date=fact.date or src.date, confidence=fact.confidence, note=fact.note)

    def _build(self, key: str, entry: GpuIn, origin: str) -> GpuSpec:
        figures: dict[str, Figure] = {}
        for name in FIGURE_UNITS:
            built = self._figure(key, name, getattr(entry, name), origin)
            if built is not None:
                figures[name] = built
        if entry.ids_source and entry.ids_source not in self._sources:
            raise InvalidInputError(f"{origin}: gpus.{key}.ids_source: unknown source {entry.ids_source!r}")
        return GpuSpec(
            key=key,
            vendor=entry.vendor,
            name=entry.name,
            segment=entry.segment,
            aliases=tuple(entry.aliases),
            architecture=self._fact(key, "architecture", entry.architecture, origin),
            launch_year=self._fact(key, "launch_year", entry.launch_year, origin),
            memory_type=entry.memory_type,
            compute_capability=entry.compute_capability,
            gfx_target=entry.gfx_target,
            pci_vendor_id=PCI_VENDOR_IDS.get(entry.vendor),
            pci_device_ids=tuple(parse_hex_id(d) for d in entry.pci_device_ids),
            pci_shared_with=tuple(entry.pci_shared_with),
            ids_confidence=entry.ids_confidence,
            logical_devices=entry.logical_devices,
            figures=figures,
            origin=origin,
        )

    # ------------------------------------------------------------------ lookups
    def __iter__(self) -> Iterator[GpuSpec]:
        return iter(self._gpus.values())

    def __len__(self) -> int:
        return len(self._gpus)

    def __contains__(self, key: object) -> bool:
        return key in self._gpus

    @property
    def sources(self) -> dict[str, SourceIn]:
        return dict(self._sources)

    def _name_index(self) -> dict[str, str]:
        """normalised name -> key; a later entry wins a name another entry also claims."""
        index: dict[str, str] = {}
        for spec in self._gpus.values():
            for label in (spec.key, spec.name, *spec.aliases):
                norm = normalise_name(label)
                if norm:
                    index[norm] = spec.key
        return index

    def find(self, name: str) -> GpuSpec | None:
        """The entry whose key, name or an alias equals ``name`` after normalisation, else None."""
        norm = normalise_name(name)
        if not norm:
            return None
        key = self._name_index().get(norm)
        return None if key is None else self._gpus[key]

    def suggestions(self, name: str) -> list[str]:
        return close_matches(name, self._name_index())

    def resolve(self, name: str) -> GpuSpec:
        """Like :meth:`find` but an unknown name is a NotFoundError that lists close entries."""
        spec = self.find(name)
        if spec is not None:
            return spec
        near = self.suggestions(name)
        hint = (f"did you mean: {', '.join(near)}? " if near else "") + (
            f"`gpuledger gpus` lists the catalog; add a part in {user_catalog_path()}"
        )
        raise NotFoundError(f"GPU {name!r} is not in the catalog", hint=hint)

    def find_pci_all(self, vendor_id: int | str, device_id: int | str) -> list[GpuSpec]:
        """Every entry listing this PCI id (several when a device id is shared by sibling cards)."""
        vid, did = parse_hex_id(vendor_id), parse_hex_id(device_id)
        return [s for s in self._gpus.values() if s.pci_vendor_id == vid and did in s.pci_device_ids]

    def find_pci(self, vendor_id: int | str, device_id: int | str) -> GpuSpec | None:
        """The entry for a PCI vendor/device id, or None when unknown or AMBIGUOUS: some ids are shared
        by sibling cards with different memory and bandwidth (0x744c is the RX 7900 XTX, XT and GRE),
        so the id alone cannot say which one it is; use :meth:`find` with the marketing name then."""
        hits = self.find_pci_all(vendor_id, device_id)
        if len(hits) != 1 or hits[0].pci_shared_with:
            return None
        return hits[0]

    def find_gfx(self, gfx_target: str) -> list[GpuSpec]:
        """AMD entries with this gfx target (``gfx942`` -> MI300X, MI325X)."""
        want = gfx_target.strip().lower()
        return [s for s in self._gpus.values() if (s.gfx_target or "").lower() == want]

    def get(self, key: str) -> GpuSpec:
        try:
            return self._gpus[key]
        except KeyError:
            raise NotFoundError(f"no catalog entry with key {key!r}") from None


def parse_catalog(data: dict[str, Any], where: str) -> CatalogFile:
    try:
        return CatalogFile.model_validate(data)
    except ValidationError as exc:
        raise InvalidInputError(validation_message(exc, where)) from exc


@functools.lru_cache(maxsize=1)
def _builtin() -> CatalogFile:
    text = resources.files("gpuledger").joinpath("data", BUILTIN_NAME).read_text(encoding="utf-8")
    return parse_catalog(parse_yaml_mapping(text, f"built-in {BUILTIN_NAME}"), f"built-in {BUILTIN_NAME}")


def load_catalog(extra: Path | None = None) -> Catalog:
    """The built-in catalog, then the user's file (``$GPULEDGER_CATALOG`` — which must exist when set —
    or ``<user config dir>/gpuledger/gpus.yaml`` when present), then ``extra``. Same key = override."""
    catalog = Catalog()
    catalog.add_file(_builtin(), "built-in")
    user = user_catalog_path()
    if os.environ.get(CATALOG_ENV) or user.is_file():
        catalog.add_file(parse_catalog(read_yaml_mapping(user, "GPU catalog file"), str(user)), str(user))
    if extra is not None:
        catalog.add_file(parse_catalog(read_yaml_mapping(extra, "GPU catalog file"), str(extra)), str(extra))
    return catalog
