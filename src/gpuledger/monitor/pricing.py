"""Which cost profile the monitor prices with, and what power it uses for a device it cannot measure.

- ``--profile NAME|FILE``: that profile (an unknown one is an error before anything starts).
- no ``--profile``: the cost helper's default for the hardware found (the catalog preset of the first
  GPU, else ``cpu-cloud`` scaled to this machine's logical CPUs). When there is no default (a GPU the
  catalog does not know), cost metrics are off and the reason is logged; everything else is served.

Power for a device without a power or energy reading (ownership profiles only; rental prices include
energy): a GPU's catalog TDP, labelled "not measured"; the CPU of a CPU-only machine at 50 % of its
TDP (``cpu_tdp_w`` from the profile, else an assumed TDP per logical CPU), labelled an estimate.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from dataclasses import dataclass

from gpuledger.catalog import Catalog, load_catalog
from gpuledger.cost import CostProfile, cpu_defaults, default_profile_for, load_profile
from gpuledger.errors import InvalidInputError, NotFoundError
from gpuledger.records import DeviceWindow, RunInfo
from gpuledger.records.environment import Environment, HostCpu
from gpuledger.telemetry import DeviceInfo

GPU_VENDORS = ("nvidia", "amd")


@dataclass(frozen=True, slots=True)
class PowerFallback:
    """Watts priced for a device that reports no power, and where the figure comes from."""

    watts: float
    source: str


@dataclass(frozen=True, slots=True)
class ProfileChoice:
    profile: CostProfile | None
    note: str  # "profile h100-sxm-own (default for NVIDIA H100 80GB HBM3)" or why cost is off


def accounted_devices(devices: Sequence[DeviceInfo]) -> list[DeviceInfo]:
    """The devices the cost is spread over: the GPUs, or the CPU on a machine without GPUs."""
    gpus = [d for d in devices if d.vendor in GPU_VENDORS]
    return gpus or [d for d in devices if d.vendor == "cpu"]


def choose_profile(name_or_path: str | None, devices: Sequence[DeviceInfo],
                   catalog: Catalog | None = None) -> ProfileChoice:
    """The profile to price with. An explicit one must load (NotFoundError / InvalidInputError
    propagate); a default that cannot be found turns cost metrics off with the reason."""
    if name_or_path is not None:
        prof = load_profile(name_or_path, catalog)
        return ProfileChoice(prof, f"profile {prof.name or name_or_path} (--profile)")
    acc = accounted_devices(devices)
    if not acc:
        return ProfileChoice(None, "cost metrics off: no device found to price, and no --profile given")
    run = RunInfo(
        id="monitor",
        telemetry_summary=[DeviceWindow(device=d.key, vendor=d.vendor, name=d.name, peak_util_ratio=None)
                           for d in acc],
        environment=Environment(
            arch=platform.machine(), cpu=HostCpu(logical_cpus=os.cpu_count()) if os.cpu_count() else None
        ),
    )
    try:
        prof = default_profile_for(run, catalog)
    except (NotFoundError, InvalidInputError) as exc:
        return ProfileChoice(None, f"cost metrics off: {exc.message} (pass --profile)")
    return ProfileChoice(prof, f"profile {prof.name} (default for {acc[0].name}; --profile to change)")


def power_fallbacks(devices: Sequence[DeviceInfo], profile: CostProfile,
                    catalog: Catalog | None = None) -> dict[str, PowerFallback]:
    """A stated power figure for every accounted device that has one (used only while the device
    reports no power). A device missing from the result has no figure at all."""
    cat = catalog if catalog is not None else load_catalog()
    out: dict[str, PowerFallback] = {}
    for dev in accounted_devices(devices):
        if dev.vendor in GPU_VENDORS:
            spec = cat.find(dev.name)
            if spec is None:
                continue
            fig = spec.device_figure("tdp_w")
            if fig.value is not None:
                out[dev.key] = PowerFallback(fig.value, f"catalog TDP (not measured): {fig.provenance()}")
            continue
        defaults = cpu_defaults()
        frac = defaults.power_fraction_of_tdp
        if profile.cpu_tdp_w is not None:
            out[dev.key] = PowerFallback(
                profile.cpu_tdp_w * frac,
                f"estimate: {frac:.0%} of CPU TDP {profile.cpu_tdp_w:g} W from the profile "
                f"({defaults.fraction_source})",
            )
            continue
        threads = os.cpu_count()
        if threads:
            tdp = defaults.tdp_w_per_thread * threads
            out[dev.key] = PowerFallback(
                tdp * frac,
                f"estimate: {frac:.0%} of an assumed CPU TDP of {defaults.tdp_w_per_thread:g} W x {threads} "
                f"threads = {tdp:g} W ({defaults.tdp_source})",
            )
    return out
