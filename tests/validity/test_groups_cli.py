"""``cost``, ``compare`` and ``report`` of groups of repeats, on runs written through the real store API with
the repeat record ``bench --repeat`` writes (the bench path itself: test_verdict_bench.py)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from gpuledger.bench.metrics import summarize
from gpuledger.bench.validity import verdict
from gpuledger.cli.main import main
from gpuledger.cost.comparison.groups import fmt_with_interval, new_group_id, repeat_record
from gpuledger.records import RequestRecord, RunInfo
from gpuledger.store import Store, open_store


def requests(itl: float, n: int = 40, concurrency: int = 4, tokens: int = 16) -> list[RequestRecord]:
    out: list[RequestRecord] = []
    free = [0.0] * concurrency
    for i in range(n):
        slot = i % concurrency
        t0 = free[slot]
        times = [t0 + 0.01 + k * itl for k in range(tokens)]
        out.append(
            RequestRecord(
                index=i,
                t_send=t0,
                t_first=times[0],
                t_end=times[-1],
                chunk_times=times,
                input_tokens=16,
                output_tokens=tokens,
                token_source="server_usage",
            )
        )
        free[slot] = times[-1]
    return out


def store_group(st: Store, paces: Sequence[float]) -> tuple[str, list[str]]:
    """One stored run per pace, in one group, as ``bench --repeat`` stores them (verdict included)."""
    group = new_group_id()
    ids = []
    for i, itl in enumerate(paces, 1):
        recs = requests(itl)
        info = RunInfo(
            id="",
            label="rep",
            engine="openai",
            model="m",
            status="running",
            workload={
                "dataset": "random",
                "repeat": repeat_record(group, i, len(paces)),
                "warmup": {"requests": 1},
            },
            config={"engine": "openai", "warmup": 1},
            client={"cpu_util_ratio": 0.1},
        )
        run_id = st.create_run(info)
        st.add_requests(run_id, recs)
        summary = summarize(recs)
        judged = RunInfo(
            id=run_id,
            engine="openai",
            summary=summary,
            workload=info.workload,
            config={"engine": "openai", "warmup": 1},
            client=info.client,
            status="complete",
        )
        st.update_run(
            run_id,
            status="complete",
            summary=summary.amended(verdict=verdict(judged, recs)),
            num_requests=len(recs),
            client=info.client,
        )
        ids.append(run_id)
    return group, ids


@pytest.fixture
def st() -> Any:
    s = open_store(None)
    yield s
    s.close()


def cli_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    code = main([*args, "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    doc: dict[str, Any] = json.loads(out.out)
    return doc


def test_cost_of_a_group_gives_each_figure_with_its_interval_and_cv(
    st: Store, capsys: pytest.CaptureFixture[str], prof: tuple[str, str]
) -> None:
    group, ids = store_group(st, [0.004, 0.005, 0.006])
    doc = cli_json(capsys, "cost", group, "--no-save", *prof)
    assert doc["group"] == group and doc["runs"] == ids
    rate = doc["figures"]["output tokens"]
    assert rate["n"] == 3 and rate["ci95_low"] < rate["mean"] < rate["ci95_high"]
    assert rate["cv"] == pytest.approx(rate["sd"] / rate["mean"])
    price = next(v for k, v in doc["figures"].items() if k.startswith("cost per"))
    assert price["n"] == 3 and price["ci95_low"] < price["mean"] < price["ci95_high"]
    assert [c["run_id"] for c in doc["costs"]] == ids
    # A prefix of the group id names it too, and the terminal prints the interval's precision only.
    assert main(["cost", group[:7], "--no-save", *prof]) == 0
    text = capsys.readouterr().out
    assert fmt_with_interval(rate["mean"], rate["ci95_half_width"]) in text
    assert "95 %" in text and "CV" in text


def test_compare_of_groups_2x_apart_excludes_1_and_of_one_group_with_itself_is_refused(
    st: Store, capsys: pytest.CaptureFixture[str], prof: tuple[str, str]
) -> None:
    fast, _ = store_group(st, [0.004, 0.0042, 0.0039])
    slow, _ = store_group(st, [0.008, 0.0083, 0.0079])
    doc = cli_json(capsys, "compare", fast, slow, *prof)
    ratio = doc["ratio"]
    assert 1 < ratio["ci95_low"] < ratio["ratio"] < ratio["ci95_high"]
    assert ratio["distinguishable_at_95"] is True
    assert doc["throughput_ratio"]["ratio"] == pytest.approx(ratio["ratio"])  # one profile: same ratio
    assert main(["compare", fast, fast, *prof]) == 2
    assert "given twice" in capsys.readouterr().err


def test_compare_of_overlapping_groups_is_not_distinguishable(
    st: Store, capsys: pytest.CaptureFixture[str], prof: tuple[str, str]
) -> None:
    a, _ = store_group(st, [0.003, 0.005, 0.008])
    b, _ = store_group(st, [0.004, 0.006, 0.005])
    doc = cli_json(capsys, "compare", a, b, *prof)
    assert doc["ratio"]["distinguishable_at_95"] is False
    assert main(["compare", a, b, *prof]) == 0
    text = capsys.readouterr().out
    assert "not distinguishable at 95 %" in text


def test_an_unknown_group_is_not_found(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cost", "g-zzzzzzzz"]) == 3
    err = capsys.readouterr().err
    assert "no group 'g-zzzzzzzz'" in err


def test_repeats_of_one_spec_are_not_warned_as_different_workloads(
    st: Store, capsys: pytest.CaptureFixture[str], prof: tuple[str, str]
) -> None:
    _, ids = store_group(st, [0.004, 0.0041])
    doc = cli_json(capsys, "compare", *ids, *prof)
    assert not any("different workloads" in w for w in doc["pairs"][0]["warnings"])


def test_the_report_of_a_group_leads_with_the_group_and_lists_each_runs_validity(
    st: Store, capsys: pytest.CaptureFixture[str], prof: tuple[str, str]
) -> None:
    group, ids = store_group(st, [0.004, 0.005, 0.006])
    doc = cli_json(capsys, "report", group, *prof)
    answers = doc["sections"][0]["answers"]
    assert answers[0]["title"] == f"group {group} (3 runs)"
    assert "95 % CI" in answers[0]["headline"]
    tables = [t for t in doc["sections"][0]["tables"] if t["key"] == "validity"]
    assert len(tables) == 3 and all("Validity of" in t["title"] for t in tables)
    run_answers = [a for a in answers if a["title"] in {f"rep ({i})" for i in ids}]
    assert len(run_answers) == 3 and all(a["facts"][0]["label"] == "validity" for a in run_answers)
