"""Which devices a run was assigned, recorded from what says so — never guessed from utilisation (a shared
node's GPUs that are busy with other jobs would be counted).

In order:

1. **remote telemetry** (``--telemetry-from``): the devices it reports are the server's, limited by the
   URL's selection (``?gpu=0,1``, ``?uuid=…``, ``?host=…``); the machine running the bench is not the server,
   so its own GPUs are recorded as not assigned.
2. **the process's environment**: ``CUDA_VISIBLE_DEVICES`` (NVIDIA) and ``ROCR_VISIBLE_DEVICES`` /
   ``HIP_VISIBLE_DEVICES`` (AMD), by index or UUID, as CUDA and ROCm read them (indices as the driver
   enumerates the devices: set ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` so that they agree with NVML's).
3. otherwise nothing is recorded, and the cost model keeps its rule for such runs (non-zero utilisation).

The record is ``assigned`` (bool) and ``assigned_by`` (what said so) on each device of the run's telemetry
summary; a run stored before this record existed has neither.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpuledger.telemetry.base import DeviceInfo

VISIBLE_VARIABLES: dict[str, tuple[str, ...]] = {
    "nvidia": ("CUDA_VISIBLE_DEVICES",),
    "amd": ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"),
}


LOCAL_NOT_SERVER = ("a device of the machine running the bench, not of the server (--telemetry-from names "
                    "the server's node)")


@dataclass(frozen=True, slots=True)
class Assignment:
    """One device's record: assigned to the run or not, and what said so."""

    assigned: bool
    by: str


def _tokens(value: str) -> list[str]:
    return [t.strip() for t in value.split(",") if t.strip()]


def _matches(token: str, dev: DeviceInfo) -> bool | None:
    """Does ``token`` (an index or a UUID, as in CUDA_VISIBLE_DEVICES) name ``dev``? None: cannot tell."""
    if token.isdigit():
        return dev.index is not None and int(token) == dev.index
    if token.upper().startswith("MIG-"):
        return None  # an instance of some GPU: which one, NVML's device UUIDs do not say
    if dev.uuid and (token == dev.uuid or dev.uuid.endswith(token.removeprefix("GPU-"))):
        return True
    if token.upper().startswith("GPU-") or len(token) >= 8:
        return False if dev.uuid else None
    return None


def from_environment(devices: Iterable[DeviceInfo], env: Mapping[str, str]) -> dict[str, Assignment]:
    """The local devices the environment assigns (rule 2), per vendor whose variable is set; a variable
    naming something this cannot map (a MIG instance, a UUID without the device's) records nothing."""
    out: dict[str, Assignment] = {}
    by_vendor: dict[str, list[DeviceInfo]] = {}
    for dev in devices:
        by_vendor.setdefault(dev.vendor, []).append(dev)
    for vendor, names in VISIBLE_VARIABLES.items():
        devs = by_vendor.get(vendor, [])
        name = next((n for n in names if n in env), None)
        if name is None or not devs:
            continue
        tokens = _tokens(env[name])
        decided: dict[str, bool] = {}
        for dev in devs:
            hits = [_matches(t, dev) for t in tokens]
            if any(h is None for h in hits):
                decided = {}
                break
            decided[dev.key] = any(hits)
        shown = env[name] if len(env[name]) <= 80 else env[name][:77] + "..."
        for key, yes in decided.items():
            out[key] = Assignment(yes, f"{name}={shown}")
    return out


def decide(
    local: Iterable[DeviceInfo],
    remote: Mapping[str, str],
    env: Mapping[str, str],
) -> dict[str, Assignment]:
    """Every device's record (module docstring). ``remote``: device key -> what selected it, for the devices
    remote telemetry reported; ``local``: the devices of this machine's own sources."""
    if remote:
        out = {key: Assignment(True, by) for key, by in remote.items()}
        for dev in local:
            if dev.vendor != "cpu" and dev.key not in out:
                out[dev.key] = Assignment(False, LOCAL_NOT_SERVER)
        return out
    return from_environment([d for d in local if d.vendor != "cpu"], env)
