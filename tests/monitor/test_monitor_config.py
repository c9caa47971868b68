"""Command-line forms of the monitor: durations, the listen address and its loopback rule."""

from __future__ import annotations

import pytest

from gpuledger.errors import UsageError
from gpuledger.monitor import MonitorConfig, parse_duration, parse_listen


@pytest.mark.parametrize(("text", "seconds"), [
    ("1s", 1.0), ("500ms", 0.5), ("15m", 900.0), ("1h", 3600.0), ("1h30m", 5400.0), ("2d", 172800.0),
    ("0.25", 0.25), ("10", 10.0), (" 1H ", 3600.0),
])
def test_durations_accept_units_and_bare_seconds(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "0", "-1s", "1x", "h", "1h 30m", "nan", "inf", "s1"])
def test_durations_refuse_anything_else_naming_the_flag(text: str) -> None:
    with pytest.raises(UsageError, match="--alert-window"):
        parse_duration(text, "--alert-window")


@pytest.mark.parametrize(("text", "expected"), [
    ("127.0.0.1:9835", ("127.0.0.1", 9835)),
    (":9835", ("127.0.0.1", 9835)),
    ("9835", ("127.0.0.1", 9835)),
    ("localhost:0", ("localhost", 0)),
    ("[::1]:9835", ("::1", 9835)),
    ("127.0.0.2:1", ("127.0.0.2", 1)),
])
def test_loopback_listen_addresses_need_no_permission(text: str, expected: tuple[str, int]) -> None:
    assert parse_listen(text) == expected


@pytest.mark.parametrize("text", ["0.0.0.0:9835", "[::]:9835", "10.1.2.3:9835", "myhost:9835"])
def test_non_loopback_listen_is_refused_without_allow_remote(text: str) -> None:
    with pytest.raises(UsageError, match="not a loopback address") as err:
        parse_listen(text)
    assert err.value.hint is not None and "--allow-remote" in err.value.hint
    assert parse_listen(text, allow_remote=True)[1] == 9835


@pytest.mark.parametrize("text", ["127.0.0.1:http", "127.0.0.1:70000", "::1:9835", "[::1]9835"])
def test_malformed_listen_addresses_are_usage_errors(text: str) -> None:
    with pytest.raises(UsageError, match="--listen"):
        parse_listen(text)


@pytest.mark.parametrize(("field", "value", "flag"), [
    ("alert_util", 1.5, "--alert-util"), ("alert_util", -0.1, "--alert-util"),
    ("interval_s", 0.0, "--interval"), ("alert_window_s", float("inf"), "--alert-window"),
    ("engine_url", "127.0.0.1:8000/metrics", "--engine-metrics"),
])
def test_config_refuses_out_of_range_values(field: str, value: object, flag: str) -> None:
    with pytest.raises(UsageError, match=flag):
        MonitorConfig(**{field: value})  # type: ignore[arg-type]
