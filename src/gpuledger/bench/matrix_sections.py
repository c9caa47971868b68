"""The sections of a matrix plan that say where its cells run beyond Ray: ``slurm:`` (``gpuledger matrix PLAN
--backend slurm``) and ``kubernetes:`` (``gpuledger matrix PLAN --emit k8s DIR``).

    slurm:
      partition: gpu              # sbatch --partition (a target may name its own)
      account: bench              # --account
      qos: normal                 # --qos
      time_limit_min: 60          # --time, per cell
      gpus: 1                     # --gres=gpu:1 per cell (gpu_type: h100 makes it gpu:h100:1)
      cpus_per_cell: 4            # --cpus-per-task
      mem_gb: 16                  # --mem
      folder: slurm-jobs          # where the tasks' pickles and logs go: a folder every node sees
      python: /shared/venv/bin/python   # the Python with gpuledger on the nodes (default: this one)
      setup: ["module load cuda"]       # shell lines run before each cell
      result_wait_s: 15           # how long a task that left the queue may take to show its result
      sbatch: {exclusive: true, mail-type: FAIL}   # any other sbatch option
      targets:                    # per target: its own nodes
        h100: {constraint: h100, nodelist: "gpu[01-04]"}
        mi300x: {partition: amd, gpus: 0}
    kubernetes:
      image: ghcr.io/acme/gpuledger:1.4   # an image with gpuledger installed
      namespace: bench
      secret: gpuledger-matrix    # the Secret whose keys are the variables the pods need (GPULEDGER_DB, ...)
      parallelism: 4              # pods of one target at once
      targets:
        h100: {node_selector: {gpu: h100}, gpus: 1, gpu_vendor: nvidia}
        mi300x: {node_selector: {gpu: mi300x}, gpus: 1, gpu_vendor: amd}

Every value that reaches an sbatch line or a manifest is checked here (names by pattern, every number
bounded), strict like the rest of the plan: an unknown key is refused with the closest name.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator

_STRICT = ConfigDict(extra="forbid", strict=True)

# A Slurm partition, account or QOS name, a GRES type.
SlurmName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.+@-]{0,127}$")]
# A node list (gpu[01-04],login1) or a constraint expression (h100&ib, [a100|h100]).
NodeList = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.,\[\]-]{1,1024}$")]
Constraint = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.,:&|!*()\[\]-]{1,1024}$")]
SbatchKey = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9-]{0,39}$")]
# What gpuledger itself sets, or sets from a field of this section.
RESERVED_SBATCH = {
    "array": None, "output": None, "error": None, "open-mode": None, "signal": None, "export": None,
    "job-name": None, "wrap": None, "partition": "partition", "account": "account", "qos": "qos",
    "time": "time_limit_min", "gres": "gpus", "gpus": "gpus", "constraint": "constraint",
    "nodelist": "nodelist", "cpus-per-task": "cpus_per_cell", "mem": "mem_gb",
}
MAX_GPUS = 64

# Kubernetes names (RFC 1123 labels and subdomains) and label keys / values.
DnsLabel = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")]
DnsSubdomain = Annotated[str, StringConstraints(
    pattern=r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$", max_length=253)]
LabelKey = Annotated[str, StringConstraints(
    pattern=r"^([a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$",
    max_length=317)]
LabelValue = Annotated[str, StringConstraints(pattern=r"^([A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?$")]
Image = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,511}$")]
Quantity = Annotated[str, StringConstraints(pattern=r"^[0-9]{1,9}(\.[0-9]{1,6})?(m|k|Ki|Mi|Gi|Ti|M|G|T)?$")]
GpuVendor = Literal["nvidia", "amd"]
GPU_RESOURCE: dict[str, str] = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu"}


def _one_line(value: str, what: str, limit: int) -> str:
    if len(value) > limit or re.search(r"[\x00-\x1f\x7f]", value):
        raise ValueError(f"{what} must be one line of at most {limit} characters")
    return value


class SlurmTarget(BaseModel):
    """A target's own Slurm options: where its cells run (each overrides the section's)."""

    model_config = _STRICT

    partition: SlurmName | None = None
    constraint: Constraint | None = None
    nodelist: NodeList | None = None
    gpus: int | None = Field(default=None, ge=0, le=MAX_GPUS)
    gpu_type: SlurmName | None = None


class SlurmSection(BaseModel):
    """``slurm:``: how each cell is asked of Slurm (one sbatch job array per set of options)."""

    model_config = _STRICT

    partition: SlurmName | None = None
    account: SlurmName | None = None
    qos: SlurmName | None = None
    time_limit_min: int = Field(default=60, ge=1, le=525_600)
    gpus: int = Field(default=0, ge=0, le=MAX_GPUS)
    gpu_type: SlurmName | None = None
    cpus_per_cell: int | None = Field(default=None, ge=1, le=1024)
    mem_gb: int | None = Field(default=None, ge=1, le=65_536)
    constraint: Constraint | None = None
    nodelist: NodeList | None = None
    folder: str = Field(default="slurm-jobs", min_length=1, max_length=1024)
    python: str | None = Field(default=None, min_length=1, max_length=1024)
    setup: list[str] = Field(default_factory=list, max_length=32)
    result_wait_s: int = Field(default=15, ge=0, le=600)
    sbatch: dict[SbatchKey, Annotated[str, StringConstraints(max_length=256)] | int | Literal[True]] = Field(
        default_factory=dict, max_length=32)
    targets: dict[str, SlurmTarget] = Field(default_factory=dict, max_length=1000)

    @field_validator("folder")
    @classmethod
    def _folder(cls, value: str) -> str:
        return _one_line(value, "slurm.folder", 1024)

    @field_validator("python")
    @classmethod
    def _python(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError("slurm.python must be the absolute path of the Python on the nodes "
                             "(/shared/venv/bin/python)")
        return None if value is None else _one_line(value, "slurm.python", 1024)

    @field_validator("setup")
    @classmethod
    def _setup(cls, lines: list[str]) -> list[str]:
        return [_one_line(line, "a slurm.setup line", 1000) for line in lines]

    @model_validator(mode="after")
    def _sbatch(self) -> Self:
        for key, value in self.sbatch.items():
            if key in RESERVED_SBATCH:
                field = RESERVED_SBATCH[key]
                how = f"give slurm.{field}" if field else "gpuledger sets it"
                raise ValueError(f"slurm.sbatch: {key}: not an option to set here ({how})")
            if isinstance(value, str):
                _one_line(value, f"slurm.sbatch.{key}", 256)
        return self


class KubernetesTarget(BaseModel):
    """A target's own pod placement: the nodes its pods go to and the GPUs they ask for."""

    model_config = _STRICT

    node_selector: dict[LabelKey, LabelValue] = Field(default_factory=dict, max_length=16)
    gpus: int | None = Field(default=None, ge=0, le=MAX_GPUS)
    gpu_vendor: GpuVendor | None = None


