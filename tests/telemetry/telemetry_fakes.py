"""Fake ``pynvml`` and ``amdsmi`` modules for the import boundary, with named scenarios.

The fakes expose the real API names and signatures (nvidia-ml-py 13.x ``pynvml.py``; amdsmi 7.0
``amdsmi_interface.py``). The NVML fake reuses the real ``pynvml`` error classes and constants, so
``str(err)`` and the class names are exactly what the real library raises.
"""

from __future__ import annotations

import enum
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pynvml as real_pynvml

GIB = 1024**3
Clock = Callable[[], float]


class ManualClock:
    """A clock the test moves by hand; the fakes integrate energy over it."""

    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


# --------------------------------------------------------------------------- NVML


def nvml_error(code: int) -> real_pynvml.NVMLError:
    return real_pynvml.NVMLError(code)


@dataclass
class FakeNvGpu:
    name: str
    uuid: str
    power_w: float = 250.0
    power_supported: bool = True
    energy_supported: bool = True  # False: pre-Volta (no total energy counter)
    energy_offset_mj: int = 123_456_789
    lost_at: float | None = None  # from this clock time on every call raises GPU_IS_LOST
    util_gpu: int = 87
    util_mem: int = 41
    mem_total: int = 80 * GIB
    mem_used: int = 61 * GIB
    temp_c: int = 64
    sm_mhz: int = 1980
    mem_mhz: int = 2619
    limit_mw: int = 700_000
    processes: list[tuple[int, int | None]] = field(default_factory=list)


@dataclass
class _Util:
    gpu: int
    memory: int


@dataclass
class _Mem:
    total: int
    free: int
    used: int


@dataclass
class _Proc:
    pid: int
    usedGpuMemory: int | None
    gpuInstanceId: int = 0xFFFFFFFF
    computeInstanceId: int = 0xFFFFFFFF


@dataclass
class _Pci:
    busId: bytes
    pciDeviceId: int


