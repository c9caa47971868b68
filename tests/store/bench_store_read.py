"""Figures for the store's performance target: reading a 100k-request run back (report < 5 s overall).

    .venv/bin/python tests/store/bench_store_read.py [--requests 100000] [--chunks 128] [--db URL]

Writes a run of N requests with C chunk times each (in batches of 1000, as a fast bench would),
then times ``get_requests``, ``export_run`` and the store's size. Prints figures; asserts nothing.
(Not collected by pytest: the name does not start with ``test_``.)
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from gpuledger.records import RequestRecord, RunInfo
from gpuledger.store import open_store


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--chunks", type=int, default=128)
    ap.add_argument("--db", default=None, help="store URL (default: a temporary SQLite file)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gpuledger-bench-"))
    try:
        _run(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run(args: argparse.Namespace, tmp: Path) -> None:
    url = args.db or f"sqlite:///{tmp / 'bench.sqlite'}"
    with open_store(url) as store:
        run_id = store.create_run(RunInfo(id="", label="bench-store-read"))
        t0 = time.perf_counter()
        for start in range(0, args.requests, 1000):
            batch = []
            for i in range(start, min(start + 1000, args.requests)):
                times = [i * 0.01 + 0.05 + k * 0.012 for k in range(args.chunks)]
                batch.append(RequestRecord(index=i, t_send=i * 0.01, t_first=times[0], t_end=times[-1],
                                           chunk_times=times, input_tokens=64, output_tokens=args.chunks,
                                           token_source="server_usage", server_timings={"queue_ms": 1.0}))
            store.add_requests(run_id, batch)
        t_write = time.perf_counter() - t0
        t0, c0 = time.perf_counter(), time.process_time()
        reqs = store.get_requests(run_id)
        t_read, c_read = time.perf_counter() - t0, time.process_time() - c0
        t0, c0 = time.perf_counter(), time.process_time()
        doc = store.export_run(run_id)
        t_export, c_export = time.perf_counter() - t0, time.process_time() - c0
    n_chunks = sum(len(r.chunk_times) for r in reqs)
    size = sum(p.stat().st_size for p in tmp.iterdir()) if args.db is None else None
    print(f"store            {url} (load average {os.getloadavg()[0]:.1f})")
    print(f"requests         {len(reqs):,} x {args.chunks} chunks = {n_chunks:,} chunk times")
    print(f"write            {t_write:.2f} s ({len(reqs) / t_write:,.0f} requests/s, batches of 1000)")
    print(f"get_requests     {t_read:.2f} s wall, {c_read:.2f} s CPU")
    print(f"export_run       {t_export:.2f} s wall, {c_export:.2f} s CPU ({len(doc['requests']):,} requests)")
    if size is not None:
        print(f"file size        {size / 1e6:,.1f} MB ({size / max(n_chunks, 1):.1f} bytes per chunk time)")


if __name__ == "__main__":
    main()
