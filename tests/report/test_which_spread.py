"""Every spread says which standard deviation it is (issue 33): the latency tables' ``std`` and the noise
check are the population standard deviation of one run's values; a group's spread between repeats is the
sample standard deviation (n − 1). The run is written through the real store API and summarised by
``bench.metrics.summarize`` (report_factory); its verdict is the real one."""

from __future__ import annotations

import math

import pytest
from report_factory import make_run, synth_requests

from gpuledger.report import build_report
from gpuledger.report.groups import METHOD
from gpuledger.store import Store


def test_the_latency_table_says_its_std_is_the_population_one_and_it_is(store: Store) -> None:
    requests = synth_requests(120)
    run = make_run(store, requests, label="one")
    data = build_report(store, [run])
    (table,) = [t for t in data.section("latency").tables if t.key == "latency"]
    assert "std = the population standard deviation (÷ n)" in table.provenance
    ttft = [(r.t_first - r.t_send) * 1e3 for r in requests if r.t_first is not None]
    mean = math.fsum(ttft) / len(ttft)
    population = math.sqrt(math.fsum((v - mean) ** 2 for v in ttft) / len(ttft))
    summary = store.get_run(run).summary
    assert summary is not None
    assert summary.latency("ttft_ms").std == pytest.approx(population)


def test_the_noise_check_and_the_group_method_name_their_standard_deviation(store: Store) -> None:
    run = make_run(store, synth_requests(200), label="one")
    data = build_report(store, [run])
    validity = next(t for t in data.section("answer").tables if t.key == "validity")
    noise = next(row for row in validity.rows if row[0] == "noise")
    assert "population standard deviation" in noise[3]  # the rule column
    assert "sample standard deviation, n − 1" in METHOD
