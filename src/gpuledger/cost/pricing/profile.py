"""Cost profiles: what the user pays, in one currency, with units in the field names.

A profile is either OWNERSHIP (purchase price amortised over months + electricity + hosting) or RENTAL
(a price per GPU-hour or per instance-hour, energy included). Labour (setup hours amortised over the same
horizon, maintenance hours per month) and utilisation apply to both. Money fields are in ``currency``
(ISO 4217, default USD); the other units are in the names: ``_per_kwh``, ``_months``, ``_hours``, ``_w``.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gpuledger.catalog.catalog import parse_yaml_mapping
from gpuledger.errors import InvalidInputError, NotFoundError

HOURS_PER_MONTH = 730.0  # 8760 h / 12: a deployment exists around the clock
Mode = Literal["ownership", "rental"]

# Unit of each field (``{cur}`` = the profile's currency), for messages and docs.
FIELD_UNITS: dict[str, str] = {
    "currency": "ISO 4217 code",
    "gpu_price": "{cur} per GPU",
    "gpu_count": "GPUs",
    "host_price": "{cur} (the host server's share for this deployment, total)",
    "amortisation_months": "months",
    "electricity_per_kwh": "{cur} per kWh",
    "pue": "ratio >= 1 (facility power / IT power)",
    "hosting_per_month": "{cur} per month",
    "software_per_month": "{cur} per month",
    "rental_per_gpu_hour": "{cur} per GPU-hour",
    "rental_per_hour": "{cur} per instance-hour",
    "labour_rate_per_hour": "{cur} per hour",
    "setup_hours": "hours",
    "from_doctor_history": "true/false",
    "maintenance_hours_per_month": "hours per month",
    "utilisation": "fraction of wall time serving, in (0, 1]",
    "idle_power_w": "W per device",
    "power_w": "W (all the run's devices together)",
    "host_power_w": "W",
    "cpu_tdp_w": "W",
    "gpu": "GPU catalog key or name (for a run without telemetry of its devices)",
    "output_to_input_cost_ratio": "ratio (cost of an output token / an input token)",
}


# A cost profile is a few hundred bytes; a file far larger is not one (and would cost seconds to parse).
MAX_PROFILE_FILE_BYTES = 1_000_000
# No real price, count or duration comes near this; a figure beyond it is a typo, and keeping every
# input below it keeps every product of inputs finite (never "inf USD").
MAX_FIGURE = 1e15
MAX_NAME_CHARS = 200
MAX_TEXT_CHARS = 2_000
MAX_SOURCES = 64
# Money fields are those whose unit is in the profile's currency (FIELD_UNITS is the one list).
MONEY_FIELDS: tuple[str, ...] = tuple(k for k, unit in FIELD_UNITS.items() if "{cur}" in unit)
X86_NAMES = ("x86_64", "amd64", "i686", "x86")
ARM_NAMES = ("arm64", "aarch64", "armv8")


def normalise_arch(arch: str) -> str:
    """``x86_64`` or ``arm64`` for the names platforms give them (``AMD64``, ``aarch64``, …); any other name
    lowercased, as it is (the profile's field then refuses it)."""
    name = arch.strip().lower()
    return "x86_64" if name in X86_NAMES else "arm64" if name in ARM_NAMES else name


_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


class CostProfile(BaseModel):
    """A cost profile as written in YAML. See docs/cost.md for every field and formula.

    Every number must be finite (``.inf``/``.nan`` are refused when the profile is loaded) and at
    most ``MAX_FIGURE``; texts are bounded (``name``, ``description``, ``sources``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: str = Field(default="", max_length=MAX_NAME_CHARS)
    description: str = Field(default="", max_length=MAX_TEXT_CHARS)
    currency: str = "USD"
    # ownership
    gpu_price: float | None = Field(default=None, gt=0)
    gpu_count: int | None = Field(default=None, ge=1)
    host_price: float = Field(default=0.0, ge=0)
    amortisation_months: float = Field(default=48.0, gt=0)
    electricity_per_kwh: float | None = Field(default=None, gt=0)
    pue: float = Field(default=1.0, ge=1.0, le=3.0)
    hosting_per_month: float = Field(default=0.0, ge=0)
    software_per_month: float = Field(default=0.0, ge=0)
    # rental
    rental_per_gpu_hour: float | None = Field(default=None, gt=0)
    rental_per_hour: float | None = Field(default=None, gt=0)
    # labour
    labour_rate_per_hour: float = Field(default=0.0, ge=0)
    setup_hours: float = Field(default=0.0, ge=0)
    from_doctor_history: bool = False
    maintenance_hours_per_month: float = Field(default=0.0, ge=0)
    # usage and power
    utilisation: float = Field(default=1.0, gt=0, le=1.0)
    idle_power_w: float | None = Field(default=None, ge=0)
    power_w: float | None = Field(default=None, gt=0)
    host_power_w: float = Field(default=0.0, ge=0)
    cpu_tdp_w: float | None = Field(default=None, gt=0)
    # the GPU a run with no telemetry of its devices ran on (a server measured from another machine)
    gpu: str | None = Field(default=None, min_length=1, max_length=200)
    # the CPU architecture of the instance ``rental_per_hour`` prices (x86_64 or arm64): a CPU-only run of
    # another architecture is warned that its price is another architecture's
    cpu_arch: Literal["x86_64", "arm64"] | None = None
    # pricing input and output separately
    output_to_input_cost_ratio: float | None = Field(default=None, gt=0)
    # where each figure came from (field -> text); presets fill it, users may
    sources: dict[str, str] = Field(default_factory=dict, max_length=MAX_SOURCES)

    @field_validator("*")
    @classmethod
    def _bounded(cls, value: Any) -> Any:
        if isinstance(value, int | float) and not isinstance(value, bool) and abs(value) > MAX_FIGURE:
            raise ValueError(f"must be at most {MAX_FIGURE:g} (a figure this large is a typo)")
        if isinstance(value, dict):
            for key, text in value.items():
                if len(str(key)) > MAX_NAME_CHARS or len(str(text)) > MAX_TEXT_CHARS:
                    raise ValueError(
                        f"each entry is at most {MAX_NAME_CHARS} characters of field name and "
                        f"{MAX_TEXT_CHARS} of text"
                    )
        return value

    @field_validator("cpu_arch", mode="before")
    @classmethod
    def _arch(cls, value: Any) -> Any:
        return normalise_arch(value) if isinstance(value, str) else value

    @field_validator("currency")
    @classmethod
    def _currency(cls, value: str) -> str:
        code = value.strip().upper()
        if not re.fullmatch(r"[A-Z]{3}", code):
            raise ValueError(f"must be a 3-letter ISO 4217 code such as USD, EUR or CNY (got {value!r})")
        return code

    @model_validator(mode="after")
    def _one_mode(self) -> CostProfile:
        if self.rental_per_gpu_hour is not None and self.rental_per_hour is not None:
            raise ValueError("rental_per_hour: give rental_per_gpu_hour or rental_per_hour, not both")
        rental = self.rental_per_gpu_hour is not None or self.rental_per_hour is not None
        if rental:
            rate = "rental_per_gpu_hour" if self.rental_per_gpu_hour is not None else "rental_per_hour"
            for name in ("gpu_price", "electricity_per_kwh"):
                if getattr(self, name) is not None:
                    raise ValueError(
                        f"{name}: a profile is either ownership or rental, and {rate} makes it "
                        f"rental (energy is in the rental price); remove one of them"
                    )
            for name in ("host_price", "hosting_per_month"):
                if getattr(self, name):
                    raise ValueError(f"{name}: not part of a rental profile ({rate} is set)")
        else:
            if self.gpu_price is None and not self.host_price:
                raise ValueError(
                    "gpu_price: an ownership profile needs gpu_price (per GPU) or host_price; "
                    "for rented hardware set rental_per_gpu_hour instead"
                )
            if self.electricity_per_kwh is None:
                raise ValueError(
                    f"electricity_per_kwh: required for an ownership profile ({self.currency} per kWh)"
                )
        if self.from_doctor_history and self.setup_hours:
            raise ValueError("setup_hours: give setup_hours or from_doctor_history, not both")
        return self

    @property
    def mode(self) -> Mode:
        rental = self.rental_per_gpu_hour is not None or self.rental_per_hour is not None
        return "rental" if rental else "ownership"

    def unit(self, field_name: str) -> str:
        return FIELD_UNITS.get(field_name, "").replace("{cur}", self.currency)

    def source_of(self, field_name: str) -> str:
        """Where a figure came from: the profile's ``sources`` entry, else "profile <name>"."""
        return self.sources.get(field_name) or f"profile {self.name or '(unnamed)'}"

    def to_dict(self) -> dict[str, Any]:
        out = self.model_dump()
        if self.cpu_arch is None:
            del out["cpu_arch"]  # a profile that does not say is shown and stored as before
        out["mode"] = self.mode
        return out


def _close_field(name: str) -> str:
    near = difflib.get_close_matches(name, list(CostProfile.model_fields), n=1, cutoff=0.5)
    return f"; did you mean {near[0]!r}?" if near else ""


def is_field_name(key: object) -> bool:
    """Could ``key`` be a field name at all (a short identifier)? Anything else in a file named as a
    profile (a line of /etc/shadow, a blob) is not echoed back in messages."""
    return isinstance(key, str) and _FIELD_NAME.fullmatch(key) is not None


def unknown_field_error(key: object, where: str) -> InvalidInputError:
    hint = ("units are part of the field names (electricity_per_kwh, amortisation_months, ...); "
            "see docs/cost.md for the fields")
    if not is_field_name(key):
        return InvalidInputError(
            f"{where}: a top-level key that is not a field name (not shown: a cost profile's keys are "
            "short identifiers such as gpu_price)",
            hint=hint,
        )
    return InvalidInputError(f"{where}: unknown field {key!r}{_close_field(str(key))}", hint=hint)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:60]}… ({len(text) - 60:,} more characters)"


