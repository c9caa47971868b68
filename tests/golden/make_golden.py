"""Write the golden store and the golden command outputs (tests/golden/README.md says why).

Run ONCE, with the code of the commit named in tests/golden/README.md, from the repository root:

    .venv/bin/python tests/golden/make_golden.py

It makes ``tests/golden/store-v1.sqlite`` the way users' stores were made then — runs measured by
``gpuledger bench`` against a loopback server, an in-process torch run, an interrupted run, and GPU runs
written through the store API with telemetry summarised by the real sampler functions — and records what
``show``, ``cost``, ``compare``, ``estimate``, ``report`` and ``export`` printed for them with ``--json``
(``tests/golden/outputs/*.json``). ``tests/golden/test_golden.py`` runs the same commands with today's code
on a copy of that store and compares.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "tests" / "bench"))
sys.path.insert(0, str(REPO / "tests" / "report"))
sys.path.insert(0, str(REPO / "tests"))

from report_factory import CPU, H200, MI300X, make_run, synth_requests  # noqa: E402
from stream_server import Scenario, StreamServer  # noqa: E402

from gpuledger.store import open_store  # noqa: E402

STORE = HERE / "store-v1.sqlite"
OUT = HERE / "outputs"
GPULEDGER = str(Path(sys.executable).with_name("gpuledger"))


def cli(*args: str, check: bool = True, store: Path = STORE) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPULEDGER_DB": f"sqlite:///{store}", "COLUMNS": "120"}
    p = subprocess.run([GPULEDGER, *args], capture_output=True, text=True, env=env, timeout=600)
    if check and p.returncode != 0:
        raise SystemExit(f"gpuledger {' '.join(args)} -> {p.returncode}\n{p.stderr}")
    return p


def bench(label: str, *args: str) -> str:
    p = cli("bench", "--label", label, "--json", *args)
    return str(json.loads(p.stdout)["id"])


def main() -> None:
    if STORE.exists():
        STORE.unlink()
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    ids: dict[str, str] = {}

    with StreamServer(Scenario(ttft_s=0.02, itl_s=0.002, identity="vllm")) as srv:
        ids["srv_c4"] = bench(
            "srv-c4", "--base-url", srv.url, "--input-len", "32", "--output-len", "16",
            "--concurrency", "4", "--num-requests", "24", "--slo", "ttft_ms=200,tpot_ms=20",
        )
        ids["srv_sweep"] = bench(
            "srv-sweep", "--base-url", srv.url, "--input-len", "32", "--output-len", "16",
            "--sweep", "1,2,4", "--num-requests", "12", "--slo", "ttft_ms=60",
        )
        ids["srv_chat"] = bench(
            "srv-chat", "--base-url", srv.url, "--endpoint", "chat", "--dataset", "builtin",
            "--output-len", "8", "--concurrency", "2", "--num-requests", "10",
        )
    faults = {3: "http_500", 7: "cut"}
    with StreamServer(Scenario(ttft_s=0.01, itl_s=0.001, identity="vllm", faults=faults)) as srv:
        ids["srv_faults"] = bench(
            "srv-faults", "--base-url", srv.url, "--input-len", "16", "--output-len", "8",
            "--concurrency", "2", "--num-requests", "12", "--warmup", "0",
        )
    with StreamServer(Scenario(ttft_s=0.05, itl_s=0.05, identity="vllm")) as srv:
        env = {**os.environ, "GPULEDGER_DB": f"sqlite:///{STORE}"}
        proc = subprocess.Popen(
            [GPULEDGER, "bench", "--label", "srv-interrupted", "--base-url", srv.url, "--input-len", "16",
             "--output-len", "64", "--concurrency", "2", "--num-requests", "400", "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )
        time.sleep(14.0)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
        ids["srv_interrupted"] = str(json.loads(out)["id"])
    ids["torch"] = bench(
        "torch-smollm2", "--engine", "torch", "--model", "dummy:smollm2-135m", "--input-len", "16",
        "--output-len", "8", "--concurrency", "2", "--num-requests", "4",
    )

    with open_store(f"sqlite:///{STORE}") as store:
        ids["h200"] = make_run(
            store, synth_requests(60, concurrency=4, stage="c=4"), label="h200-vllm", devices=(H200, CPU),
            slo={"ttft_ms": 100.0}, machine="gpu-box-a",
        )
        sweep = (
            synth_requests(30, concurrency=2, stage="c=2", seed=2)
            + synth_requests(30, concurrency=8, stage="c=8", seed=3, itl_s=0.02, start=40.0, first_index=30)
        )
        ids["mi300x_sweep"] = make_run(
            store, sweep, label="mi300x-vllm-sweep", devices=(MI300X, CPU),
            stages=[{"stage": "c=2", "concurrency": 2}, {"stage": "c=8", "concurrency": 8}],
            config={"load": {"kind": "sweep", "stages": [
                {"stage": "c=2", "concurrency": 2}, {"stage": "c=8", "concurrency": 8}]}},
            slo={"ttft_ms": 100.0}, machine="gpu-box-b",
        )

    (HERE / "ids.json").write_text(json.dumps(ids, indent=2, sort_keys=True) + "\n")
    # The outputs are taken on a copy: `cost` saves its evaluations, and the store kept must be the one
    # the runs left.
    scratch = Path(tempfile.mkdtemp()) / "store.sqlite"
    shutil.copy(STORE, scratch)
    for name, args in commands(ids).items():
        p = cli(*args, check=False, store=scratch)
        doc = {"args": list(args), "exit": p.returncode, "stdout": json.loads(p.stdout) if p.stdout else None}
        (OUT / f"{name}.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(json.dumps(ids, indent=2))


def commands(ids: dict[str, str]) -> dict[str, tuple[str, ...]]:
    """The commands whose output is golden (also imported by test_golden.py)."""
    out: dict[str, tuple[str, ...]] = {}
    for name, rid in ids.items():
        out[f"show-{name}"] = ("show", rid, "--json")
        out[f"export-{name}"] = ("export", rid, "--format", "json")
    cpu_runs = ("srv_c4", "srv_sweep", "srv_chat", "srv_faults", "srv_interrupted", "torch")
    for name in cpu_runs:
        out[f"cost-{name}-cpu-cloud"] = ("cost", ids[name], "--profile", "cpu-cloud", "--json")
    out["cost-srv_sweep-stage"] = (
        "cost", ids["srv_sweep"], "--profile", "cpu-cloud", "--stage", "c=1", "--json",
    )
    out["cost-h200-own"] = ("cost", ids["h200"], "--profile", "h200-own", "--json")
    out["cost-h200-rent"] = ("cost", ids["h200"], "--profile", "h200-rent", "--json")
    out["cost-mi300x-own"] = ("cost", ids["mi300x_sweep"], "--profile", "mi300x-own", "--json")
    out["compare-gpu"] = (
        "compare", ids["h200"], ids["mi300x_sweep"], "--profile", f"{ids['h200']}=h200-own",
        "--profile", f"{ids['mi300x_sweep']}=mi300x-own", "--json",
    )
    out["compare-cpu"] = ("compare", ids["srv_c4"], ids["srv_sweep"], "--profile", "cpu-cloud", "--json")
    out["estimate-h200-mi300x"] = ("estimate", ids["h200"], "--gpu", "MI300X", "--json")
    out["report-h200"] = ("report", ids["h200"], "--json")
    out["report-pair"] = ("report", ids["h200"], ids["mi300x_sweep"], "--json")
    out["report-srv_sweep"] = ("report", ids["srv_sweep"], "--profile", "cpu-cloud", "--json")
    out["report-torch"] = ("report", ids["torch"], "--profile", "cpu-cloud", "--json")
    out["report-interrupted"] = ("report", ids["srv_interrupted"], "--profile", "cpu-cloud", "--json")
    out["runs"] = ("runs", "--json")
    return out


if __name__ == "__main__":
    main()
