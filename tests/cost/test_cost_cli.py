"""The commands on runs in the real (isolated SQLite) store: cost, compare, estimate, gpus, profiles."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from cost_runs import MakeRun

from gpuledger.cli.main import main
from gpuledger.records import RunInfo
from gpuledger.store import open_store

StoreRun = Callable[[RunInfo], str]


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> object:
    rc = main([*args, "--json"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    return json.loads(out.out)


def run_fail(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    rc = main(list(args))
    out = capsys.readouterr()
    assert out.out == ""
    assert "Traceback" not in out.err
    return rc, out.err


def test_cost_json_prices_a_stored_run_with_its_gpus_preset(
    make_run: MakeRun, store_run: StoreRun, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = store_run(make_run("c0st0001", output_tps=2000, power_w=650.0))
    d = run_json(capsys, "cost", run_id[:5])
    assert isinstance(d, dict)
    assert d["run_id"] == run_id and d["profile"]["name"] == "h100-sxm-own" and d["currency"] == "USD"
    assert d["usd_per_1m_output_tokens"] > 0 and d["usd_per_hour"] == pytest.approx(
        d["hourly"]["usd_per_hour"]
    )
    assert d["power"]["power_source"].startswith("measured")
    # the evaluation is kept in the store for reports
    store = open_store(None)
    try:
        saved = store.list_cost_evaluations(run_id)
    finally:
        store.close()
    assert [e["profile_name"] for e in saved] == ["h100-sxm-own"]
    assert saved[0]["result"]["usd_per_1m_output_tokens"] == pytest.approx(d["usd_per_1m_output_tokens"])
    assert saved[0]["profile"]["gpu_price"] == 30000


def test_cost_with_a_profile_file(
    make_run: MakeRun, store_run: StoreRun, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    run_id = store_run(make_run("c0st0002", output_tps=1000, input_tps=500))
    prof = tmp_path / "rent.yaml"
    prof.write_text("currency: EUR\nrental_per_gpu_hour: 1.8\nutilisation: 0.5\n")
    d = run_json(capsys, "cost", run_id, "--profile", str(prof))
    assert isinstance(d, dict)
    assert d["eur_per_hour"] == 1.8 and round(d["eur_per_1m_output_tokens"], 2) == 1.00  # 1.8 / 1.8 M


def test_cost_terminal_output_shows_breakdown_and_sources(
    make_run: MakeRun, store_run: StoreRun, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = store_run(make_run("c0st0003", power_w=None))
    assert main(["cost", run_id]) == 0
    out = capsys.readouterr().out
    assert "hardware amortisation" in out and "catalog TDP (not measured)" in out
    assert "USD per 1M output tokens" in out and "assumption:" in out


def test_cost_errors_are_one_line_with_documented_exit_codes(
    make_run: MakeRun, store_run: StoreRun, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    rc, err = run_fail(capsys, "cost", "nosuchrun")
    assert rc == 3 and err.count("error:") == 1
    run_id = store_run(make_run("c0st0004", output_tps=0.0))
    rc, err = run_fail(capsys, "cost", run_id, "--profile", "h100-sxm-rent")
    assert rc == 4 and "no output tokens" in err
    good = store_run(make_run("c0st0005"))
    rc, err = run_fail(capsys, "cost", good, "--profile", "no-such-preset")
    assert rc == 3 and "no cost profile 'no-such-preset'" in err
    bad = tmp_path / "bad.yaml"
    bad.write_text("rental_per_gpu_hour: 2\nutilisation: 1.5\n")
    rc, err = run_fail(capsys, "cost", good, "--profile", str(bad))
    assert rc == 4 and "utilisation" in err
    no_power = store_run(make_run("c0st0006", power_w=None, gpu="NVIDIA Tesla T4"))
    # An ownership profile prices energy: without a measured power or a TDP there is nothing to price ...
    rc, err = run_fail(capsys, "cost", no_power, "--profile", "h100-sxm-own")
    assert rc == 4 and "no power to price" in err
    # ... a rental profile includes energy in its price: the run is priced, its power stated as not needed.
    doc = run_json(capsys, "cost", no_power, "--profile", "h100-sxm-rent")
    assert isinstance(doc, dict)
    assert doc["power"]["power_source"] == "not measured — not needed for the price: rental includes energy"
    assert doc["energy"]["joules"] is None and doc["energy"]["joules_per_output_token"] is None


def test_compare_json_is_reciprocal_and_takes_per_run_profiles(
    make_run: MakeRun, store_run: StoreRun, capsys: pytest.CaptureFixture[str]
) -> None:
    a = store_run(make_run("cmpa0001", output_tps=2400, power_w=620.0))
    b = store_run(
        make_run("cmpb0001", output_tps=960, power_w=700.0, gpu="AMD Instinct MI300X", vendor="amd")
    )
    ab = run_json(capsys, "compare", a, b, "--profile", f"{b}=mi300x-rent", "--profile", "h100-sxm-rent")
    ba = run_json(capsys, "compare", b, a, "--profile", f"{b}=mi300x-rent", "--profile", "h100-sxm-rent")
    assert isinstance(ab, dict) and isinstance(ba, dict)
    assert ab["ratio"] * ba["ratio"] == pytest.approx(1.0)
    assert [r["profile"] for r in ab["runs"]] == ["h100-sxm-rent", "mi300x-rent"]
    pair = ab["pairs"][0]
    assert {"decomposition", "break_even", "sensitivity", "warnings"} <= set(pair)
    assert all(
        be["verified_ratio"] == pytest.approx(1.0) for be in pair["break_even"] if be["value"] is not None
    )


def test_compare_terminal_output(
    make_run: MakeRun, store_run: StoreRun, capsys: pytest.CaptureFixture[str]
) -> None:
    a = store_run(make_run("cmpa0002", output_tps=2000))
    b = store_run(make_run("cmpb0002", output_tps=1000))
    assert main(["compare", a, b]) == 0
    out = capsys.readouterr().out
    assert "ratio 2x" in out and "Break-even" in out and "Sensitivity" in out


def test_compare_bad_input(
    make_run: MakeRun, store_run: StoreRun, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    a = store_run(make_run("cmpa0003"))
    rc, _ = run_fail(capsys, "compare", a)
    assert rc == 2
    b = store_run(make_run("cmpb0003"))
    cny = tmp_path / "cny.yaml"
    cny.write_text("currency: CNY\nrental_per_gpu_hour: 20\n")
    rc, err = run_fail(capsys, "compare", a, b, "--profile", f"{b}={cny}", "--profile", "h100-sxm-rent")
    assert rc == 4 and "different currencies" in err
    rc, err = run_fail(capsys, "compare", a, b, "--profile", "zzzz=h100-sxm-rent")
    assert rc == 2 and "not one of the runs" in err
    no_tokens = store_run(make_run("cmpc0003", output_tps=0.0))
    rc, err = run_fail(capsys, "compare", a, no_tokens)
    assert rc == 4 and "no output tokens" in err


def test_estimate_json_is_labelled(
    make_run: MakeRun, store_run: StoreRun, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = store_run(make_run("est00001", gpu="NVIDIA A100-SXM4-80GB", power_w=300.0))
    d = run_json(capsys, "estimate", run_id, "--gpu", "NVIDIA H100 80GB HBM3", "--prefill-share", "0")
    assert isinstance(d, dict)
    assert d["estimate"] is True and d["target_gpu"]["key"] == "h100-sxm"
    assert d["roofline"]["speedup"] == pytest.approx(3.35 / 2.039)
    assert d["cost"]["profile"]["name"] == "h100-sxm-own"
    rc, err = run_fail(capsys, "estimate", run_id, "--gpu", "Voodoo 5")
    assert rc == 3 and "not in the catalog" in err


def test_estimate_terminal_output_says_estimate(
    make_run: MakeRun, store_run: StoreRun, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = store_run(make_run("est00002"))
    assert main(["estimate", run_id, "--gpu", "mi300x"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ESTIMATE") and "assumption:" in out


def test_gpus_and_profiles_json(capsys: pytest.CaptureFixture[str]) -> None:
    g = run_json(capsys, "gpus")
    assert isinstance(g, dict)
    keys = {x["key"] for x in g["gpus"]}
    assert {"h100-sxm", "mi300x", "rx-7900-xtx"} <= keys
    h100 = next(x for x in g["gpus"] if x["key"] == "h100-sxm")
    assert h100["bandwidth_tb_s"] == {
        **h100["bandwidth_tb_s"],
        "value": 3.35,
        "unit": "TB/s",
        "date": "2026-11",
    }
    amd = run_json(capsys, "gpus", "--vendor", "amd")
    assert isinstance(amd, dict) and {x["vendor"] for x in amd["gpus"]} == {"amd"}
    p = run_json(capsys, "profiles")
    assert isinstance(p, dict)
    names = {x["name"] for x in p["profiles"]}
    assert {"h100-sxm-own", "mi300x-rent", "cpu-cloud"} <= names
    assert all(x["sources"] for x in p["profiles"])


def test_gpus_and_profiles_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gpus"]) == 0 and "mi300x" in capsys.readouterr().out
    assert main(["profiles"]) == 0 and "h100-sxm-own" in capsys.readouterr().out


def test_a_run_of_a_server_on_another_machine_is_priced_by_what_its_profile_needs(
    make_run: MakeRun, store_run: StoreRun, capsys: pytest.CaptureFixture[str]
) -> None:
    """A client benching a remote server has no telemetry of the server's devices (issue 15): a rental
    price needs only the GPU count; an ownership price needs power, from power_w or a named GPU's TDP."""
    remote = store_run(make_run("remote01", devices=[]))
    rc, err = run_fail(capsys, "cost", remote, "--profile", "h100-sxm-rent")
    assert rc == 4 and "how many GPUs served it" in err and "--gpus N" in err
    rented = run_json(capsys, "cost", remote, "--profile", "h100-sxm-rent", "--gpus", "2")
    assert isinstance(rented, dict)
    assert rented["hourly"]["rental_usd_per_hour"] == pytest.approx(2 * 3.34)
    assert rented["devices"]["count"] == 2
    assert rented["power"]["power_source"].startswith("not measured — not needed for the price")
    assert rented["energy"]["joules_per_output_token"] is None
    rc, err = run_fail(capsys, "cost", remote, "--profile", "h100-sxm-own", "--gpus", "2")
    assert rc == 4 and "needs their power" in err and "--gpu NAME" in err
    owned = run_json(
        capsys, "cost", remote, "--profile", "h100-sxm-own", "--gpus", "2", "--gpu", "H100 SXM"
    )
    assert isinstance(owned, dict)
    assert owned["devices"]["count"] == 2 and len(owned["devices"]["names"]) == 2
    assert owned["power"]["estimate"] is True and owned["power"]["serving_w"] == pytest.approx(2 * 700.0)
    assert owned["power"]["power_source"].startswith("estimate: catalog TDP of ")
    assert any(w.startswith("power is not measured: estimate: catalog TDP") for w in owned["warnings"])
