"""The monitor's status document is a typed model (gpuledger.monitor.status): for each state the monitor
is driven into (status_scenarios: fake NVML / amdsmi at their import boundary, RAPL files, the recorded
vLLM /metrics text, an engine down), what ``--json`` prints is the model's dump, the dump reads back as
the same model, and the terminal summary shows the model's own figures."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from status_scenarios import SCENARIOS, Scenario

from gpuledger.cli.common import dumps_json
from gpuledger.cli.main import main
from gpuledger.cli.monitor_cmd import _render
from gpuledger.monitor.status import CostStatus, DeviceStatus, MonitorStatus, MonitorSummary

Build = Callable[[pytest.MonkeyPatch, Path], Scenario]
LISTEN = "http://127.0.0.1:9835/metrics"


@pytest.fixture(params=list(SCENARIOS), ids=list(SCENARIOS))
def scenario(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Scenario:
    build: Build = SCENARIOS[request.param]
    return build(monkeypatch, tmp_path)


def test_json_prints_the_listen_url_then_the_status_models_dump(scenario: Scenario) -> None:
    status = scenario.state.status(scenario.now)
    dump = status.model_dump(mode="json")
    printed = json.loads(dumps_json(MonitorSummary.of(LISTEN, status).model_dump(mode="json")))
    assert list(printed) == ["listen", *dump]
    assert printed == {"listen": LISTEN, **dump}


def test_the_dump_reads_back_as_the_same_model(scenario: Scenario) -> None:
    status = scenario.state.status(scenario.now)
    text = dumps_json(status.model_dump(mode="json"))
    again = MonitorStatus.model_validate(json.loads(text))
    assert again == status
    assert dumps_json(again.model_dump(mode="json")) == text
    summary = MonitorSummary.of(LISTEN, status)
    assert MonitorSummary.model_validate(summary.model_dump(mode="json")) == summary


def test_a_status_document_with_an_unknown_key_is_refused(scenario: Scenario) -> None:
    dump = scenario.state.status(scenario.now).model_dump(mode="json")
    with pytest.raises(ValueError, match="listen"):
        MonitorStatus.model_validate({**dump, "listen": LISTEN})


def test_the_cost_block_names_its_money_figures_by_the_profiles_currency(scenario: Scenario) -> None:
    status = scenario.state.status(scenario.now)
    cost = status.model_dump(mode="json")["cost"]
    if status.cost is None:
        assert cost is None and status.cost_note
        return
    p = status.cost.currency.lower()
    assert list(cost) == ["profile", "currency", "mode", "note", f"{p}_total", "components", f"{p}_per_hour",
                          "priced_power_w", "power_source", "energy_reason", "gpu_count", "fallback_power"]
    assert cost[f"{p}_total"] == status.cost.total == pytest.approx(sum(status.cost.components.values()))
    assert cost[f"{p}_per_hour"] == status.cost.per_hour
    assert "total" not in cost and "per_hour" not in cost


def test_a_cny_profile_dumps_cny_total_and_no_usd_key(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    sc = SCENARIOS["CNY profile"](monkeypatch, tmp_path)
    cost = sc.state.status(sc.now).model_dump(mode="json")["cost"]
    assert cost["currency"] == "CNY" and cost["cny_total"] > 0 and cost["cny_per_hour"] > 0
    assert not [k for k in cost if k.startswith("usd_")]


def test_an_event_dumps_only_the_fields_its_kind_sets(scenario: Scenario) -> None:
    status = scenario.state.status(scenario.now)
    for event, dumped in zip(status.events, status.model_dump(mode="json")["events"], strict=True):
        extras = [k for k in ("device", "active", "source") if getattr(event, k) is not None]
        assert list(dumped) == ["t_s", "kind", "message", *extras]
        if event.kind == "alert":
            assert extras == ["device", "active"]
        elif event.kind == "source_down":
            assert extras == ["source"]
        elif event.kind == "device_lost":
            assert extras == ["device"]
        else:
            assert extras == []


def test_the_scenarios_cover_what_the_document_can_say(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    """Each scenario's document holds what it is named for (so the tests above are not vacuous)."""
    def status(name: str) -> MonitorStatus:
        root = tmp_path / str(list(SCENARIOS).index(name))
        root.mkdir()
        with monkeypatch.context() as mp:
            sc = SCENARIOS[name](mp, root)
        return sc.state.status(sc.now)

    alert = status("own profile, alert fired")
    assert [d.low_utilization_alert for d in alert.devices if d.vendor == "nvidia"] == [True, False]
    assert [e.kind for e in alert.events] == ["alert"]
    assert status("no cost (GPU not in the catalog)").cost is None
    window = status("vLLM engine window").engine
    assert window is not None and window.up and window.window is not None and window.last is not None
    assert window.last.engine == "vllm" and window.window.output_tokens == 100.0
    assert window.url == "http://user:***@127.0.0.1:9/metrics"
    no_cost = status("vLLM engine without cost").engine
    assert no_cost is not None and no_cost.window is not None
    assert no_cost.window.cost_per_million_tokens is None
    assert "no cost profile" in no_cost.window.reasons["cost_per_million_tokens"]
    down = status("engine down after scrapes").engine
    assert down is not None and not down.up and down.window is not None and down.reason
    never = status("engine never reached").engine
    assert never is not None and never.last is None and never.window is None and never.failures == 1
    lost = status("AMD GPU lost")
    assert [(d.device, d.up, d.error is not None) for d in lost.devices if d.vendor == "amd"] == [
        ("amd:0", True, False), ("amd:1", False, True)]
    failed = status("source failed")
    assert any(s.name == "nvml" and not s.up and s.reason for s in failed.sources)
    cpu = status("CPU only (RAPL)")
    assert [d.device for d in cpu.devices] == ["cpu"] and cpu.devices[0].energy_j == pytest.approx(50.0)


