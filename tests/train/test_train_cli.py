"""``gpuledger bench --task train`` and ``gpuledger cost`` on the command line: the issue's "done when" (a
dummy:smollm2-135m run with tokens/s, step time, the loss of every step and MFU n/a with its reason, priced
per 1M training tokens by the cpu-cloud profile), the whole-job price of --train-tokens, the refusals with
their exit codes, and a data-parallel run of two gloo processes (the world size and every rank's device
recorded, twice the tokens per step)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the training tests need torch (pip install '.[torch]')")

CLI = Callable[..., tuple[int, str, str]]


@pytest.mark.slow
def test_the_issues_smollm2_run_prints_its_figures_stores_the_run_and_is_priced(
    tmp_path: Path, cli: CLI
) -> None:
    db = f"sqlite:///{tmp_path / 's.sqlite'}"
    code, out, err = cli(
        "bench",
        "--task",
        "train",
        "--engine",
        "torch",
        "--model",
        "dummy:smollm2-135m",
        "--batch-size",
        "2",
        "--seq-len",
        "64",
        "--steps",
        "6",
        "--db",
        db,
        "--json",
    )
    assert code == 0, err
    run = json.loads(out)
    s = run["summary"]
    assert run["engine"] == "torch-train" and run["status"] == "complete" and s["kind"] == "training"
    assert s["training_tokens_per_s"] > 0 and s["step_time_s"]["p50"] > 0 and s["steps_total"] == 6
    assert s["tokens_per_step"] == 2 * 64
    assert [p["step"] for p in s["loss_curve"]] == list(range(6))
    assert all(p["loss"] > 0 for p in s["loss_curve"])
    assert s["mfu"] is None and s["mfu_reason"].startswith("no peak FLOP/s for ")
    assert s["model_flops_per_token"] == 650_491_776  # test_train_flops: the hand count at 64 tokens
    code, out, err = cli("cost", run["id"], "--profile", "cpu-cloud", "--db", db, "--json")
    assert code == 0, err
    cost = json.loads(out)
    per_1m = cost["usd_per_1m_training_tokens"]
    assert per_1m > 0 and cost["usd_per_1k_steps"] > 0 and cost["usd_per_1k_samples"] > 0
    assert cost["training"]["mfu"] is None and cost["training"]["world_size"] == 1
    code, out, err = cli(
        "cost", run["id"], "--profile", "cpu-cloud", "--train-tokens", "2e9", "--db", db, "--json"
    )
    assert code == 0, err
    job = json.loads(out)["training_job"]
    rate = s["training_tokens_per_s"]
    assert job["compute_hours"] == pytest.approx(2e9 / rate / 3600)
    assert job["hours"] == pytest.approx(job["compute_hours"] / cost["utilisation"])
    assert job["usd"] == pytest.approx(2e9 / 1e6 * per_1m)  # the job costs N × the price of a token
    assert job["steps"] == pytest.approx(2e9 / 128)


def test_a_training_run_on_the_terminal_leads_with_the_answer(
    tiny_llama_dir: Path, tmp_path: Path, cli: CLI
) -> None:
    db = f"sqlite:///{tmp_path / 's.sqlite'}"
    code, out, err = cli(
        "bench",
        "--task",
        "train",
        "--model",
        str(tiny_llama_dir),
        "--batch-size",
        "2",
        "--seq-len",
        "32",
        "--steps",
        "3",
        "--warmup-steps",
        "2",
        "--device",
        "cpu",
        "--db",
        db,
    )
    assert code == 0, err
    text = " ".join(out.split())
    first = out.splitlines()[1]
    assert "training tok/s" in first  # the headline rate right under the run's name
    for part in (
        "step time p50",
        "loss, first step",
        "MFU: n/a — no peak FLOP/s for",
        "Loss per step",
        "forward",
        "backward",
        "optimizer",
        "run id:",
    ):
        assert part in text, part
    code, out, err = cli(
        "cost",
        text.split("run id: ")[1].split()[0],
        "--profile",
        "cpu-cloud",
        "--train-tokens",
        "1e9",
        "--db",
        db,
    )
    assert code == 0, err
    assert "Training 1e+09 tokens on this stack:" in " ".join(out.split())


@pytest.mark.parametrize(
    ("args", "code", "text"),
    [
        (
            ["--task", "train", "--engine", "openai", "--model", "dummy:smollm2-135m"],
            2,
            "--task train runs torch, not --engine openai",
        ),
        (
            ["--task", "text", "--engine", "torch-train", "--model", "m"],
            2,
            "--engine torch-train is for --task",
        ),
        (["--task", "video"], 2, "--task must be text, image or train"),
        (["--task", "train"], 2, "--task train needs --model"),
        (
            ["--task", "train", "--model", "dummy:smollm2-135m", "--num-images", "2"],
            2,
            "--num-images: for --task image",
        ),
        (
            ["--task", "train", "--model", "dummy:smollm2-135m", "--dataset", "random"],
            2,
            "--dataset is not for --task train",
        ),
        (["--task", "train", "--model", "dummy:smollm2-135m", "--num-requests", "3"], 2, "give --steps"),
        (["--task", "train", "--model", "dummy:smollm2-135m", "--warmup", "3"], 2, "give --warmup-steps"),
        (
            ["--task", "train", "--model", "dummy:smollm2-135m", "--seq-len", "1"],
            2,
            "--seq-len must be between 2 and",
        ),
        (
            ["--task", "train", "--model", "dummy:smollm2-135m", "--steps", "0"],
            2,
            "--steps must be between 1",
        ),
        (
            ["--task", "train", "--model", "dummy:smollm2-135m", "--optimizer", "lion"],
            2,
            "--optimizer must be adamw or sgd",
        ),
        (
            ["--task", "train", "--model", "dummy:smollm2-135m", "--learning-rate", "nan"],
            2,
            "--learning-rate",
        ),
        (
            ["--task", "train", "--model", "dummy:smollm2-135m", "--dtype", "int8"],
            2,
            "--dtype must be one of",
        ),
        (["--model", "dummy:smollm2-135m", "--seq-len", "64"], 2, "--seq-len: for --task train"),
        (["--task", "image", "--grad-accum", "2"], 2, "--grad-accum: for --task train"),
        (
            ["--task", "train", "--model", "dummy:smollm2-135m", "--data", "/nonexistent.txt"],
            2,
            "--data needs the model folder's tokenizer",
        ),
        (
            ["--task", "train", "--model", "dummy:smollm2-135m", "--seq-len", "9000"],
            4,
            "handles at most 8192 positions",
        ),
    ],
)
def test_refusals_are_one_line_with_their_exit_code(cli: CLI, args: list[str], code: int, text: str) -> None:
    got, _, err = cli("bench", *args)
    assert got == code, err
    assert text in " ".join(err.split()) and "Traceback" not in err


def test_a_missing_data_file_is_exit_3(tiny_llama_dir: Path, cli: CLI) -> None:
    got, _, err = cli(
        "bench",
        "--task",
        "train",
        "--model",
        str(tiny_llama_dir),
        "--data",
        "/nonexistent.txt",
        "--seq-len",
        "16",
        "--steps",
        "1",
        "--device",
        "cpu",
    )
    assert got == 3 and "--data /nonexistent.txt: no such file" in err


def test_train_tokens_is_for_a_training_run(tmp_path: Path, cli: CLI) -> None:
    got, _, err = cli("cost", "nosuchrun", "--train-tokens", "-5")
    assert got == 2 and "--train-tokens must be a number of tokens in (0, 1e+18]" in err


def _ddp_bench(model_dir: Path, db: str, steps: int) -> list[str]:
    """The command each rank of the 2-process runs is started with (the same for every rank, as torchrun
    starts them): the tiny Llama, 2 × 32 tokens per rank, one warm-up step, on the CPU, stored in ``db``."""
    return [
        "bench", "--task", "train", "--model", str(model_dir), "--batch-size", "2", "--seq-len", "32",
        "--steps", str(steps), "--warmup-steps", "1", "--device", "cpu", "--no-telemetry",
        "--db", db, "--json",
    ]


Ranks = list[subprocess.Popen[bytes]]


def _two_ranks(args: list[str], tmp_path: Path) -> tuple[Ranks, list[tuple[Path, Path]]]:
    """Ranks 0 and 1 of a 2-process gloo run, as torchrun starts them: the rendezvous is a file (no socket),
    gloo binds loopback only, and each rank's output goes to files (no pipe to fill while the other runs)."""
    env = {
        **os.environ,
        "WORLD_SIZE": "2",
        "GPULEDGER_DIST_INIT_METHOD": f"file://{tmp_path / 'rendezvous'}",
        "GLOO_SOCKET_IFNAME": "lo",
        "OMP_NUM_THREADS": "1",
        "GPULEDGER_DIST_TIMEOUT_S": "120",
    }
    logs = [(tmp_path / f"rank{r}.out", tmp_path / f"rank{r}.err") for r in (0, 1)]
    ranks = []
    for rank, (out, err) in enumerate(logs):
        with open(out, "wb") as o, open(err, "wb") as e:
            ranks.append(
                subprocess.Popen(
                    [sys.executable, "-m", "gpuledger.cli.main", *args],
                    env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)},
                    stdout=o,
                    stderr=e,
                    start_new_session=True,
                )
            )
    return ranks, logs


