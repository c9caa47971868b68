"""``gpuledger matrix PLAN --emit k8s DIR``: a two-target plan (an NVIDIA node and an AMD node) as an Indexed
Job per target and a ConfigMap, each file read back through the strict models of the fields written; and
what a pod runs (``--resume ID --target T --index N``), run here against a loopback server, into a store
the first pod creates the matrix in."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from stream_server import Scenario, StreamServer

from gpuledger.bench.matrix import parse_plan
from gpuledger.bench.matrix_k8s import ConfigMap, Job, build, read_manifest
from gpuledger.cli.main import main
from gpuledger.errors import InvalidInputError
from gpuledger.store import open_store

Serve = Callable[..., StreamServer]


def two_target_plan(tmp_path: Path, urls: dict[str, str] | None = None, **kubernetes: Any) -> Path:
    urls = urls or {"h100": "http://h100-node:8000", "mi300x": "http://mi300x-node:8000"}
    plan = {
        "name": "k8s",
        "bench": {"dataset": "random", "input_len": 8, "num_requests": 4, "warmup": 0, "telemetry": False},
        "matrix": {"target": [{"name": n, "base_url": u, "model": "test-model", "profile": "cpu-cloud"}
                              for n, u in urls.items()],
                   "concurrency": [1, 4], "output_len": [8]},  # not the schema's order: keys keep the plan's
        "exclude": [{"target": "mi300x", "concurrency": 4}] if "mi300x" in urls else [],
        "repeat": 2,
        "kubernetes": {
            "image": "ghcr.io/acme/gpuledger:1.4", "namespace": "bench", "parallelism": 2,
            "backoff_limit_per_index": 1, "cpu": "2", "memory": "4Gi",
            "targets": {"h100": {"node_selector": {"gpu": "h100"}, "gpus": 1, "gpu_vendor": "nvidia"},
                        "mi300x": {"node_selector": {"gpu": "mi300x"}, "gpus": 1, "gpu_vendor": "amd"}},
            **kubernetes,
        },
    }
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return path


def run(capsys: pytest.CaptureFixture[str], *args: str, code: int = 0) -> dict[str, Any]:
    got = main([*args, "--json"])
    out = capsys.readouterr()
    assert got == code, out.err
    doc: dict[str, Any] = json.loads(out.out) if out.out.strip() else {}
    doc["stderr"] = out.err
    return doc


def test_a_two_target_plan_is_an_indexed_job_per_target_and_a_configmap_that_validate(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = two_target_plan(tmp_path)
    out = tmp_path / "manifests"
    emitted = run(capsys, "matrix", str(plan), "--emit", "k8s", str(out))
    matrix_id = emitted["matrix_id"]
    assert sorted(p.name for p in out.iterdir()) == ["00-configmap.yaml", "10-job-h100.yaml",
                                                     "10-job-mi300x.yaml"] == sorted(emitted["files"])
    assert emitted["apply"] == f"kubectl apply -f {out}"
    manifests = {p.name: read_manifest(p.read_text()) for p in out.iterdir()}  # the strict models
    configmap = manifests["00-configmap.yaml"]
    assert isinstance(configmap, ConfigMap) and configmap.metadata.namespace == "bench"
    jobs = {n: m for n, m in manifests.items() if isinstance(m, Job)}

    raw = {n: yaml.safe_load((out / n).read_text()) for n in jobs}
    h100, mi300x = raw["10-job-h100.yaml"], raw["10-job-mi300x.yaml"]
    assert h100["apiVersion"] == "batch/v1" and h100["kind"] == "Job"
    assert h100["spec"]["completionMode"] == "Indexed"
    # One completion per run: h100 has 2 cells × 2 repeats, mi300x 1 cell (one excluded) × 2 repeats.
    assert (h100["spec"]["completions"], mi300x["spec"]["completions"]) == (4, 2)
    assert (h100["spec"]["parallelism"], h100["spec"]["backoffLimitPerIndex"]) == (2, 1)
    pods = {name: doc["spec"]["template"]["spec"] for name, doc in (("h100", h100), ("mi300x", mi300x))}
    assert pods["h100"]["nodeSelector"] == {"gpu": "h100"}
    assert pods["mi300x"]["nodeSelector"] == {"gpu": "mi300x"}
    assert pods["h100"]["restartPolicy"] == "Never"
    (h100_box,), (mi300x_box,) = pods["h100"]["containers"], pods["mi300x"]["containers"]
    assert h100_box["resources"] == {"limits": {"nvidia.com/gpu": "1"},
                                     "requests": {"cpu": "2", "memory": "4Gi"}}
    assert mi300x_box["resources"]["limits"] == {"amd.com/gpu": "1"}
    assert h100_box["image"] == "ghcr.io/acme/gpuledger:1.4" and h100_box["command"] == ["gpuledger"]
    assert h100_box["args"] == ["matrix", "/etc/gpuledger/plan.yaml", "--resume", matrix_id,
                                "--target", "h100",
                                "--index", "$(JOB_COMPLETION_INDEX)", "--no-progress", "--json"]
    env = {e["name"]: e["valueFrom"] for e in h100_box["env"]}
    assert env["JOB_COMPLETION_INDEX"] == {"fieldRef": {
        "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}
    assert env["GPULEDGER_DB"] == {"secretKeyRef": {"name": "gpuledger-matrix", "key": "GPULEDGER_DB"}}
    assert h100_box["volumeMounts"] == [{"name": "plan", "mountPath": "/etc/gpuledger", "readOnly": True}]
    assert pods["h100"]["volumes"] == [{"name": "plan", "configMap": {"name": configmap.metadata.name}}]
    assert h100["metadata"]["labels"]["gpuledger.dev/matrix"] == matrix_id

    # The ConfigMap's plan is the plan: the same cells under the same keys.
    pod_plan = parse_plan(yaml.safe_load(configmap.data["plan.yaml"]), "pod", Path("/etc/gpuledger"))
    mine = parse_plan(yaml.safe_load(plan.read_text()), "here", tmp_path)
    assert [c.key for c in pod_plan.cells] == [c.key for c in mine.cells]
    assert pod_plan.digest == mine.digest
    assert configmap.data["image"] == "ghcr.io/acme/gpuledger:1.4"
    assert configmap.data["command"].startswith(
        f"gpuledger matrix /etc/gpuledger/plan.yaml --resume {matrix_id}")


def test_credentials_in_a_target_url_stay_out_of_the_manifests_and_come_from_the_secret(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = two_target_plan(tmp_path, {"h100": "http://bench:s3cret@h100-node:8000", "mi300x": "http://m:8000"})
    doc = yaml.safe_load(plan.read_text())
    doc["matrix"]["target"][1]["api_key_env"] = "MI300X_KEY"
    plan.write_text(yaml.safe_dump(doc))
    out = tmp_path / "m"
    emitted = run(capsys, "matrix", str(plan), "--emit", "k8s", str(out))
    assert emitted["secret_keys"] == ["GPULEDGER_DB", "GPULEDGER_MATRIX_URL_H100", "MI300X_KEY"]
    for path in out.iterdir():
        assert "s3cret" not in path.read_text(), path
    configmap = read_manifest((out / "00-configmap.yaml").read_text())
    assert isinstance(configmap, ConfigMap)
    assert "http://bench:***@h100-node:8000" in configmap.data["plan.yaml"]
    (box,) = yaml.safe_load((out / "10-job-h100.yaml").read_text())["spec"]["template"]["spec"]["containers"]
    assert {"name": "GPULEDGER_MATRIX_URL_H100", "valueFrom": {"secretKeyRef": {
        "name": "gpuledger-matrix", "key": "GPULEDGER_MATRIX_URL_H100"}}} in box["env"]


def test_what_a_pod_runs_creates_the_matrix_runs_its_index_and_skips_a_run_already_complete(
        serve: Serve, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The emitted command, run here the way two pods of target a's Job would (indexes 0 and 3), from the
    ConfigMap's plan, the server's credentials from the variable the Secret would set."""
    srv = serve(Scenario())
    plan = two_target_plan(tmp_path, {"a": srv.url.replace("http://", "http://u:pw@")},
                           targets={"a": {"node_selector": {"gpu": "cpu"}}})
    out = tmp_path / "m"
    emitted = run(capsys, "matrix", str(plan), "--emit", "k8s", str(out))
    configmap = read_manifest((out / "00-configmap.yaml").read_text())
    assert isinstance(configmap, ConfigMap)
    pod_plan = tmp_path / "pod" / "plan.yaml"
    pod_plan.parent.mkdir()
    pod_plan.write_text(configmap.data["plan.yaml"])
    (job,) = emitted["jobs"]
    assert job["completions"] == 4
    (box,) = yaml.safe_load((out / job["file"]).read_text())["spec"]["template"]["spec"]["containers"]
    args = box["args"]
    monkeypatch.setenv("GPULEDGER_MATRIX_URL_A", srv.url.replace("http://", "http://u:pw@"))

    def pod(index: int, code: int = 0) -> dict[str, Any]:
        argv = [a.replace("$(JOB_COMPLETION_INDEX)", str(index)) for a in args]
        argv[1] = str(pod_plan)
        return run(capsys, *argv[:-1], code=code)

    first = pod(0)
    assert first["resumed"] is False and first["counts"]["complete"] == 1  # this one created the matrix
    assert (first["outcomes"][0]["key"], first["outcomes"][0]["repeat"]) == (
        "target=a,concurrency=1,output_len=8", 1)
    last = pod(3)
    assert last["resumed"] is True and (last["outcomes"][0]["key"], last["outcomes"][0]["repeat"]) == (
        "target=a,concurrency=4,output_len=8", 2)
    again = pod(0)  # a pod retried after its run completed
    assert again["outcomes"][0]["status"] == "skipped"
    sent = {r.headers.get("Authorization") for r in srv.requests if "completions" in r.path}
    assert sent == {"Basic " + base64.b64encode(b"u:pw").decode()}  # the credentials, from the variable
    with open_store(None) as store:
        cells = {(c.key, c.repeat): c.status for c in store.matrix_cells(emitted["matrix_id"])}
        assert len(store.list_runs()) == 2
        assert store.get_matrix(emitted["matrix_id"]).status == "running"  # two runs still pending
    assert sorted(cells.values()) == ["complete", "complete", "pending", "pending"]
    assert pod(4, code=2)["stderr"].count("has 4 runs of target a (indexes 0 to 3)") == 1


