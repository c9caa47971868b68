"""How long `gpuledger report` takes to build for a huge run (target: < 5 s for 100,000 requests).

Builds a run in a temporary SQLite store through the real store API (create_run, add_requests,
add_telemetry, update_run with the real metrics summary), then times, in-process:

- build_report: reading the run, its requests and telemetry from the store, pricing it, assembling
  every section (the figure the target is about);
- render_html and render_markdown, and the size of the HTML file;
- the whole CLI (`gpuledger report RUN --html F --md F --json`) as a subprocess, wall seconds.

Also runs the 1-request case. Usage:
    .venv/bin/python benchmarks/report_scale.py [--requests 100000] [--output-tokens 64] [--repeat 3]
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from gpuledger.bench.metrics import summarize
from gpuledger.records import RequestRecord, RunInfo, TelemetrySample
from gpuledger.report import build_report, render_html, render_markdown
from gpuledger.store import Store, open_store
from gpuledger.telemetry.base import DeviceInfo
from gpuledger.telemetry.sampler import summarize_device

TARGET_S = 5.0
BATCH = 5_000


def requests(n: int, output_tokens: int, concurrency: int = 64, seed: int = 0) -> list[RequestRecord]:
    rng = random.Random(seed)
    free_at = [0.0] * concurrency
    out = []
    for i in range(n):
        slot = i % concurrency
        t_send = free_at[slot]
        t = t_send + 0.05 + 0.05 * rng.random()
        times = [t]
        for _ in range(output_tokens - 1):
            t += 0.008 + 0.008 * rng.random()
            times.append(t)
        out.append(
            RequestRecord(
                index=i,
                t_send=t_send,
                t_first=times[0],
                t_end=times[-1],
                chunk_times=times,
                input_tokens=128,
                output_tokens=output_tokens,
                token_source="server_usage",
                requested_output_tokens=output_tokens,
            )
        )
        free_at[slot] = t + 0.001
    return out


def telemetry(
    window_s: float, interval_s: float = 0.1
) -> tuple[list[TelemetrySample], list[dict[str, object]]]:
    samples: list[TelemetrySample] = []
    energy = 0.0
    steps = int(window_s / interval_s) + 1
    for k in range(steps):
        t = k * interval_s
        power = 600.0 + 50.0 * math.sin(t / 7.0)
        energy += power * interval_s if k else 0.0
        samples += [
            TelemetrySample(t, "nvidia:0", "power_w", power, "nvml"),
            TelemetrySample(t, "nvidia:0", "energy_j", energy, "nvml"),
            TelemetrySample(t, "nvidia:0", "util_ratio", 0.93, "nvml"),
            TelemetrySample(t, "nvidia:0", "memory_used_bytes", 120 * 2**30, "nvml"),
            TelemetrySample(t, "nvidia:0", "memory_total_bytes", 141 * 2**30, "nvml"),
        ]
    dev = DeviceInfo(key="nvidia:0", vendor="nvidia", index=0, name="NVIDIA H200", uuid=None)
    summary = summarize_device(dev, samples, window_start=0.0, window_end=window_s, interval_s=interval_s)
    return samples, [summary.to_dict()]


def make_run(store: Store, n: int, output_tokens: int) -> tuple[str, float]:
    t0 = time.perf_counter()
    reqs = requests(n, output_tokens)
    started = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
    run_id = store.create_run(
        RunInfo(
            id="",
            label=f"scale-{n}",
            started_at=started,
            engine="openai",
            model="bench-model",
            config={"load": {"kind": "concurrency", "stages": [{"stage": "c=64", "concurrency": 64}]}},
            environment={"hostname": "bench", "driver": "550.54.15", "cuda": "12.4"},
            server={"name": "vllm", "version": "0.6.3"},
        )
    )
    for i in range(0, n, BATCH):
        store.add_requests(run_id, reqs[i : i + BATCH])
    summary = summarize(reqs)
    window = summary.window_s
    samples, tele = telemetry(window)
    store.add_telemetry(run_id, samples)
    store.update_run(
        run_id,
        status="complete",
        summary=summary,
        telemetry_summary=tele,
        duration_s=window,
        finished_at=started + timedelta(seconds=window),
    )
    return run_id, time.perf_counter() - t0


def calibrate() -> float:
    """CPU seconds of a plain Python loop of 10 million additions: about 0.4 s on an idle core of a
    current server CPU. A much larger figure means the machine is loaded and every figure is inflated."""
    c = time.process_time()
    total = 0
    for i in range(10_000_000):
        total += i
    return time.process_time() - c


def measure(db_url: str, run_id: str, repeat: int, out_dir: Path) -> dict[str, float]:
    builds, cpus, htmls, mds = [], [], [], []
    size = 0
    for _ in range(repeat):
        with open_store(db_url) as store:
            t0, c0 = time.perf_counter(), time.process_time()
            data = build_report(store, [run_id])
            builds.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
        t0 = time.perf_counter()
        html = render_html(data)
        htmls.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        render_markdown(data)
        mds.append(time.perf_counter() - t0)
        size = len(html.encode())
    env = dict(os.environ, GPULEDGER_DB=db_url)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuledger.cli.main",
            "report",
            run_id,
            "--html",
            str(out_dir / "r.html"),
            "--md",
            str(out_dir / "r.md"),
            "--json",
        ],
        env=env,
        capture_output=True,
        timeout=600,
        check=False,
    )
    cli = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"gpuledger report failed ({proc.returncode}): {proc.stderr.decode()[-2000:]}")
    return {
        "build": statistics.median(builds),
        "build_max": max(builds),
        "build_cpu": statistics.median(cpus),
        "html": statistics.median(htmls),
        "md": statistics.median(mds),
        "html_mb": size / 1e6,
        "cli": cli,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    ok = True
    loop_s = calibrate()
    print(
        f"machine: load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; "
        f"a 10M-iteration Python loop took {loop_s:.2f} CPU s "
        "(about 0.4 s on an idle core of a current server CPU)"
    )
    with tempfile.TemporaryDirectory(prefix="gpuledger-report-scale-") as tmp:
        out_dir = Path(tmp)
        db_url = f"sqlite:///{out_dir / 'scale.sqlite'}"
        print(
            f"{'requests':>9} {'tokens':>10} {'setup s':>8} {'build s':>8} {'(max)':>6} {'build CPU s':>11} "
            f"{'html s':>7} {'md s':>6} {'html MB':>8} {'CLI s':>6}"
        )
        for n in (1, args.requests):
            with open_store(db_url) as store:
                run_id, setup = make_run(store, n, args.output_tokens)
            m = measure(db_url, run_id, args.repeat, out_dir)
            print(
                f"{n:>9,} {n * args.output_tokens:>10,} {setup:>8.2f} {m['build']:>8.2f} "
                f"{m['build_max']:>6.2f} {m['build_cpu']:>11.2f} {m['html']:>7.2f} {m['md']:>6.3f} "
                f"{m['html_mb']:>8.2f} {m['cli']:>6.2f}"
            )
            ok = ok and m["build"] < TARGET_S
    print(
        f"target: build_report < {TARGET_S:g} s (wall, median of --repeat) for {args.requests:,} requests -> "
        f"{'met' if ok else 'NOT met'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