def test_two_gloo_processes_train_data_parallel_and_rank_0_records_both(
    tiny_llama_dir: Path, tmp_path: Path, cli: CLI
) -> None:
    """Two CPU processes on this machine, as torchrun starts them: the rendezvous is a file (no socket) and
    gloo binds loopback only (GLOO_SOCKET_IFNAME=lo)."""
    db = f"sqlite:///{tmp_path / 's.sqlite'}"
    args = _ddp_bench(tiny_llama_dir, db, steps=4)
    ranks, logs = _two_ranks(args, tmp_path)
    try:
        for p in ranks:
            p.wait(timeout=300)
    finally:
        for p in ranks:
            if p.poll() is None:
                os.killpg(p.pid, 9)
    (out0, err0), (out1, err1) = ((o.read_text(), e.read_text()) for o, e in logs)
    assert [p.returncode for p in ranks] == [0, 0], (err0, err1)
    assert out1 == "" and "rank 1: 5 steps with rank 0" in err1  # 1 warm-up + 4 measured
    run = json.loads(out0)
    config, s = run["config"], run["summary"]
    assert config["world_size"] == 2 and config["dist_backend"] == "gloo"
    assert [(r["rank"], r["device"]) for r in config["ranks"]] == [(0, "cpu"), (1, "cpu")]
    assert s["world_size"] == 2 and s["steps_total"] == 4
    code, out, err = cli("bench", *args[1:-1], "--json")  # the same command, one process
    assert code == 0, err
    single = json.loads(out)["summary"]
    assert s["tokens_per_step"] == 2 * single["tokens_per_step"] == 2 * 2 * 32
    assert s["samples_per_step"] == 2 * single["samples_per_step"]
    code, out, _ = cli("runs", "--db", db, "--json")
    assert len(json.loads(out)) == 2  # rank 1 stored nothing


