"""The console script as a user meets it: help, version, usage errors, and defaults that agree."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gpuledger.cli.main import main

COMMANDS = ("run", "doctor", "lock", "bench", "sample", "cost", "compare", "estimate", "gpus", "profiles",
            "report", "monitor", "runs", "show", "export", "import", "delete")


def test_every_command_of_the_users_path_is_registered() -> None:
    proc = subprocess.run([sys.executable, "-m", "gpuledger.cli.main", "--help"], capture_output=True,
                          text=True, timeout=120, env={"COLUMNS": "200", "PATH": ""})
    assert proc.returncode == 0
    for name in COMMANDS:
        assert f" {name} " in proc.stdout, name


def test_an_unknown_option_is_a_usage_error_with_exit_2_not_a_traceback() -> None:
    proc = subprocess.run([sys.executable, "-m", "gpuledger.cli.main", "runs", "--bogus"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "No such option" in proc.stderr and "Traceback" not in proc.stderr


def test_version_is_printed() -> None:
    assert main(["--version"]) == 0


def test_the_cli_literal_defaults_agree_with_the_library() -> None:
    """monitor's listen address is a literal of its command (its module stays light); bench's engines and
    their default URLs come from the kinds' descriptors, which tests/bench/test_engine_registry.py holds to
    the engine registry."""
    from gpuledger.cli import monitor_cmd
    from gpuledger.monitor.config import DEFAULT_LISTEN

    assert monitor_cmd.DEFAULT_LISTEN == DEFAULT_LISTEN


def test_the_cli_does_not_import_the_http_stack_or_the_exporter_to_start() -> None:
    heavy = "('aiohttp', 'gpuledger.monitor', 'plotly', 'torch')"
    code = f"import sys, gpuledger.cli.main; print(sorted(m for m in {heavy} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize(("given", "kept"), [(None, "__all__"), ("", ""), ("logfire", "logfire")])
def test_the_console_script_loads_no_pydantic_plugin_unless_the_user_says(
    given: str | None, kept: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The console script sets PYDANTIC_DISABLE_PLUGINS=__all__ (no scan of every distribution's entry
    points at the first model); a value the user set, empty included, is theirs."""
    if given is None:
        monkeypatch.delenv("PYDANTIC_DISABLE_PLUGINS", raising=False)
    else:
        monkeypatch.setenv("PYDANTIC_DISABLE_PLUGINS", given)
    monkeypatch.setattr(sys, "argv", ["gpuledger", "--version"])
    with pytest.raises(SystemExit) as ended:
        main()
    assert ended.value.code == 0 and capsys.readouterr().out.strip()
    assert os.environ["PYDANTIC_DISABLE_PLUGINS"] == kept