def profile_error(exc: ValidationError, where: str) -> InvalidInputError:
    """The first problem as one line naming the field, with its unit; the value it got is shown
    (shortened) only for fields the profile has."""
    err = exc.errors()[0]
    field_name = ".".join(str(p) for p in err["loc"])
    if err["type"] == "extra_forbidden":
        return unknown_field_error(err["loc"][0] if err["loc"] else field_name, where)
    msg = str(err["msg"]).removeprefix("Value error, ")
    if not field_name:
        # cross-field rules name their field first ("gpu_price: ...")
        return InvalidInputError(f"{where}: {msg}")
    got = err.get("input")
    unit = FIELD_UNITS.get(field_name, "").replace("{cur}", "the profile's currency")
    unit_txt = f" [{unit}]" if unit else ""
    got_txt = f" (got {_shown(got)})" if got is not None and not isinstance(got, dict) else ""
    return InvalidInputError(f"{where}: {field_name}{unit_txt}: {msg}{got_txt}")


def parse_profile(data: dict[str, Any], where: str) -> CostProfile:
    try:
        return CostProfile.model_validate(data)
    except ValidationError as exc:
        raise profile_error(exc, where) from exc


def profile_from_text(text: str, where: str) -> CostProfile:
    return parse_profile(parse_yaml_mapping(text, where), where)


def read_profile_file(path: Path) -> dict[str, Any]:
    """A profile file's mapping. Errors (one line, never the file's bytes): missing (NotFoundError),
    unreadable, larger than ``MAX_PROFILE_FILE_BYTES``, not UTF-8 text, not YAML, not a mapping
    (InvalidInputError)."""
    what = f"cost profile {path}"
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_PROFILE_FILE_BYTES + 1)
    except FileNotFoundError as exc:
        raise NotFoundError(f"cost profile not found: {path}") from exc
    except OSError as exc:
        raise InvalidInputError(f"{what} cannot be read: {exc.strerror or exc}") from exc
    if len(raw) > MAX_PROFILE_FILE_BYTES:
        raise InvalidInputError(
            f"{what}: larger than {MAX_PROFILE_FILE_BYTES:,} bytes; a cost profile is a short YAML file"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInputError(
            f"{what}: not UTF-8 text (byte {exc.start:,} cannot be decoded; a binary file?)"
        ) from None
    if "\x00" in text:
        raise InvalidInputError(f"{what}: contains NUL bytes (a binary file?)")
    return parse_yaml_mapping(text, what)