@pytest.mark.slow
def test_run_task_train_is_doctor_bench_cost_report(tmp_path: Path, cli: CLI) -> None:
    html = tmp_path / "r.html"
    code, out, err = cli(
        "run", "--task", "train", "--quick", "--profile", "cpu-cloud", "--html", str(html), "--json"
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["task"] == "train" and doc["status"] == "complete" and doc["doctor"] is not None
    assert doc["model"] == "dummy:smollm2-135m" and doc["metrics"]["steps"] == 3  # --quick on a CPU
    assert doc["metrics"]["training_tokens_per_s"] > 0 and doc["metrics"]["mfu_reason"].startswith("no peak")
    assert doc["cost"]["usd_per_1m_training_tokens"] > 0
    assert html.is_file() and "Loss per step" in html.read_text()


def test_bench_like_repeats_a_training_runs_workload(tiny_llama_dir: Path, tmp_path: Path, cli: CLI) -> None:
    db = f"sqlite:///{tmp_path / 's.sqlite'}"
    code, out, err = cli(
        "bench",
        "--task",
        "train",
        "--model",
        str(tiny_llama_dir),
        "--batch-size",
        "2",
        "--seq-len",
        "32",
        "--grad-accum",
        "2",
        "--steps",
        "3",
        "--warmup-steps",
        "1",
        "--optimizer",
        "sgd",
        "--device",
        "cpu",
        "--no-telemetry",
        "--db",
        db,
        "--json",
    )
    assert code == 0, err
    first = json.loads(out)
    code, out, err = cli(
        "bench",
        "--like",
        first["id"],
        "--steps",
        "2",
        "--device",
        "cpu",
        "--no-telemetry",
        "--db",
        db,
        "--json",
    )
    assert code == 0, err
    again = json.loads(out)
    assert again["engine"] == "torch-train" and again["config"]["like"]["overridden"] == ["steps"]
    c = again["config"]
    assert (c["batch_size"], c["seq_len"], c["grad_accum"], c["optimizer"]) == (2, 32, 2, "sgd")
    assert again["summary"]["steps_total"] == 2 and again["summary"]["tokens_per_step"] == 2 * 2 * 32


def test_ctrl_c_stops_every_rank_at_the_same_step_and_keeps_the_finished_ones(
    tiny_llama_dir: Path, tmp_path: Path
) -> None:
    """Ctrl-C at a terminal reaches every rank: rank 0 stores the run as incomplete with its finished steps,
    and both ranks end promptly (no rank left waiting in a collective)."""
    import signal
    import time

    from gpuledger.store import open_store

    db = f"sqlite:///{tmp_path / 's.sqlite'}"
    args = _ddp_bench(tiny_llama_dir, db, steps=100000)
    ranks, logs = _two_ranks(args, tmp_path)
    try:
        deadline = time.monotonic() + 120
        stored = 0
        while stored < 3 and time.monotonic() < deadline:
            time.sleep(0.5)
            with open_store(db) as store:
                runs = store.list_runs()
                stored = len(store.get_requests(runs[0].id)) if runs else 0
        assert stored >= 3, "rank 0 stored no steps"
        for p in ranks:
            os.killpg(p.pid, signal.SIGINT)
        for p in ranks:
            p.wait(timeout=60)
    finally:
        for p in ranks:
            if p.poll() is None:
                os.killpg(p.pid, 9)
    (out0, err0), (_, err1) = ((o.read_text(), e.read_text()) for o, e in logs)
    assert [p.returncode for p in ranks] == [130, 130], (err0, err1)
    run = json.loads(out0)
    s = run["summary"]
    assert run["status"] == "incomplete" and s["interrupted"]["signal"] == "SIGINT"
    assert s["steps_total"] == s["interrupted"]["finished_requests"] >= 3
    assert "rank 1 stopped after" in err1
