"""AMD GPUs through amdsmi (ROCm's Python bindings), source ``amdsmi``. The only module that imports
amdsmi.

``import amdsmi`` without ROCm prints two lines to stdout and raises ``KeyError('libamd_smi.so')``;
the import is wrapped in ``redirect_stdout`` so that ``--json`` output stays clean, and ImportError,
OSError and KeyError all mean "amdsmi unavailable: <reason>". A package that fails that way is then put
out of reach (``sys.modules["amdsmi"] = None``): a later ``import amdsmi`` anywhere in the process — Ray
imports it while ``import ray`` runs, catching only ImportError — is a plain ImportError, not two lines on
stdout and a KeyError. ``guard_amdsmi`` runs the guarded import before such a library is imported.

Values and their traps, as handled here:
- activity and power fields are the string ``"N/A"`` when unsupported (and ``0xFFFF``/``0xFFFFFFFF``
  when the bindings miss the sentinel);
- power: ``socket_power`` (ROCm 6.4+), else ``current_socket_power`` (MI300+), else
  ``average_socket_power`` (Navi, MI200 and older), in W (µW on some builds: values above 100 kW are
  taken as µW). A reading of exactly 0 W is the secondary die of a multi-die package (MI250 GCD 2
  reports its power on the primary die) and is reported as unavailable, not as 0;
- energy: ``energy_accumulator`` (older bindings: ``power``) × ``counter_resolution`` µJ;
- temperature: documented as millidegrees but returned in °C by the bindings; values of 1000 or
  more are taken as m°C and divided by 1000.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import io
import math
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from types import ModuleType
from typing import Any

from gpuledger.telemetry.base import MHZ, SECONDARY_DIE, BaseSource, DeviceInfo, Reading

AMDSMI_METRICS = frozenset({
    "util_ratio", "mem_util_ratio", "memory_used_bytes", "memory_total_bytes", "power_w", "energy_j",
    "temperature_c", "temperature_hotspot_c", "sm_clock_hz", "mem_clock_hz", "power_limit_w",
})

# amdsmi_status_t codes (amdsmi.h): stable across releases.
STATUS_NOT_SUPPORTED = 2
STATUS_NO_PERM = 10
STATUS_NOT_FOUND = 31
STATUS_DRIVER_NOT_LOADED = 34
_UNSUPPORTED_CODES = {STATUS_NOT_SUPPORTED, STATUS_NO_PERM}
_LOST_CODES = {STATUS_NOT_FOUND, STATUS_DRIVER_NOT_LOADED}
_SENTINELS = {0xFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF}


class AmdsmiUnavailable(Exception):
    """amdsmi could not be imported; ``str()`` is the reason shown to the user."""


# Why the amdsmi package at a location failed to import, once it was put out of reach (None in sys.modules).
_FAILED: dict[str, AmdsmiUnavailable] = {}


def _package_location() -> str | None:
    """Where an amdsmi package is on sys.path (whatever sys.modules holds), or None."""
    spec = importlib.machinery.PathFinder.find_spec("amdsmi")
    return None if spec is None else str(spec.origin or spec.submodule_search_locations or "amdsmi")


def import_amdsmi() -> ModuleType:
    """Import amdsmi with its stdout chatter captured. Raises :class:`AmdsmiUnavailable`; a package that
    is there but cannot be loaded is replaced by None in ``sys.modules`` (see the module doc)."""
    if "amdsmi" in sys.modules and sys.modules["amdsmi"] is None:
        earlier = _FAILED.get(_package_location() or "")
        if earlier is not None:
            raise AmdsmiUnavailable(str(earlier)) from earlier.__cause__
    captured = io.StringIO()
    try:
        with contextlib.redirect_stdout(captured):
            import amdsmi

            module: ModuleType = amdsmi
    except ImportError as exc:
        raise AmdsmiUnavailable(
            f"amdsmi unavailable: the amdsmi Python package is not installed ({exc}); "
            "install ROCm's amd-smi-lib and `pip install amdsmi`"
        ) from exc
    except (OSError, KeyError) as exc:
        said = [line.strip() for line in captured.getvalue().splitlines() if line.strip()]
        detail = said[0] if said else f"{type(exc).__name__}: {exc}"
        failed = AmdsmiUnavailable(
            f"amdsmi unavailable: libamd_smi.so could not be loaded ({detail}); is ROCm installed?")
        failed.__cause__ = exc
        sys.modules["amdsmi"] = None  # type: ignore[assignment]  # a later `import amdsmi`: ImportError
        _FAILED[_package_location() or ""] = failed
        raise failed from exc
    return module


def guard_amdsmi() -> str | None:
    """Before importing a library that imports amdsmi itself (Ray): run the guarded import first, so that a
    broken amdsmi package is out of reach (an ImportError, which such libraries handle) rather than two lines
    on stdout and a KeyError inside that library's import. The reason amdsmi is unavailable, or None."""
    if sys.modules.get("amdsmi") is not None:
        return None
    try:
        import_amdsmi()
    except AmdsmiUnavailable as exc:
        return str(exc)
    return None


