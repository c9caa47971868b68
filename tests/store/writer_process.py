"""A separate process writing a run the way ``gpuledger bench`` does: one committed batch per request.

    python writer_process.py URL forever              # create a run, print its id, then "committed N"
                                                      # after each request commits, until killed
    python writer_process.py URL count N BARRIER      # wait for file BARRIER, write N requests one
                                                      # transaction each (and a telemetry batch every 10),
                                                      # finish the run, print its id
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from gpuledger.records import RequestRecord, RunInfo, TelemetrySample
from gpuledger.store import open_store


def _request(i: int) -> RequestRecord:
    times = [i + 0.05 + k * 0.01 for k in range(8)]
    return RequestRecord(index=i, t_send=float(i), t_first=times[0], t_end=times[-1], chunk_times=times,
                         output_tokens=8, token_source="server_usage")


def main() -> None:
    url, mode = sys.argv[1], sys.argv[2]
    if mode == "forever":
        with open_store(url) as store:
            run_id = store.create_run(RunInfo(id="", label="killed-mid-run"))
            print(run_id, flush=True)
            i = 0
            while True:
                store.add_requests(run_id, [_request(i)])
                print(f"committed {i}", flush=True)
                i += 1
    n, barrier = int(sys.argv[3]), Path(sys.argv[4])
    while not barrier.exists():
        time.sleep(0.005)
    with open_store(url) as store:
        run_id = store.create_run(RunInfo(id="", label="concurrent"))
        for i in range(n):
            store.add_requests(run_id, [_request(i)])
            if i % 10 == 9:
                ts = range(i - 9, i + 1)
                batch = [TelemetrySample(float(k), "cpu", "util_ratio", 0.5, "psutil") for k in ts]
                store.add_telemetry(run_id, batch)
        store.update_run(run_id, status="complete")
    print(run_id, flush=True)


if __name__ == "__main__":
    main()