def test_two_pods_creating_the_matrix_at_once_make_one(db_url: str) -> None:
    cells = [("target=a", 1, {"values": {"target": "a"}})]
    created: list[bool] = []
    with open_store(db_url) as store:
        threads = [threading.Thread(target=lambda: created.append(
            store.ensure_matrix("m-race0001", {"repeat": 1}, "sha256:same", cells))) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(created) == [False, True]
        assert [c.key for c in store.matrix_cells("m-race0001")] == ["target=a"]
        with pytest.raises(InvalidInputError, match="was started with another plan"):
            store.ensure_matrix("m-race0001", {"repeat": 1}, "sha256:other", cells)


def test_a_manifest_with_a_field_the_models_do_not_know_is_refused(tmp_path: Path) -> None:
    loaded = parse_plan(yaml.safe_load(two_target_plan(tmp_path).read_text()), "plan", tmp_path)
    text = dict(build(loaded, "m-abcd2345").files)["10-job-h100.yaml"]
    assert isinstance(read_manifest(text), Job)
    job = yaml.safe_load(text)
    job["spec"]["suspend"] = True
    with pytest.raises(InvalidInputError, match=r"Job: spec.suspend: Extra inputs are not permitted"):
        read_manifest(yaml.safe_dump(job))
    job = yaml.safe_load(text)
    job["spec"]["completionMode"] = "NonIndexed"
    with pytest.raises(InvalidInputError, match=r"Job: spec.completionMode: Input should be 'Indexed'"):
        read_manifest(yaml.safe_dump(job))


@pytest.mark.parametrize(("change", "message"), [
    ({"image": "bad image"}, "kubernetes.image: String should match pattern"),
    ({"gpus": 65}, "kubernetes.gpus: Input should be less than or equal to 64"),
    ({"gpu_vendor": "intel"}, "kubernetes.gpu_vendor: Input should be 'nvidia' or 'amd'"),
    ({"targets": {"h10": {}}},
     "kubernetes.targets: 'h10' is not a target of the matrix (did you mean 'h100'?)"),
    ({"node_selectr": {}},
     "kubernetes.node_selectr: not a key of the plan here (did you mean 'node_selector'?)"),
])
def test_a_bad_kubernetes_section_is_refused_naming_the_key(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, Any], message: str) -> None:
    plan = two_target_plan(tmp_path, **change)
    if "targets" in change:
        doc = yaml.safe_load(plan.read_text())
        doc["kubernetes"]["targets"] = change["targets"]
        plan.write_text(yaml.safe_dump(doc))
    assert main(["matrix", str(plan), "--emit", "k8s", str(tmp_path / "m")]) == 4
    assert message in " ".join(capsys.readouterr().err.split())
    assert not (tmp_path / "m").exists()


def test_emit_needs_the_section_and_a_directory_it_can_write(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = two_target_plan(tmp_path)
    doc = yaml.safe_load(plan.read_text())
    del doc["kubernetes"]
    bare = tmp_path / "bare.yaml"
    bare.write_text(yaml.safe_dump(doc))
    assert main(["matrix", str(bare), "--emit", "k8s", str(tmp_path / "m")]) == 4
    assert "--emit k8s needs the plan's kubernetes: section" in capsys.readouterr().err
    assert main(["matrix", str(plan), "--emit", "k8s", str(tmp_path / "no" / "such")]) == 4
    assert "does not exist" in capsys.readouterr().err
    assert main(["matrix", str(plan), "--emit", "helm", str(tmp_path / "m")]) == 2
    assert main(["matrix", str(plan), "--emit", "k8s", str(tmp_path / "m"), "--dry-run"]) == 2
    capsys.readouterr()
