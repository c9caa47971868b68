"""The plan's ``slurm:`` section and ``--backend slurm --dry-run`` (no Slurm needed): each target's cells as
their own job array with the sbatch options it asks for, a bad section refused with one line naming the
key, and the flags that do not go together."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuledger.bench.matrix import parse_plan
from gpuledger.cli.main import main

DOCS = Path(__file__).resolve().parents[2] / "docs" / "matrix.md"


def plan_doc(**slurm: Any) -> dict[str, Any]:
    return {
        "bench": {"dataset": "random", "input_len": 8, "output_len": 8, "num_requests": 4},
        "matrix": {"target": [{"name": "h100", "base_url": "http://h100-node:8000", "model": "m"},
                              {"name": "mi300x", "base_url": "http://mi300x-node:8000", "model": "m"}],
                   "concurrency": [1, 8, 32]},
        "repeat": 2,
        "slurm": {"partition": "gpu", "account": "bench", "qos": "normal", "time_limit_min": 30, "gpus": 1,
                  "cpus_per_cell": 4, "mem_gb": 16, "sbatch": {"exclusive": True, "mail-type": "FAIL"},
                  "targets": {"h100": {"constraint": "h100", "gpu_type": "h100", "nodelist": "gpu[01-04]"},
                              "mi300x": {"partition": "amd", "gpus": 0}},
                  **slurm},
    }


def write(tmp_path: Path, doc: dict[str, Any]) -> Path:
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_the_dry_run_prints_each_targets_array_with_its_sbatch_options(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = write(tmp_path, plan_doc())
    assert main(["matrix", str(plan), "--backend", "slurm", "--dry-run", "--max-parallel", "2",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["runs"] == 12 and doc["folder"] == str(tmp_path / "slurm-jobs")
    h100, mi300x = doc["arrays"]
    assert (h100["targets"], h100["runs"], mi300x["targets"], mi300x["runs"]) == (["h100"], 6, ["mi300x"], 6)
    assert h100["cells"] == ["target=h100,concurrency=1", "target=h100,concurrency=8",
                             "target=h100,concurrency=32"]
    assert h100["sbatch"] == ["--array=0-5%2", "--signal=USR2@90", "--job-name=gpuledger-MATRIX_ID",
                              "--time=30", "--partition=gpu", "--account=bench", "--qos=normal",
                              "--constraint=h100", "--nodelist=gpu[01-04]",
                              "--gres=gpu:h100:1", "--cpus-per-task=4", "--mem=16G", "--exclusive",
                              "--mail-type=FAIL"]
    assert "--partition=amd" in mi300x["sbatch"] and not any(o.startswith("--gres") for o in mi300x["sbatch"])

    assert main(["matrix", str(plan), "--backend", "slurm", "--dry-run"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "12 runs as 2 Slurm job arrays (dry run: nothing submitted)" in text
    assert "Array 1: h100 — 6 tasks; sbatch --array=0-5%6" in text


def test_targets_that_ask_for_the_same_options_share_one_array(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    doc = plan_doc()
    doc["slurm"] = {"partition": "gpu"}
    assert main(["matrix", str(write(tmp_path, doc)), "--backend", "slurm", "--dry-run", "--json"]) == 0
    (array,) = json.loads(capsys.readouterr().out)["arrays"]
    assert array["targets"] == ["h100", "mi300x"] and array["runs"] == 12
    assert array["sbatch"] == ["--array=0-11%12", "--signal=USR2@90", "--job-name=gpuledger-MATRIX_ID",
                               "--time=60", "--partition=gpu"]


@pytest.mark.parametrize(("change", "message"), [
    ({"partiton": "gpu"}, "slurm.partiton: not a key of the plan here (did you mean 'partition'?)"),
    ({"targets": {"h100": {"constrain": "x"}}},
     "slurm.targets.h100.constrain: not a key of the plan here (did you mean 'constraint'?)"),
    ({"targets": {"h10": {}}}, "slurm.targets: 'h10' is not a target of the matrix (did you mean 'h100'?)"),
    ({"sbatch": {"array": "0-3"}}, "slurm.sbatch: array: not an option to set here (gpuledger sets it)"),
    ({"sbatch": {"partition": "x"}},
     "slurm.sbatch: partition: not an option to set here (give slurm.partition)"),
    ({"sbatch": {"exclusive": False}}, "slurm.sbatch.exclusive"),
    ({"gpus": 65}, "slurm.gpus: Input should be less than or equal to 64"),
    ({"time_limit_min": 0}, "slurm.time_limit_min: Input should be greater than or equal to 1"),
    ({"partition": "gpu; rm -rf /"}, "slurm.partition: String should match pattern"),
    ({"python": "venv/bin/python"}, "slurm.python must be the absolute path of the Python on the nodes"),
    ({"setup": ["module load cuda\nrm -rf /"]}, "a slurm.setup line must be one line"),
    ({"result_wait_s": 601}, "slurm.result_wait_s: Input should be less than or equal to 600"),
])
def test_a_bad_slurm_section_is_refused_whole_with_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, Any], message: str) -> None:
    doc = plan_doc()
    doc["slurm"].update(change)
    assert main(["matrix", str(write(tmp_path, doc)), "--backend", "slurm", "--dry-run"]) == 4
    err = " ".join(capsys.readouterr().err.split())
    assert message in err, err


def test_where_the_cells_run_is_not_part_of_the_plans_digest(tmp_path: Path) -> None:
    """--resume takes up a matrix with the same cells even when its slurm: section changed."""
    one = parse_plan(plan_doc(), "a", tmp_path)
    other = parse_plan(plan_doc(partition="other", time_limit_min=600), "b", tmp_path)
    bare = plan_doc()
    del bare["slurm"]
    assert one.digest == other.digest == parse_plan(bare, "c", tmp_path).digest
    assert "slurm" not in parse_plan(bare, "c", tmp_path).document
    assert parse_plan(plan_doc(), "d", tmp_path).document["slurm"]["partition"] == "gpu"


@pytest.mark.parametrize(("args", "message"), [
    (["--backend", "slurm", "--ray", "local"], "--ray is where Ray runs the cells: not with --backend slurm"),
    (["--backend", "k8s"], "--backend must be ray or slurm, got 'k8s' (Kubernetes: --emit k8s DIR)"),
    (["--target", "h100"], "--target goes with --index"),
    (["--index", "0"], "--index runs one run of matrix --resume ID here"),
    (["--index", "0", "--resume", "m-abcd2345", "--backend", "slurm"], "--index runs one run"),
])
def test_flags_that_do_not_go_together_are_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    assert main(["matrix", str(write(tmp_path, plan_doc())), *args]) == 2
    assert message in " ".join(capsys.readouterr().err.split())


def test_the_slurm_and_kubernetes_plan_in_the_docs_is_a_valid_plan(tmp_path: Path) -> None:
    """docs/matrix.md's second plan, as a user copies it: both backend sections, two targets."""
    blocks = [b.split("```", 1)[0] for b in DOCS.read_text().split("```yaml\n")[1:]]
    text = next(b for b in blocks if "\nslurm:" in b and "\nkubernetes:" in b)
    loaded = parse_plan(yaml.safe_load(text), "docs", tmp_path)
    assert loaded.plan.slurm is not None and loaded.plan.kubernetes is not None
    assert {t.key_name for t in loaded.plan.targets} == set(loaded.plan.slurm.targets) == set(
        loaded.plan.kubernetes.targets)