def test_the_cli_json_is_a_monitor_summary_that_reads_back_whole(
        no_gpu_stack: None, capsys: pytest.CaptureFixture[str]) -> None:
    """The real command (this machine's CPU through psutil, a cloud profile): its stdout is a
    MonitorSummary's dump, key for key."""
    code = main(["monitor", "--listen", "127.0.0.1:0", "--interval", "200ms", "--duration", "1s",
                 "--profile", "cpu-cloud", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    summary = MonitorSummary.model_validate(doc)
    assert summary.model_dump(mode="json") == doc
    assert dumps_json(summary.model_dump(mode="json")) + "\n" == out
    assert summary.cost is not None and doc["cost"]["usd_total"] == summary.cost.total > 0


# --------------------------------------------------------------------------- terminal


def rendered(status: MonitorStatus, capsys: pytest.CaptureFixture[str],
             monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("COLUMNS", "160")
    capsys.readouterr()
    _render(status)
    return capsys.readouterr().out


def row_cells(out: str, dev: DeviceStatus) -> list[str]:
    """The table cells of the row whose first cell is the device's key."""
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip("│┃").split("│")]
        if cells and cells[0] == dev.device:
            return cells
    raise AssertionError(f"no row for {dev.device} in\n{out}")


def expected_cells(dev: DeviceStatus, cost: CostStatus | None) -> list[str]:
    util = dev.util_now
    return [
        dev.device, dev.name,
        "yes" if dev.up else "no",
        "n/a" if util is None else f"{util * 100:.0f} %",
        "n/a —" if dev.energy_j is None else f"{dev.energy_j:.1f} J ({dev.energy_method})",
        f"{dev.busy_s:.1f} s",
        f"{dev.idle_cost:.4f} {cost.currency}" if cost and dev.idle_cost is not None else "—",
        "ACTIVE" if dev.low_utilization_alert else "",
    ]


def test_the_terminal_summary_shows_the_models_figures(
        scenario: Scenario, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    status = scenario.state.status(scenario.now)
    out = rendered(status, capsys, monkeypatch)
    assert f"gpuledger monitor — {status.uptime_s:.0f} s on {status.hostname}" in out
    for dev in status.devices:
        cells = row_cells(out, dev)
        want = expected_cells(dev, status.cost)
        if not dev.up:  # "no" and the error, which may wrap onto the row's next lines
            assert cells[2].startswith("no")
            cells[2] = "no"
        if dev.energy_j is None:  # "n/a — " and why (its reason, which may wrap)
            assert cells[4].startswith("n/a —")
            cells[4] = "n/a —"
        assert cells == want
    cost = status.cost
    if cost is not None:
        parts = ", ".join(f"{k} {v:.4f}" for k, v in cost.components.items() if v) or "nothing yet"
        assert (f"cost accrued: {cost.total:.4f} {cost.currency} ({parts}) — {cost.note}; "
                f"power: {cost.power_source}") in out
        if cost.energy_reason:
            assert cost.energy_reason in out
    else:
        assert status.cost_note in out and "cost accrued" not in out
    eng = status.engine
    if eng is None:
        assert not [line for line in out.splitlines() if line.startswith("engine ")]
    elif not eng.up:
        assert f"engine {eng.url}: down — {eng.reason}" in out
    elif eng.window is not None and eng.last is not None:
        w = eng.window
        price = ("n/a" if w.cost_per_million_tokens is None
                 else f"{w.cost_per_million_tokens:.4f} {cost.currency if cost else ''}")
        reqs = "n/a" if w.requests is None else f"{w.requests:.0f}"
        tokens = "n/a" if w.output_tokens is None else f"{w.output_tokens:.0f}"
        assert (f"engine {eng.last.engine} over {w.window_s:.0f} s: {tokens} output tokens, {reqs} requests; "
                f"cost per 1M tokens {price}") in out
        for key, why in w.reasons.items():
            assert f"  {key}: n/a — {why}" in out


def test_what_a_device_or_engine_said_is_shown_as_text_not_markup(
        scenario: Scenario, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    status = scenario.state.status(scenario.now)
    dev = status.devices[0].model_copy(update={"name": "[red]gpu[/red]", "up": False,
                                               "error": "[bold]lost[/bold]"})
    out = rendered(status.model_copy(update={"devices": (dev, *status.devices[1:])}), capsys, monkeypatch)
    assert "[red]gpu[/red]" in out and "[bold]lost[/bold]" in out
