"""Report fixtures: a real store (the suite's isolated SQLite file) and runs written into it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from report_factory import CPU, MI300X, Pair, make_run, synth_requests

from gpuledger.store import Store, open_store


@pytest.fixture()
def store() -> Iterator[Store]:
    st = open_store(None)
    try:
        yield st
    finally:
        st.close()


@pytest.fixture()
def single_run(store: Store) -> str:
    return make_run(store, synth_requests(120), label="h200-vllm")


@pytest.fixture()
def sweep_stages() -> list[dict[str, object]]:
    return [{"stage": f"c={c}", "concurrency": c} for c in (1, 4, 16)]


@pytest.fixture()
def pair(store: Store, sweep_stages: list[dict[str, object]]) -> Pair:
    """An NVIDIA run at one load level and an AMD sweep, on different machines and stacks."""
    a = make_run(store, synth_requests(120), label="h200-vllm")
    reqs = []
    for i, st in enumerate(sweep_stages):
        c = int(str(st["concurrency"]))
        reqs += synth_requests(
            30,
            concurrency=c,
            stage=str(st["stage"]),
            ttft_s=0.05 * (1 + c / 8),
            itl_s=0.01 * (1 + c / 16),
            first_index=i * 30,
            start=i * 5.0,
            seed=i + 7,
        )
    b = make_run(
        store,
        reqs,
        label="mi300x-vllm",
        devices=(MI300X, CPU),
        stages=sweep_stages,
        config={"load": {"kind": "sweep", "stages": sweep_stages}},
        environment={
            "hostname": "amd-box",
            "rocm": "6.2.0",
            "torch": "2.5.1+rocm6.2",
            "driver": "6.8.5",
            "hash": "sha256:9a8b7c",
        },
    )
    return Pair(a, b)