def _error_code(exc: BaseException) -> int | None:
    get = getattr(exc, "get_error_code", None)
    code = get() if callable(get) else getattr(exc, "err_code", None)
    return abs(int(code)) if isinstance(code, int) else None


def describe_amdsmi_error(exc: BaseException) -> str:
    get = getattr(exc, "get_error_info", None)
    info = get() if callable(get) else None
    text = str(info) if info else str(exc).replace("\n", " ").replace("\t", "")
    return f"{text} ({type(exc).__name__})"


def number(value: object) -> float | None:
    """A numeric amdsmi value, or None for "N/A" strings and unsupported sentinels."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        if not math.isfinite(value):
            return None
        return None if float(value).is_integer() and int(value) in _SENTINELS else float(value)
    if isinstance(value, str):
        try:
            parsed = float(value)
        except ValueError:
            return None
        return parsed if math.isfinite(parsed) else None
    return None


def celsius(value: float) -> float:
    """°C from amdsmi_get_temp_metric, whichever unit this build returns (see module doc)."""
    return value / 1000.0 if abs(value) >= 1000 else value


def watts(value: float) -> float:
    return value / 1e6 if value > 100_000 else value


class _Skip(Exception):
    """This metric has no value now (reason in ``args[0]``; ``args[1]``: stop asking)."""


class AmdSmiSource(BaseSource):
    def __init__(self) -> None:
        super().__init__("amdsmi", "amd", AMDSMI_METRICS)
        self._handles: dict[str, Any] = {}
        self._initialised = False
        try:
            self._smi = import_amdsmi()
        except AmdsmiUnavailable as exc:
            self.reason = str(exc)
            return
        smi = self._smi
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                smi.amdsmi_init(smi.AmdSmiInitFlags.INIT_AMD_GPUS)
            self._initialised = True
            for i, h in enumerate(smi.amdsmi_get_processor_handles()):
                try:
                    name = str(smi.amdsmi_get_gpu_asic_info(h).get("market_name") or f"AMD GPU {i}")
                except smi.AmdSmiException:
                    name = f"AMD GPU {i}"
                try:
                    uuid: str | None = str(smi.amdsmi_get_gpu_device_uuid(h))
                except smi.AmdSmiException:
                    uuid = None
                dev = DeviceInfo(key=f"amd:{i}", vendor="amd", index=i, name=name, uuid=uuid)
                self._devices.append(dev)
                self._handles[dev.key] = h
        except smi.AmdSmiException as exc:
            self.reason = f"amdsmi: {describe_amdsmi_error(exc)}"
            self.close()
            return
        if not self._devices:
            self.reason = "amdsmi works but sees no AMD GPU"
            self.close()
            return
        self.available = True

    def close(self) -> None:
        if self._initialised:
            self._initialised = False
            with contextlib.suppress(self._smi.AmdSmiException):  # nothing left to release
                self._smi.amdsmi_shut_down()

    def _groups(self, h: Any) -> list[tuple[tuple[str, ...], Callable[[], tuple[float | None, ...]]]]:
        smi = self._smi

        def activity() -> tuple[float | None, ...]:
            a = smi.amdsmi_get_gpu_activity(h)
            gfx, umc = number(a.get("gfx_activity")), number(a.get("umc_activity"))
            return (None if gfx is None else gfx / 100.0, None if umc is None else umc / 100.0)

        def memory() -> tuple[float | None, ...]:
            vram = smi.AmdSmiMemoryType.VRAM
            return (float(smi.amdsmi_get_gpu_memory_usage(h, vram)),
                    float(smi.amdsmi_get_gpu_memory_total(h, vram)))

        def power() -> tuple[float | None, ...]:
            info = smi.amdsmi_get_power_info(h)
            value = None
            for key in ("socket_power", "current_socket_power", "average_socket_power"):
                value = number(info.get(key))
                if value is not None:
                    break
            if value is None:
                raise _Skip("amdsmi: power N/A on this GPU", True)
            if value == 0:
                raise _Skip(SECONDARY_DIE, False)
            limit = number(info.get("power_limit"))
            return (watts(value), watts(limit) if limit else None)

        def energy() -> tuple[float | None, ...]:
            e = smi.amdsmi_get_energy_count(h)
            acc = number(e.get("energy_accumulator", e.get("power")))
            res = number(e.get("counter_resolution"))
            if acc is None or res is None:
                raise _Skip("amdsmi: energy counter N/A on this GPU", True)
            return (acc * res / 1e6,)

        def temps() -> tuple[float | None, ...]:
            cur = smi.AmdSmiTemperatureMetric.CURRENT
            out: list[float | None] = []
            for sensor in (smi.AmdSmiTemperatureType.EDGE, smi.AmdSmiTemperatureType.HOTSPOT):
                try:
                    v = number(smi.amdsmi_get_temp_metric(h, sensor, cur))
                except smi.AmdSmiLibraryException as exc:
                    if _error_code(exc) not in _UNSUPPORTED_CODES:
                        raise
                    v = None  # MI300 has no edge sensor: hotspot only
                out.append(None if v is None else celsius(v))
            return tuple(out)

        def clock(kind: Any) -> Callable[[], tuple[float | None, ...]]:
            def get() -> tuple[float | None, ...]:
                clk = number(smi.amdsmi_get_clock_info(h, kind).get("clk"))
                return (None if clk is None else clk * MHZ,)

            return get

        return [
            (("util_ratio", "mem_util_ratio"), activity),
            (("memory_used_bytes", "memory_total_bytes"), memory),
            (("power_w", "power_limit_w"), power),
            (("energy_j",), energy),
            (("temperature_c", "temperature_hotspot_c"), temps),
            (("sm_clock_hz",), clock(smi.AmdSmiClkType.GFX)),
            (("mem_clock_hz",), clock(smi.AmdSmiClkType.MEM)),
        ]

    def read(self, now: float) -> list[Reading]:
        out: list[Reading] = []
        for dev in self._devices:
            if dev.key in self._device_errors:
                continue
            for metrics, get in self._groups(self._handles[dev.key]):
                if self._is_unavailable(dev.key, metrics[0]):
                    continue
                try:
                    values = get()
                except _Skip as skip:
                    why, permanent = str(skip.args[0]), bool(skip.args[1])
                    for metric in metrics:
                        self._mark_unavailable(dev.key, metric, why, permanent=permanent)
                    continue
                except self._smi.AmdSmiLibraryException as exc:
                    code = _error_code(exc)
                    if code in _UNSUPPORTED_CODES:
                        for metric in metrics:
                            self._mark_unavailable(dev.key, metric, f"amdsmi: {describe_amdsmi_error(exc)}")
                        continue
                    if code in _LOST_CODES:
                        self._device_errors[dev.key] = (
                            f"amdsmi: {describe_amdsmi_error(exc)} (reading {metrics[0]})"
                        )
                        break
                    continue  # transient: a run of these shows as a gap
                for metric, value in zip(metrics, values, strict=True):
                    if value is None:
                        self._mark_unavailable(dev.key, metric, "amdsmi: N/A on this GPU")
                    else:
                        out.append(Reading(now, dev, metric, value, self.name))
        return out


@dataclass(slots=True)
class AmdsmiDevice:
    index: int
    name: str
    uuid: str | None
    gfx_target: str | None  # "gfx942"
    bdf: str | None  # "0000:0b:00.0"
    device_id: str | None  # "0x73ff"
    memory_total_bytes: int | None


@dataclass(slots=True)
class AmdsmiInventory:
    """amdsmi's view of the machine for ``doctor``: versions and devices, or the error that stopped it."""

    amdsmi_version: str | None = None  # the Python package
    lib_version: str | None = None  # libamd_smi
    driver_version: str | None = None  # amdgpu
    devices: list[AmdsmiDevice] = field(default_factory=list)
    error_class: str | None = None
    error_message: str | None = None

    @property
    def ok(self) -> bool:
        return self.error_class is None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def amdsmi_inventory() -> AmdsmiInventory:
    try:
        smi = import_amdsmi()
    except AmdsmiUnavailable as exc:
        cause = exc.__cause__
        return AmdsmiInventory(error_class=type(cause).__name__ if cause else "AmdsmiUnavailable",
                               error_message=str(exc))
    inv = AmdsmiInventory(amdsmi_version=str(getattr(smi, "__version__", "")) or None)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            smi.amdsmi_init(smi.AmdSmiInitFlags.INIT_AMD_GPUS)
    except smi.AmdSmiException as exc:
        inv.error_class, inv.error_message = type(exc).__name__, f"amdsmi: {describe_amdsmi_error(exc)}"
        return inv
    try:
        with contextlib.suppress(smi.AmdSmiException):
            v = smi.amdsmi_get_lib_version()
            inv.lib_version = ".".join(str(v[k]) for k in ("major", "minor", "release") if k in v)
        for i, h in enumerate(smi.amdsmi_get_processor_handles()):
            if i == 0:
                with contextlib.suppress(smi.AmdSmiException):
                    inv.driver_version = str(smi.amdsmi_get_gpu_driver_info(h).get("driver_version"))
            asic: dict[str, Any] = {}
            with contextlib.suppress(smi.AmdSmiException):
                asic = dict(smi.amdsmi_get_gpu_asic_info(h))
            uuid = bdf = None
            mem: int | None = None
            with contextlib.suppress(smi.AmdSmiException):
                uuid = str(smi.amdsmi_get_gpu_device_uuid(h))
            with contextlib.suppress(smi.AmdSmiException):
                bdf = str(smi.amdsmi_get_gpu_device_bdf(h))
            with contextlib.suppress(smi.AmdSmiException):
                mem = int(smi.amdsmi_get_gpu_memory_total(h, smi.AmdSmiMemoryType.VRAM))
            dev_id = asic.get("device_id")
            inv.devices.append(AmdsmiDevice(
                index=i, name=str(asic.get("market_name") or f"AMD GPU {i}"), uuid=uuid,
                gfx_target=str(asic.get("target_graphics_version") or "") or None,
                bdf=bdf, device_id=str(dev_id) if dev_id not in (None, "N/A") else None,
                memory_total_bytes=mem,
            ))
    except smi.AmdSmiException as exc:
        inv.error_class, inv.error_message = type(exc).__name__, f"amdsmi: {describe_amdsmi_error(exc)}"
    finally:
        with contextlib.suppress(smi.AmdSmiException):
            smi.amdsmi_shut_down()
    return inv