def make_fake_pynvml(gpus: list[FakeNvGpu], clock: Clock, *, init_error: int | None = None,
                     driver: str = "550.127.05", cuda: int = 12040) -> types.ModuleType:
    m = types.ModuleType("pynvml")
    for name in dir(real_pynvml):
        if name.startswith(("NVML_", "NVMLError")):
            setattr(m, name, getattr(real_pynvml, name))
    calls: dict[str, int] = {"init": 0, "shutdown": 0}
    m.calls = calls  # type: ignore[attr-defined]

    def check(h: int) -> FakeNvGpu:
        gpu = gpus[h]
        if gpu.lost_at is not None and clock() >= gpu.lost_at:
            raise nvml_error(real_pynvml.NVML_ERROR_GPU_IS_LOST)
        return gpu

    def nvmlInit() -> None:
        if init_error is not None:
            raise nvml_error(init_error)
        calls["init"] += 1

    def nvmlShutdown() -> None:
        calls["shutdown"] += 1

    def nvmlDeviceGetCount() -> int:
        return len(gpus)

    def nvmlDeviceGetHandleByIndex(index: int) -> int:
        if not 0 <= index < len(gpus):
            raise nvml_error(real_pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return index

    def nvmlDeviceGetName(h: int) -> str:
        return gpus[h].name

    def nvmlDeviceGetUUID(h: int) -> str:
        return gpus[h].uuid

    def nvmlDeviceGetUtilizationRates(h: int) -> _Util:
        g = check(h)
        return _Util(g.util_gpu, g.util_mem)

    def nvmlDeviceGetMemoryInfo(h: int, version: Any = None) -> _Mem:
        g = check(h)
        return _Mem(g.mem_total, g.mem_total - g.mem_used, g.mem_used)

    def nvmlDeviceGetPowerUsage(h: int) -> int:
        g = check(h)
        if not g.power_supported:
            raise nvml_error(real_pynvml.NVML_ERROR_NOT_SUPPORTED)
        return int(g.power_w * 1000)

    def nvmlDeviceGetTotalEnergyConsumption(h: int) -> int:
        g = check(h)
        if not g.energy_supported or not g.power_supported:
            raise nvml_error(real_pynvml.NVML_ERROR_NOT_SUPPORTED)
        return g.energy_offset_mj + int(g.power_w * clock() * 1000)

    def nvmlDeviceGetTemperature(h: int, sensor: int) -> int:
        assert sensor == real_pynvml.NVML_TEMPERATURE_GPU
        return check(h).temp_c

    def nvmlDeviceGetClockInfo(h: int, type: int) -> int:
        g = check(h)
        return {real_pynvml.NVML_CLOCK_SM: g.sm_mhz, real_pynvml.NVML_CLOCK_MEM: g.mem_mhz}[type]

    def nvmlDeviceGetEnforcedPowerLimit(h: int) -> int:
        g = check(h)
        if not g.power_supported:
            raise nvml_error(real_pynvml.NVML_ERROR_NOT_SUPPORTED)
        return g.limit_mw

    def nvmlDeviceGetComputeRunningProcesses(h: int) -> list[_Proc]:
        return [_Proc(pid, used) for pid, used in check(h).processes]

    def nvmlSystemGetDriverVersion() -> str:
        return driver

    def nvmlSystemGetCudaDriverVersion() -> int:
        return cuda

    def nvmlDeviceGetPciInfo(h: int) -> _Pci:
        return _Pci(f"00000000:{0x17 + h:02X}:00.0".encode(), (0x2330 << 16) | 0x10DE)

    def nvmlDeviceGetVbiosVersion(h: int) -> str:
        return "96.00.99.00.01"

    for fn in (nvmlInit, nvmlShutdown, nvmlDeviceGetCount, nvmlDeviceGetHandleByIndex, nvmlDeviceGetName,
               nvmlDeviceGetUUID, nvmlDeviceGetUtilizationRates, nvmlDeviceGetMemoryInfo,
               nvmlDeviceGetPowerUsage, nvmlDeviceGetTotalEnergyConsumption, nvmlDeviceGetTemperature,
               nvmlDeviceGetClockInfo, nvmlDeviceGetEnforcedPowerLimit,
               nvmlDeviceGetComputeRunningProcesses, nvmlSystemGetDriverVersion,
               nvmlSystemGetCudaDriverVersion, nvmlDeviceGetPciInfo, nvmlDeviceGetVbiosVersion):
        setattr(m, fn.__name__, fn)
    return m


def h100(i: int, **kw: Any) -> FakeNvGpu:
    return FakeNvGpu(name="NVIDIA H100 80GB HBM3", uuid=f"GPU-5a1c0000-0000-0000-0000-00000000000{i}", **kw)


NVML_SCENARIOS: dict[str, Callable[[Clock], types.ModuleType]] = {
    "healthy multi-GPU": lambda c: make_fake_pynvml([h100(0, power_w=312.0), h100(1, power_w=118.0)], c),
    "power NotSupported": lambda c: make_fake_pynvml(
        [FakeNvGpu(name="NVIDIA GeForce RTX 3080", uuid="GPU-3080", power_supported=False)], c),
    "GPU lost mid-window": lambda c: make_fake_pynvml([h100(0), h100(1, lost_at=0.5)], c),
    "driver not loaded": lambda c: make_fake_pynvml(
        [], c, init_error=real_pynvml.NVML_ERROR_DRIVER_NOT_LOADED),
    "library not found": lambda c: make_fake_pynvml(
        [], c, init_error=real_pynvml.NVML_ERROR_LIBRARY_NOT_FOUND),
    "energy counter absent (pre-Volta)": lambda c: make_fake_pynvml(
        [FakeNvGpu(name="Tesla P100-PCIE-16GB", uuid="GPU-ef1b2c9b-38d8-2090-2bd1-f567a3eb42a6",
                   power_w=28.16, energy_supported=False, mem_total=16 * GIB, mem_used=0)], c),
}


# --------------------------------------------------------------------------- amdsmi

AMDSMI_STATUS_NOT_SUPPORTED = 2
AMDSMI_STATUS_NOT_FOUND = 31
AMDSMI_STATUS_DRIVER_NOT_LOADED = 34
_ERR_INFO = {
    AMDSMI_STATUS_NOT_SUPPORTED: "AMDSMI_STATUS_NOT_SUPPORTED - Feature not supported",
    AMDSMI_STATUS_NOT_FOUND: "AMDSMI_STATUS_NOT_FOUND - Device Not found",
    AMDSMI_STATUS_DRIVER_NOT_LOADED: "AMDSMI_STATUS_DRIVER_NOT_LOADED - Driver not loaded",
}


class AmdSmiException(Exception):
    pass


class AmdSmiLibraryException(AmdSmiException):
    def __init__(self, err_code: int) -> None:
        err_code = abs(err_code)
        super().__init__(err_code)
        self.err_code = err_code
        self.err_info = _ERR_INFO.get(err_code, "AMDSMI_STATUS_UNKNOWN_ERROR - An unknown error occurred")

    def __str__(self) -> str:
        return f"Error code:\n\t{self.err_code} | {self.err_info}"

    def get_error_info(self, detailed: bool = True) -> str:
        return self.err_info if detailed else self.err_info.split(" - ")[0]

    def get_error_code(self) -> int:
        return self.err_code


class AmdSmiInitFlags(enum.IntEnum):
    INIT_ALL_PROCESSORS = 0xFFFFFFFF
    INIT_AMD_CPUS = 1 << 0
    INIT_AMD_GPUS = 1 << 1


class AmdSmiTemperatureType(enum.IntEnum):
    EDGE = 0
    HOTSPOT = 1
    JUNCTION = 1
    VRAM = 2


class AmdSmiTemperatureMetric(enum.IntEnum):
    CURRENT = 0
    MAX = 1


class AmdSmiMemoryType(enum.IntEnum):
    VRAM = 0
    VIS_VRAM = 1
    GTT = 2


class AmdSmiClkType(enum.IntEnum):
    SYS = 0
    GFX = 0
    DF = 1
    DCEF = 2
    SOC = 3
    MEM = 4


@dataclass
class FakeAmdGpu:
    market_name: str
    uuid: str
    gfx: str = "gfx942"
    power_fields: dict[str, object] = field(default_factory=dict)  # amdsmi_get_power_info's dict
    power_w: float = 0.0  # what the energy accumulator integrates
    energy_factor: float = 1.0  # counter runs this many times faster than the real power (bad counter)
    counter_resolution_uj: float = 15.3
    energy_key: str = "energy_accumulator"  # amdsmi 6.x named it "power"
    gfx_activity: object = 93
    umc_activity: object = 37
    vram_total: int = 192 * GIB
    vram_used: int = 150 * GIB
    temps: dict[int, int | None] = field(default_factory=lambda: {0: None, 1: 71})  # None: NOT_SUPPORTED
    gfx_mhz: int = 2100
    mem_mhz: int = 1300
    lost_at: float | None = None


def make_fake_amdsmi(gpus: list[FakeAmdGpu], clock: Clock, *,
                     init_error: int | None = None) -> types.ModuleType:
    m = types.ModuleType("amdsmi")
    m.__version__ = "7.0.2"  # type: ignore[attr-defined]
    for obj in (AmdSmiException, AmdSmiLibraryException, AmdSmiInitFlags, AmdSmiTemperatureType,
                AmdSmiTemperatureMetric, AmdSmiMemoryType, AmdSmiClkType):
        setattr(m, obj.__name__, obj)

    def check(h: int) -> FakeAmdGpu:
        g = gpus[h]
        if g.lost_at is not None and clock() >= g.lost_at:
            raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_FOUND)
        return g

    def amdsmi_init(flag: AmdSmiInitFlags = AmdSmiInitFlags.INIT_AMD_GPUS) -> None:
        if init_error is not None:
            raise AmdSmiLibraryException(init_error)

    def amdsmi_shut_down() -> None:
        return None

    def amdsmi_get_processor_handles() -> list[int]:
        return list(range(len(gpus)))

    def amdsmi_get_gpu_asic_info(h: int) -> dict[str, Any]:
        g = gpus[h]
        return {"market_name": g.market_name, "vendor_id": "0x1002", "device_id": "0x74a1",
                "target_graphics_version": g.gfx, "rev_id": "0x00", "asic_serial": "N/A"}

    def amdsmi_get_gpu_device_uuid(h: int) -> str:
        return gpus[h].uuid

    def amdsmi_get_gpu_device_bdf(h: int) -> str:
        return f"0000:{0x0c + h:02x}:00.0"

    def amdsmi_get_gpu_activity(h: int) -> dict[str, object]:
        g = check(h)
        return {"gfx_activity": g.gfx_activity, "umc_activity": g.umc_activity, "mm_activity": "N/A"}

    def amdsmi_get_gpu_memory_usage(h: int, mem_type: AmdSmiMemoryType) -> int:
        assert mem_type == AmdSmiMemoryType.VRAM
        return check(h).vram_used

    def amdsmi_get_gpu_memory_total(h: int, mem_type: AmdSmiMemoryType) -> int:
        assert mem_type == AmdSmiMemoryType.VRAM
        return check(h).vram_total

    def amdsmi_get_power_info(h: int) -> dict[str, object]:
        return dict(check(h).power_fields)

    def amdsmi_get_energy_count(h: int) -> dict[str, object]:
        g = check(h)
        joules = g.power_w * g.energy_factor * clock()
        return {g.energy_key: int(joules * 1e6 / g.counter_resolution_uj),
                "counter_resolution": g.counter_resolution_uj, "timestamp": int(clock() * 1e9)}

    def amdsmi_get_temp_metric(h: int, sensor_type: AmdSmiTemperatureType,
                               metric: AmdSmiTemperatureMetric) -> int:
        value = check(h).temps.get(int(sensor_type))
        if value is None:
            raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED)
        return value

    def amdsmi_get_clock_info(h: int, clock_type: AmdSmiClkType) -> dict[str, object]:
        g = check(h)
        clk = g.mem_mhz if clock_type == AmdSmiClkType.MEM else g.gfx_mhz
        return {"clk": clk, "min_clk": 500, "max_clk": 2100, "clk_locked": False, "clk_deep_sleep": 0}

    def amdsmi_get_lib_version() -> dict[str, object]:
        return {"major": 25, "minor": 5, "release": 1, "build": "abc"}

    def amdsmi_get_gpu_driver_info(h: int) -> dict[str, str]:
        return {"driver_name": "amdgpu", "driver_version": "6.10.5", "driver_date": "2015/01/01 00:00"}

    for fn in (amdsmi_init, amdsmi_shut_down, amdsmi_get_processor_handles, amdsmi_get_gpu_asic_info,
               amdsmi_get_gpu_device_uuid, amdsmi_get_gpu_device_bdf, amdsmi_get_gpu_activity,
               amdsmi_get_gpu_memory_usage, amdsmi_get_gpu_memory_total, amdsmi_get_power_info,
               amdsmi_get_energy_count, amdsmi_get_temp_metric, amdsmi_get_clock_info,
               amdsmi_get_lib_version, amdsmi_get_gpu_driver_info):
        setattr(m, fn.__name__, fn)
    return m


