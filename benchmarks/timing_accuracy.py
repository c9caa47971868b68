"""Does gpuledger time requests right? Median TTFT and TPOT vs a minimal aiohttp client, same moment.

    .venv/bin/python benchmarks/timing_accuracy.py [--ttft-ms 50 --gap-ms 10] [--concurrency 4]

A loopback server (``_servers.py delayed``) sends the first token ``--ttft-ms`` after a request
arrives and then one token every ``--gap-ms`` (an absolute schedule: no drift), one token per chunk.
``gpuledger bench`` (a child process, concurrency 4) and a minimal aiohttp streaming client (in this
process, concurrency 4) load it at the same time; only the reference requests sent inside
gpuledger's measured window are compared. The reference takes one ``perf_counter()`` per line:
TTFT = first content line - send, TPOT = (last - first) / (tokens - 1).

Prints both medians, the differences, and the programmed values. Targets (issue 5): |TTFT
difference| <= 1.5 ms, |TPOT difference| <= 0.3 ms. Exit status 0 when both are met, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

import _servers
import orjson

TTFT_TOLERANCE_MS = 1.5
TPOT_TOLERANCE_MS = 0.3


async def _gpuledger(url: str, args: argparse.Namespace, db: Path) -> dict[str, Any]:
    cmd = [
        _servers.gpuledger_exe(), "bench", "--engine", "openai", "--base-url", url,
        "--model", _servers.MODEL_NAME, "--dataset", "random",
        "--input-len", "32", "--output-len", str(args.output_len),
        "--concurrency", str(args.concurrency), "--num-requests", str(args.num_requests),
        "--warmup", "0", "--no-telemetry", "--label", "timing-accuracy", "--json",
    ]
    env = {**os.environ, "GPULEDGER_DB": f"sqlite:///{db}"}
    proc = await asyncio.create_subprocess_exec(
        *cmd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout=600)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise SystemExit("gpuledger bench did not finish within 600 s") from None
    if proc.returncode != 0:
        raise SystemExit(f"gpuledger bench exited {proc.returncode}:\n{err.decode()[-3000:]}")
    doc: dict[str, Any] = orjson.loads(out)
    return doc


async def _both(url: str, args: argparse.Namespace, db: Path
                ) -> tuple[dict[str, Any], list[tuple[float, float, float, int]]]:
    stop = asyncio.Event()
    ref_task = asyncio.create_task(
        _servers.timing_reference_client(url, args.concurrency, args.output_len, stop))
    try:
        doc = await _gpuledger(url, args, db)
    finally:
        stop.set()
    return doc, await ref_task


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ttft-ms", type=float, default=50.0, help="programmed first-token delay")
    parser.add_argument("--gap-ms", type=float, default=10.0, help="programmed inter-token gap")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--num-requests", type=int, default=40, help="gpuledger's measured requests")
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--server-core", type=int, default=None,
                        help="pin the server to this core (default: not pinned)")
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args(argv)

    server_args = ["--ttft-ms", str(args.ttft_ms), "--gap-ms", str(args.gap_ms)]
    load_before = os.getloadavg()
    with _servers.ServerProcess("delayed", server_args, core=args.server_core) as server, \
            tempfile.TemporaryDirectory(prefix="gpuledger-timing-") as tmp:
        doc, ref = asyncio.run(_both(server.base_url, args, Path(tmp) / "gpuledger.sqlite"))
    load_after = os.getloadavg()

    summary = doc["summary"]
    started = doc.get("started_at")
    duration = doc.get("duration_s")
    if isinstance(started, str) and isinstance(duration, int | float):
        begin = datetime.fromisoformat(started.replace("Z", "+00:00")).timestamp()
        inside = [r for r in ref if begin <= r[0] <= begin + float(duration)]
    else:
        inside = []
    window_note = "sent inside gpuledger's window"
    if len(inside) < args.concurrency:
        inside = ref
        window_note = "all (gpuledger's window could not be placed on the wall clock)"
    ref_ttft = statistics.median(r[1] for r in inside) * 1000.0
    tpots = [(r[2] - r[1]) / (r[3] - 1) * 1000.0 for r in inside if r[3] > 1]
    ref_tpot = statistics.median(tpots)
    gl_ttft = float(summary["ttft_ms"]["p50"])
    gl_tpot = float(summary["tpot_ms"]["p50"])
    d_ttft = gl_ttft - ref_ttft
    d_tpot = gl_tpot - ref_tpot
    ok_ttft = abs(d_ttft) <= TTFT_TOLERANCE_MS
    ok_tpot = abs(d_tpot) <= TPOT_TOLERANCE_MS

    print(f"timing accuracy: programmed TTFT {args.ttft_ms:.1f} ms, inter-token gap {args.gap_ms:.2f} ms, "
          f"{args.output_len} tokens, concurrency {args.concurrency} each (both clients at the same time)")
    print(f"load average (1 min) before {load_before[0]:.2f}, after {load_after[0]:.2f} "
          f"on {os.cpu_count()} CPUs")
    print(f"{'':28s} {'TTFT p50 ms':>12s} {'TPOT p50 ms':>12s} {'requests':>9s}")
    print(f"{'gpuledger':28s} {gl_ttft:>12.3f} {gl_tpot:>12.3f} {summary['num_ok']:>9}")
    print(f"{'minimal aiohttp reference':28s} {ref_ttft:>12.3f} {ref_tpot:>12.3f} {len(inside):>9}  "
          f"({window_note})")
    print(f"{'programmed':28s} {args.ttft_ms:>12.3f} {args.gap_ms:>12.3f}")
    for name, diff, tol, ok in (("TTFT", d_ttft, TTFT_TOLERANCE_MS, ok_ttft),
                                ("TPOT", d_tpot, TPOT_TOLERANCE_MS, ok_tpot)):
        print(f"difference {name} {diff:+.3f} ms (target |d| <= {tol} ms): {'met' if ok else 'NOT met'}")
    if args.json_out:
        args.json_out.write_bytes(orjson.dumps({
            "programmed": {"ttft_ms": args.ttft_ms, "gap_ms": args.gap_ms},
            "gpuledger": {"ttft_ms_p50": gl_ttft, "tpot_ms_p50": gl_tpot, "run_id": doc.get("id")},
            "reference": {"ttft_ms_p50": ref_ttft, "tpot_ms_p50": ref_tpot, "requests": len(inside)},
            "difference_ms": {"ttft": d_ttft, "tpot": d_tpot},
            "load_average_before": load_before, "load_average_after": load_after,
        }, option=orjson.OPT_INDENT_2))
    return 0 if ok_ttft and ok_tpot else 1


if __name__ == "__main__":
    sys.exit(main())
