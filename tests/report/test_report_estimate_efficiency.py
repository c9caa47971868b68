"""`estimate` carries the measured MFU and MBU to the target GPU: on the terminal with significant digits,
the figure the --json has (a 0.0006 % MFU of a tiny model is not "0%")."""

from __future__ import annotations

import json
import re

import pytest
from report_factory import H200, make_run, synth_requests
from typer.testing import CliRunner

from gpuledger.cli.main import app
from gpuledger.store import Store


def test_mfu_and_mbu_print_with_significant_digits(store: Store) -> None:
    run = make_run(
        store,
        synth_requests(40),
        engine="torch",
        model="dummy:smollm2-135m",
        devices=(H200,),
        config={"engine": "torch", "batch_size": 4, "num_parameters": 135_000_000, "dtype": "bfloat16"},
    )
    doc = json.loads(CliRunner().invoke(app, ["estimate", run, "--gpu", "MI300X", "--json"]).stdout)
    eff = doc["efficiency"]
    assert 0 < eff["mfu"] < 1e-3 and 0 < eff["mbu"] < 1e-2  # tiny: where "0%" hid them
    out = CliRunner().invoke(app, ["estimate", run, "--gpu", "MI300X"], env={"COLUMNS": "120"}).stdout
    line = next(line for line in out.splitlines() if "measured efficiency carried over" in line)
    for name in ("MFU", "MBU"):
        m = re.search(rf"{name} ([\d.,]+(?:e[-+]?\d+)?) %", line)
        assert m is not None, line
        shown = float(m.group(1).replace(",", ""))
        assert shown == pytest.approx(eff[name.lower()] * 100, rel=0.05), line
