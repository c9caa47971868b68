"""``gpuledger matrix PLAN --emit k8s DIR``: the plan as Kubernetes manifests, for ``kubectl apply -f DIR``.

What is written:

- ``00-configmap.yaml``: a ConfigMap holding the plan (``plan.yaml``: the plan as loaded, every URL's
  secrets redacted, the axes in the plan's order so the cells keep their keys), the image and the
  command each pod runs;
- ``10-job-TARGET.yaml`` for each target: an Indexed Job (``completionMode: Indexed``), one completion per
  run of the target (its cells × repeats), whose pod runs ``gpuledger matrix /etc/gpuledger/plan.yaml
  --resume MATRIX_ID --target TARGET --index $(JOB_COMPLETION_INDEX)``: the ordinary cell
  (``matrix_run.run_index``) writing its run into the shared store. The first pod to start creates the
  matrix there; no ``collect`` step is needed. Each target's Job has its own node selector and GPU
  request (``nvidia.com/gpu`` or ``amd.com/gpu``): one Job per target, since a Job's pods share one
  template.

Secrets are never written: the pods read ``GPULEDGER_DB`` (the store), the targets' ``api_key_env``
variables and the credentials of a target URL (``GPULEDGER_MATRIX_URL_<TARGET>``) from the Secret named
in ``kubernetes.secret``, whose keys are those variables' names.

Every manifest is a strict pydantic model of exactly the fields written (``ConfigMap``, ``Job``: unknown
fields refused, names checked against Kubernetes' patterns and lengths), and what is written is parsed
back through the model and compared (``check_manifest``) before it is returned.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError
from pydantic.alias_generators import to_camel

from gpuledger.bench.matrix import LoadedPlan, MatrixPlan, Target, parse_plan
from gpuledger.bench.matrix_cell import has_secret, telemetry_env_name, url_env_name
from gpuledger.bench.matrix_run import plan_runs
from gpuledger.bench.matrix_sections import GPU_RESOURCE, KubernetesSection, KubernetesTarget
from gpuledger.errors import InvalidInputError
from gpuledger.store.engine import DB_ENV as STORE_ENV
from gpuledger.urls import redact_url

PLAN_DIR = "/etc/gpuledger"
PLAN_FILE = "plan.yaml"
INDEX_ENV = "JOB_COMPLETION_INDEX"
INDEX_ANNOTATION = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
MAX_JOB_NAME = 52  # a Job's pods are named JOB-INDEX-xxxxx, and their hostnames JOB-INDEX (63 at most)
CONFIGMAP_FILE = "00-configmap.yaml"

_NAME = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"
Name = Annotated[str, StringConstraints(pattern=_NAME)]
EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")]
SecretKey = Annotated[str, StringConstraints(pattern=r"^[-._a-zA-Z0-9]{1,253}$")]
LabelValue = Annotated[str, StringConstraints(pattern=r"^([A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?$")]
LabelMap = dict[Annotated[str, StringConstraints(max_length=317)], LabelValue]
_K8S = ConfigDict(extra="forbid", strict=True, alias_generator=to_camel, populate_by_name=True)


class ObjectMeta(BaseModel):
    model_config = _K8S

    name: Name
    namespace: Name | None = None
    labels: LabelMap = Field(default_factory=dict)


class ConfigMap(BaseModel):
    """v1 ConfigMap: the fields written."""

    model_config = _K8S

    api_version: Literal["v1"] = "v1"
    kind: Literal["ConfigMap"] = "ConfigMap"
    metadata: ObjectMeta
    data: dict[Annotated[str, StringConstraints(pattern=r"^[-._a-zA-Z0-9]{1,253}$")], str]


class ObjectFieldSelector(BaseModel):
    model_config = _K8S

    field_path: Annotated[str, StringConstraints(min_length=1, max_length=256)]


class SecretKeySelector(BaseModel):
    model_config = _K8S

    name: Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")]
    key: SecretKey


class EnvVarSource(BaseModel):
    model_config = _K8S

    field_ref: ObjectFieldSelector | None = None
    secret_key_ref: SecretKeySelector | None = None


class EnvVar(BaseModel):
    model_config = _K8S

    name: EnvName
    value_from: EnvVarSource


class ResourceRequirements(BaseModel):
    model_config = _K8S

    limits: dict[str, str] | None = None
    requests: dict[str, str] | None = None


class VolumeMount(BaseModel):
    model_config = _K8S

    name: Name
    mount_path: str
    read_only: bool


class Container(BaseModel):
    model_config = _K8S

    name: Name
    image: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,511}$")]
    command: list[str] = Field(min_length=1)
    args: list[str]
    env: list[EnvVar]
    resources: ResourceRequirements
    volume_mounts: list[VolumeMount]


class ConfigMapVolumeSource(BaseModel):
    model_config = _K8S

    name: Name


class Volume(BaseModel):
    model_config = _K8S

    name: Name
    config_map: ConfigMapVolumeSource


class PodSpec(BaseModel):
    model_config = _K8S

    restart_policy: Literal["Never"] = "Never"  # what backoffLimitPerIndex needs
    service_account_name: Name | None = None
    node_selector: LabelMap | None = None
    containers: list[Container] = Field(min_length=1, max_length=1)
    volumes: list[Volume]


class PodTemplateMeta(BaseModel):
    model_config = _K8S

    labels: LabelMap


class PodTemplateSpec(BaseModel):
    model_config = _K8S

    metadata: PodTemplateMeta
    spec: PodSpec


class JobSpec(BaseModel):
    model_config = _K8S

    completion_mode: Literal["Indexed"] = "Indexed"
    completions: int = Field(ge=1, le=100_000)
    parallelism: int = Field(ge=1, le=100_000)
    backoff_limit_per_index: int = Field(ge=0, le=10)
    template: PodTemplateSpec


class Job(BaseModel):
    """batch/v1 Job (Indexed): the fields written."""

    model_config = _K8S

    api_version: Literal["batch/v1"] = "batch/v1"
    kind: Literal["Job"] = "Job"
    metadata: ObjectMeta
    spec: JobSpec


# -- what --emit k8s reports -----------------------------------------------------------------------------

_DOC = ConfigDict(extra="forbid")


class EmittedJob(BaseModel):
    model_config = _DOC

    file: str
    name: str
    target: str
    completions: int
    parallelism: int
    gpus: dict[str, str]
    node_selector: dict[str, str]


class EmitDoc(BaseModel):
    """``gpuledger matrix PLAN --emit k8s DIR --json``."""

    model_config = _DOC

    matrix_id: str
    directory: str
    files: list[str]
    configmap: str
    namespace: str | None
    jobs: list[EmittedJob]
    secret: str
    secret_keys: list[str]
    apply: str
    notes: list[str]


@dataclass(frozen=True)
class Manifests:
    """The files to write into DIR (name, YAML text), and what they are."""

    files: list[tuple[str, str]]
    doc: EmitDoc


def _label(text: str, limit: int) -> str:
    """``text`` as a DNS label of at most ``limit`` characters (a short hash when it had to change)."""
    clean = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    if clean == text and len(clean) <= limit:
        return clean
    tag = hashlib.sha256(text.encode()).hexdigest()[:6]
    head = clean[: max(0, limit - len(tag) - 1)].strip("-")
    return f"{head}-{tag}" if head else tag


def _section(loaded: LoadedPlan) -> KubernetesSection:
    section = loaded.plan.kubernetes
    if section is None:
        raise InvalidInputError(f"{loaded.where}: --emit k8s needs the plan's kubernetes: section (at least "
                                "image: an image with gpuledger installed)",
                                hint="docs/matrix.md, 'Kubernetes'")
    return section


def configmap_plan(loaded: LoadedPlan) -> dict[str, Any]:
    """The plan the pods read: as loaded, without its unset values, the axes in the plan's order (so the
    cells keep their keys), every target URL redacted (its credentials come from the Secret)."""
    doc = loaded.plan.model_dump(mode="json", exclude_none=True)
    order = list(loaded.cells[0].values)
    doc["matrix"] = {k: doc["matrix"][k] for k in [*order, *doc["matrix"]] if k in doc["matrix"]}
    for target in doc["matrix"]["target"]:
        target["base_url"] = redact_url(target["base_url"])
    return doc


def _secret_keys(plan: MatrixPlan) -> list[str]:
    """The variables each pod takes from the Secret: the store, the API keys, the URLs with secrets."""
    keys = [STORE_ENV]
    keys += [v for v in [plan.bench.api_key_env, *(plan.matrix.api_key_env or [])] if v]
    for target in plan.targets:
        if target.api_key_env:
            keys.append(target.api_key_env)
        if has_secret(target.base_url):
            keys.append(url_env_name(target.key_name))
        if any(has_secret(u) for u in target.telemetry_from):
            keys.append(telemetry_env_name(target.key_name))
    return list(dict.fromkeys(keys))


def _placement(section: KubernetesSection, target: Target) -> tuple[dict[str, str], dict[str, str]]:
    own = section.targets.get(target.key_name) or KubernetesTarget()
    gpus = section.gpus if own.gpus is None else own.gpus
    vendor = own.gpu_vendor or section.gpu_vendor
    limits = {GPU_RESOURCE[vendor]: str(gpus)} if gpus else {}
    return limits, {**section.node_selector, **own.node_selector}


def build(loaded: LoadedPlan, matrix_id: str) -> Manifests:
    """The manifests of the plan's matrix ``matrix_id`` (checked: ``check_manifest``)."""
    section = _section(loaded)
    plan_doc = configmap_plan(loaded)
    again = parse_plan(plan_doc, f"{PLAN_DIR}/{PLAN_FILE}", Path(PLAN_DIR))
    if [c.key for c in again.cells] != [c.key for c in loaded.cells]:
        raise InvalidInputError(f"{loaded.where}: the plan written for the pods does not give the same cells")
    plan_text = yaml.safe_dump(plan_doc, sort_keys=False, allow_unicode=True)
    secret_keys = _secret_keys(loaded.plan)
    base = f"{section.name}-{matrix_id}"
    common = {"app.kubernetes.io/name": "gpuledger", "app.kubernetes.io/component": "matrix-cell",
              "gpuledger.dev/matrix": matrix_id}
    files: list[tuple[str, str]] = []
    jobs: list[EmittedJob] = []
    first_command: list[str] | None = None
    names: set[str] = set()
    for target in loaded.plan.targets:
        runs = len(plan_runs(loaded, target.key_name))
        if not runs:
            continue  # every cell of the target excluded
        label = _label(target.key_name, MAX_JOB_NAME - len(base) - 1)
        name = f"{base}-{label}"
        if name in names:
            raise InvalidInputError(f"{loaded.where}: two targets give the Job name {name}: rename one")
        names.add(name)
        args = ["matrix", f"{PLAN_DIR}/{PLAN_FILE}", "--resume", matrix_id, "--target", target.key_name,
                "--index", f"$({INDEX_ENV})", "--no-progress", "--json"]
        first_command = first_command or [*section.command, *args]
        env = [EnvVar(name=INDEX_ENV, value_from=EnvVarSource(field_ref=ObjectFieldSelector(
            field_path=INDEX_ANNOTATION)))]
        env += [EnvVar(name=k, value_from=EnvVarSource(secret_key_ref=SecretKeySelector(name=section.secret,
                                                                                       key=k)))
                for k in secret_keys]
        limits, selector = _placement(section, target)
        requests = {k: v for k, v in (("cpu", section.cpu), ("memory", section.memory)) if v is not None}
        labels = {**common, "gpuledger.dev/target": label}
        job = Job(
            metadata=ObjectMeta(name=name, namespace=section.namespace, labels=labels),
            spec=JobSpec(
                completions=runs, parallelism=min(section.parallelism or runs, runs),
                backoff_limit_per_index=section.backoff_limit_per_index,
                template=PodTemplateSpec(metadata=PodTemplateMeta(labels=labels), spec=PodSpec(
                    service_account_name=section.service_account, node_selector=selector or None,
                    containers=[Container(
                        name="cell", image=section.image, command=list(section.command), args=args, env=env,
                        resources=ResourceRequirements(limits=limits or None, requests=requests or None),
                        volume_mounts=[VolumeMount(name="plan", mount_path=PLAN_DIR, read_only=True)])],
                    volumes=[Volume(name="plan", config_map=ConfigMapVolumeSource(name=base))]))))
        file = f"10-job-{label}.yaml"
        files.append((file, check_manifest(job)))
        jobs.append(EmittedJob(file=file, name=name, target=target.key_name, completions=runs,
                               parallelism=job.spec.parallelism, gpus=limits, node_selector=selector))
    configmap = ConfigMap(metadata=ObjectMeta(name=base, namespace=section.namespace, labels=common),
                          data={PLAN_FILE: plan_text, "image": section.image,
                                "command": shlex.join(first_command or list(section.command)),
                                "matrix-id": matrix_id})
    files.insert(0, (CONFIGMAP_FILE, check_manifest(configmap)))
    notes = []
    if any(c.settings.get("dataset_path") for c in loaded.cells):
        notes.append("a dataset_path is read where the pod runs: give it as an absolute path inside the "
                     "image")
    doc = EmitDoc(matrix_id=matrix_id, directory="", files=[f for f, _ in files], configmap=base,
                  namespace=section.namespace, jobs=jobs, secret=section.secret, secret_keys=secret_keys,
                  apply="kubectl apply -f DIR", notes=notes)
    return Manifests(files, doc)


def check_manifest(obj: ConfigMap | Job) -> str:
    """``obj`` as YAML, after checking that the text parses back through its model to the same object
    (what ``kubectl apply`` reads is what was validated)."""
    data = obj.model_dump(mode="json", by_alias=True, exclude_none=True)
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    if read_manifest(text).model_dump(mode="json", by_alias=True, exclude_none=True) != data:
        raise InvalidInputError(f"the {obj.kind} {obj.metadata.name} does not read back as written")
    return text


def read_manifest(text: str) -> ConfigMap | Job:
    """A manifest this module writes, parsed strictly (``InvalidInputError`` for anything else)."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvalidInputError(f"not YAML: {exc}") from exc
    if not isinstance(doc, Mapping):
        raise InvalidInputError("a manifest is a mapping")
    model: type[ConfigMap] | type[Job] = Job if doc.get("kind") == "Job" else ConfigMap
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        err = exc.errors()[0]
        at = ".".join(str(p) for p in err["loc"])
        raise InvalidInputError(f"{model.__name__}: {at}: {err['msg']}") from exc
