"""What a run observed while it made and sent its prompts (how long sends waited, how many tokenizer calls
met the lengths) is not a workload setting: two runs of one workload that observed different waits are not
"different workloads" in compare's warnings, as they are not in the gate's like-for-like."""

from __future__ import annotations

from cost_runs import build_run

from gpuledger.catalog import load_catalog
from gpuledger.cost import CostProfile, cost_of_run
from gpuledger.cost.comparison.differences import comparison_warnings
from gpuledger.records.workloads import OBSERVED_WORKLOAD, REPEAT_KEY, observed_workload_key


def test_observed_keys_and_their_subkeys_are_observed() -> None:
    assert observed_workload_key("prompt_waits")
    assert observed_workload_key("prompt_waits.seconds")
    assert observed_workload_key("input_len_how.calls")
    assert observed_workload_key(f"{REPEAT_KEY}.index")
    assert REPEAT_KEY in OBSERVED_WORKLOAD


def test_asked_keys_are_not_observed() -> None:
    for key in ("input_len", "output_len", "dataset", "prompt_waits_budget", "seed", "warmup.requests"):
        assert not observed_workload_key(key), key


def test_compare_does_not_call_observed_waits_a_different_workload() -> None:
    asked = {"dataset": "random", "input_len": 512, "output_len": 256, "seed": 0}
    a = build_run("aaaa0001", workload={**asked, "prompt_waits": {"count": 0, "seconds": 0.0},
                                        "input_len_how": {"calls": 12}})
    b = build_run("bbbb0002", workload={**asked, "prompt_waits": {"count": 3, "seconds": 0.41},
                                        "input_len_how": {"calls": 19}})
    c = build_run("cccc0003", workload={**asked, "input_len": 1024})
    rental, catalog = CostProfile(name="rent", rental_per_hour=1.0), load_catalog()
    ca, cb, cc = (cost_of_run(r, rental, catalog=catalog) for r in (a, b, c))
    assert [w for w in comparison_warnings(ca, cb) if w.startswith("different workloads")] == []
    (different,) = [w for w in comparison_warnings(ca, cc) if w.startswith("different workloads")]
    assert "input_len = 512 vs 1024" in different and "prompt_waits" not in different