def mi300x(i: int, **kw: Any) -> FakeAmdGpu:
    fields = {"socket_power": 550, "current_socket_power": 550, "average_socket_power": "N/A",
              "gfx_voltage": "N/A", "soc_voltage": "N/A", "mem_voltage": "N/A", "power_limit": 750}
    return FakeAmdGpu(market_name="AMD Instinct MI300X", uuid=f"c4ff74a1-0000-1000-80b2-00000000000{i}",
                      power_fields=fields, power_w=550.0, **kw)


AMDSMI_SCENARIOS: dict[str, Callable[[Clock], types.ModuleType]] = {
    "healthy MI300X": lambda c: make_fake_amdsmi([mi300x(0), mi300x(1)], c),
    # Older parts (MI100 here) whose energy accumulator runs 37 % fast against the reported power.
    "counter disagrees with power": lambda c: make_fake_amdsmi([FakeAmdGpu(
        market_name="Arcturus GL-XL [Instinct MI100]", uuid="0x79ccd55167a2124a", gfx="gfx908",
        power_fields={"average_socket_power": 200, "power_limit": 290}, power_w=200.0, energy_factor=1.37,
        energy_key="power", temps={0: 53, 1: 55})], c),
    # MI250: one package, two dies; the second die reports 0 W and an energy counter stuck at 0.
    "MI250 die reporting 0": lambda c: make_fake_amdsmi([
        FakeAmdGpu(market_name="AMD Instinct MI250X", uuid="mi250-gcd0", gfx="gfx90a",
                   power_fields={"average_socket_power": 380, "power_limit": 560}, power_w=380.0,
                   temps={0: 44, 1: 47}),
        FakeAmdGpu(market_name="AMD Instinct MI250X", uuid="mi250-gcd1", gfx="gfx90a",
                   power_fields={"average_socket_power": 0, "power_limit": 0}, power_w=0.0,
                   temps={0: 43, 1: 46}),
    ], c),
    "temperature in millidegrees": lambda c: make_fake_amdsmi([mi300x(0, temps={0: 45000, 1: 52000})], c),
    "driver not loaded": lambda c: make_fake_amdsmi([], c, init_error=AMDSMI_STATUS_DRIVER_NOT_LOADED),
    "GPU lost mid-window": lambda c: make_fake_amdsmi([mi300x(0), mi300x(1, lost_at=0.5)], c),
}


# --------------------------------------------------------------------------- powercap


def write_zone(base: Path, name: str, zone_name: str, energy_uj: int,
               max_uj: int | None = 262143328850) -> Path:
    """One powercap zone as the kernel lays it out: name, energy_uj, max_energy_range_uj."""
    zone = base / "sys" / "class" / "powercap" / name
    zone.mkdir(parents=True, exist_ok=True)
    (zone / "name").write_text(zone_name + "\n")
    (zone / "energy_uj").write_text(f"{energy_uj}\n")
    if max_uj is not None:
        (zone / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return zone
