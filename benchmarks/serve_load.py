"""How `gpuledger serve` answers many clients at once on a large store: p50 / p99 per page.

Builds a SQLite store in a temporary directory through the real store API: a few runs as `bench` stores them
(requests, telemetry, the real metrics summary and telemetry summaries) on an H200 and an MI300X, then
`--runs` in all as copies of their headers (`Store.create_runs`, one transaction) with labels, models, GPUs
and dates spread over them. Starts `gpuledger serve --db STORE --port 0` as a subprocess on 127.0.0.1 (the
store read-only) and, page by page, sends `--requests` requests from `--clients` concurrent aiohttp clients
(each sends its next request when its last one is answered), after one warm-up request per page. Prints, per
page: requests, errors, p50, p99 and max latency (ms, request sent → body read), requests/s; then the figure
line `serve load: …`.

Pages: the list (first page, the default sort: newest first), the list filtered by model, the list sorted by
rate, a deep page of the list (page 100 of 50), a run's report, a comparison, and the API's runs page, run and
comparison.

Target (docs/serve.md): the list pages' p99 under 2 s with 100 clients on 10,000 runs, the clients on the
same machine (on the 2-vCPU development machine they take about a third of it).
Usage:
    .venv/bin/python benchmarks/serve_load.py [--runs 10000] [--clients 100] [--requests 400]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp

from gpuledger.bench.metrics import summarize
from gpuledger.records import RequestRecord, RunInfo, TelemetrySample
from gpuledger.store import Store, open_store
from gpuledger.telemetry.base import DeviceInfo
from gpuledger.telemetry.sampler import summarize_device

TARGET_P99_S = 2.0
LIST_PAGES = ("list", "list filtered", "list by rate", "list page 100")
GPUS = (("nvidia:0", "nvidia", "NVIDIA H200"), ("amd:0", "amd", "AMD Instinct MI300X"))
MODELS = ("Qwen/Qwen2.5-7B-Instruct", "meta-llama/Llama-3.1-8B-Instruct",
          "mistralai/Mistral-7B-Instruct-v0.3")


def _requests(n: int, output_tokens: int, itl_s: float, seed: int) -> list[RequestRecord]:
    rng = random.Random(seed)
    free_at = [0.0] * 8
    out = []
    for i in range(n):
        slot = i % len(free_at)
        t_send = free_at[slot]
        t = t_send + 0.05 + 0.05 * rng.random()
        times = [t]
        for _ in range(output_tokens - 1):
            t += itl_s * (1 + rng.random())
            times.append(t)
        out.append(RequestRecord(index=i, t_send=t_send, t_first=times[0], t_end=times[-1], chunk_times=times,
                                 input_tokens=128, output_tokens=output_tokens, token_source="server_usage",
                                 requested_output_tokens=output_tokens))
        free_at[slot] = t + 0.001
    return out


def _telemetry(
    device: tuple[str, str, str], window_s: float
) -> tuple[list[TelemetrySample], dict[str, object]]:
    key, vendor, name = device
    samples: list[TelemetrySample] = []
    energy = 0.0
    for k in range(int(window_s / 0.1) + 1):
        t = k * 0.1
        power = 600.0 + 50.0 * math.sin(t / 7.0)
        energy += power * 0.1 if k else 0.0
        samples += [TelemetrySample(t, key, "power_w", power, "nvml"),
                    TelemetrySample(t, key, "energy_j", energy, "nvml"),
                    TelemetrySample(t, key, "util_ratio", 0.93, "nvml"),
                    TelemetrySample(t, key, "memory_used_bytes", 120e9, "nvml")]
    info = DeviceInfo(key=key, vendor=vendor, index=0, name=name, uuid=None)  # type: ignore[arg-type]
    summary = summarize_device(info, samples, window_start=0.0, window_end=window_s, interval_s=0.1).to_dict()
    return samples, summary


def _measured(store: Store, device: tuple[str, str, str], label: str, seed: int) -> RunInfo:
    """A run as `bench` stores one (fewer requests than a real one: the report's cost scales with them)."""
    info = RunInfo(id="", label=label, engine="openai", model=MODELS[0], base_url="http://127.0.0.1:8000/v1",
                   started_at=datetime(2026, 11, 1, tzinfo=UTC),
                   workload={"dataset": "random", "input_len": 128, "output_len": 64},
                   environment={"gpus": [{"vendor": device[1], "name": device[2]}], "gpu_count": 1})
    run_id = store.create_run(info)
    records = _requests(200, 64, 0.008 if device[1] == "nvidia" else 0.011, seed)
    store.add_requests(run_id, records)
    summary = summarize(records)
    samples, tele = _telemetry(device, summary.window_s)
    store.add_telemetry(run_id, samples)
    store.update_run(run_id, status="complete", summary=summary, telemetry_summary=[tele],
                     duration_s=summary.window_s, finished_at=datetime(2026, 11, 1, 0, 5, tzinfo=UTC))
    return store.get_run(run_id)


def build_store(path: Path, n_runs: int) -> tuple[str, list[str], float]:
    """The store, the ids of its measured runs, and the seconds the bulk insert took."""
    url = f"sqlite:///{path}"
    with open_store(url) as store:
        templates = [_measured(store, GPUS[i % 2], f"measured-{i}", i) for i in range(4)]
        rng = random.Random(7)
        start = datetime(2026, 1, 1, tzinfo=UTC)
        copies = []
        for i in range(max(0, n_runs - len(templates))):
            t = templates[i % len(templates)]
            # each its own rate (the template's, 0.7 … 1.3 times): a sort by rate meets no large tie
            summary = t.summary.with_window(0.7 + 0.6 * rng.random()) if t.summary is not None else None
            copies.append(replace(t, id="", label=f"team-{i % 40}-{i // 40 % 25}",
                                  model=MODELS[i % len(MODELS)], summary=summary,
                                  created_at=start + timedelta(minutes=47 * i + rng.random())))
        began = time.perf_counter()
        for at in range(0, len(copies), 5_000):
            store.create_runs(copies[at:at + 5_000])
        insert_s = time.perf_counter() - began
    return url, [t.id for t in templates], insert_s


def _pages(measured: list[str]) -> dict[str, str]:
    a, b = measured[0], measured[1]
    return {
        "list": "/",
        "list filtered": f"/?model={MODELS[1].replace('/', '%2F')}",
        "list by rate": "/?sort=rate",
        "list page 100": "/?page=100",
        "run report": f"/runs/{a}",
        "compare": f"/compare?a={a}&b={b}",
        "api runs": "/api/runs?per_page=50",
        "api run": f"/api/runs/{a}",
        "api compare": f"/api/compare?a={a}&b={b}",
    }


def _start_server(url: str) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "GPULEDGER_DB": url}
    proc = subprocess.Popen([sys.executable, "-m", "gpuledger.cli.main", "serve", "--port", "0", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    assert proc.stdout is not None
    text = ""
    while True:  # `serve --json` prints one document once it listens
        line = proc.stdout.readline()
        if not line:
            proc.kill()
            raise SystemExit("gpuledger serve did not start")
        text += line
        if line.rstrip() == "}":
            break
    base: str = json.loads(text)["url"]
    return proc, base


async def _load(base: str, path: str, clients: int, n: int) -> tuple[list[float], int, float]:
    latencies: list[float] = []
    errors = 0
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(n):
        queue.put_nowait(i)
    timeout = aiohttp.ClientTimeout(total=600)
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        async with session.get(base + path) as warm:  # one warm-up request: the first view opens the store
            await warm.read()

        async def client() -> None:
            nonlocal errors
            while True:
                try:
                    queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                began = time.perf_counter()
                async with session.get(base + path) as resp:
                    await resp.read()
                    if resp.status != 200:
                        errors += 1
                latencies.append(time.perf_counter() - began)

        began = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
        wall = time.perf_counter() - began
    return latencies, errors, wall


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--requests", type=int, default=400, help="requests per page")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpuledger-serve-load-") as tmp:
        url, measured, insert_s = build_store(Path(tmp) / "store.sqlite", args.runs)
        print(f"store: {args.runs:,} runs ({len(measured)} with requests and telemetry), bulk insert "
              f"{insert_s:.1f} s", flush=True)
        proc, base = _start_server(url)
        results: dict[str, tuple[float, float]] = {}
        try:
            print(f"{'page':<15} {'requests':>8} {'errors':>6} {'p50 ms':>9} {'p99 ms':>9} {'max ms':>9} "
                  f"{'req/s':>7}")
            for name, path in _pages(measured).items():
                lat, errors, wall = asyncio.run(_load(base, path, args.clients, args.requests))
                p50, p99 = statistics.median(lat), _pct(lat, 0.99)
                results[name] = (p50, p99)
                print(f"{name:<15} {len(lat):>8} {errors:>6} {p50 * 1000:>9.1f} {p99 * 1000:>9.1f} "
                      f"{max(lat) * 1000:>9.1f} {len(lat) / wall:>7.1f}", flush=True)
                if errors:
                    print(f"  {errors} answers were not 200 OK")
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    worst = max(results[p][1] for p in LIST_PAGES)
    figures = "; ".join(f"{name} p50 {p50 * 1000:.0f} ms p99 {p99 * 1000:.0f} ms"
                        for name, (p50, p99) in results.items())
    print(f"serve load: {args.clients} clients, {args.runs:,} runs: {figures}")
    print(f"target: list pages p99 < {TARGET_P99_S:g} s: {worst:.3f} s "
          f"({'met' if worst < TARGET_P99_S else 'NOT met'})")
    return 0 if worst < TARGET_P99_S else 1


if __name__ == "__main__":
    sys.exit(main())
