"""What does telemetry sampling cost? Samples psutil + RAPL (+ NVML/amdsmi when present, no CLI
fallbacks) at 10 Hz for ~10 s on a background thread while the main thread sleeps, and prints the CPU
time the process used as a percentage of one core. Target: under 1 %.

    python benchmarks/sampler_overhead.py [--seconds 10] [--interval 0.1] [--json]

The figure is process CPU time (user + system, all threads) / wall time. The main thread only sleeps,
so nearly all of it is the sampler thread; the idle baseline of the interpreter is measured first
and reported beside it.
"""

from __future__ import annotations

import argparse
import json
import time

from gpuledger.telemetry import BackgroundSampler, close_sources, open_sources


def cpu_seconds() -> float:
    return time.process_time()


def measure(seconds: float, interval: float) -> dict[str, object]:
    # Baseline: the same process doing nothing for a second.
    c0, w0 = cpu_seconds(), time.monotonic()
    time.sleep(1.0)
    baseline = (cpu_seconds() - c0) / (time.monotonic() - w0)

    sources = open_sources(use_cli=False)
    used = [s.name for s in sources if s.available]
    try:
        sampler = BackgroundSampler(sources, interval_s=interval)
        c0, w0 = cpu_seconds(), time.monotonic()
        sampler.start()
        time.sleep(seconds)
        samples = sampler.stop()
        wall = time.monotonic() - w0
        cpu = cpu_seconds() - c0
        summaries = sampler.summaries()
    finally:
        close_sources(sources)
    ticks = max((s.samples for s in summaries), default=0)
    return {
        "sources": used,
        "unavailable": {s.name: s.reason for s in sources if not s.available},
        "interval_s": interval,
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 4),
        "cpu_percent_of_one_core": round(100.0 * cpu / wall, 3),
        "idle_baseline_percent": round(100.0 * baseline, 3),
        "ticks": ticks,
        "cpu_ms_per_tick": round(1000.0 * cpu / ticks, 3) if ticks else None,
        "samples": len(samples),
        "target_percent": 1.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--interval", type=float, default=0.1)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    result = measure(args.seconds, args.interval)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    used, unavailable = result["sources"], result["unavailable"]
    assert isinstance(used, list) and isinstance(unavailable, dict)
    print(f"sources sampled: {', '.join(used)}  (interval {args.interval:g} s)")
    for name, why in unavailable.items():
        print(f"  not sampled: {name}: {why}")
    print(f"wall {result['wall_s']} s, CPU {result['cpu_s']} s over {result['ticks']} ticks "
          f"({result['cpu_ms_per_tick']} ms CPU per tick, {result['samples']} samples)")
    print(f"sampler overhead: {result['cpu_percent_of_one_core']} % of one core "
          f"(idle interpreter baseline {result['idle_baseline_percent']} %; target < 1 %)")


if __name__ == "__main__":
    main()