class KubernetesSection(BaseModel):
    """``kubernetes:``: the manifests ``--emit k8s`` writes (one Indexed Job per target, a ConfigMap)."""

    model_config = _STRICT

    image: Image
    command: list[Annotated[str, StringConstraints(min_length=1, max_length=256)]] = Field(
        default_factory=lambda: ["gpuledger"], min_length=1, max_length=8)
    namespace: DnsLabel | None = None
    name: Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([a-z0-9-]{0,18}[a-z0-9])?$")] = "gpuledger"
    secret: DnsSubdomain = "gpuledger-matrix"
    service_account: DnsSubdomain | None = None
    parallelism: int | None = Field(default=None, ge=1, le=1000)
    backoff_limit_per_index: int = Field(default=0, ge=0, le=10)
    cpu: Quantity | None = None
    memory: Quantity | None = None
    gpus: int = Field(default=0, ge=0, le=MAX_GPUS)
    gpu_vendor: GpuVendor = "nvidia"
    node_selector: dict[LabelKey, LabelValue] = Field(default_factory=dict, max_length=16)
    targets: dict[str, KubernetesTarget] = Field(default_factory=dict, max_length=1000)

    @field_validator("command")
    @classmethod
    def _command(cls, argv: list[str]) -> list[str]:
        return [_one_line(a, "a kubernetes.command item", 256) for a in argv]
