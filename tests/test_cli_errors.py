"""Every way a command can fail ends in one line on stderr and a documented exit code (README "Exit
codes"), never a traceback, a boxed panel or 70: usage errors (2), a binary profile file (4), stdout
that cannot be written (74), and a signal at any moment, the first second of imports included (130).

The commands run as the user runs them: ``python -m gpuledger.cli.main`` in a child process where the
exit code, the streams or a signal matter; the runs come from the golden store (tests/golden)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gpuledger import errors
from gpuledger.cli.main import main

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "golden"
RUN = json.loads((GOLDEN / "ids.json").read_text())["h200"]
CLI = [sys.executable, "-m", "gpuledger.cli.main"]


@pytest.fixture
def golden_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    shutil.copy(GOLDEN / "store-v1.sqlite", tmp_path / "golden.sqlite")
    url = f"sqlite:///{tmp_path / 'golden.sqlite'}"
    monkeypatch.setenv("GPULEDGER_DB", url)
    return url


def _lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


# ---- usage errors: one line, exit 2 ----------------------------------------------------------------

USAGE = {
    "unknown option": (["runs", "--bogus"], "No such option: --bogus"),
    "missing argument": (["cost"], "Missing argument"),
    "bad value": (["cost", RUN, "--slo-attainment", "abc"], "Invalid value for '--slo-attainment'"),
    "bad choice": (["export", RUN, "--format", "xml"], "Invalid value for '--format'"),
    "too few values": (["lock", "--diff", "a.json"], "requires 2 arguments"),
    "unknown command": (["nosuch"], "No such command"),
}


@pytest.mark.parametrize("case", list(USAGE))
def test_a_usage_error_is_one_line_with_exit_2(case: str, capsys: pytest.CaptureFixture[str]) -> None:
    args, needle = USAGE[case]
    assert main(args) == 2
    captured = capsys.readouterr()
    lines = _lines(captured.err)
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("error: gpuledger") and needle in lines[0], lines[0]
    assert "--help" in lines[0]  # where to look next
    assert "╭" not in captured.err and "Traceback" not in captured.err and captured.out == ""


def test_the_usage_line_names_the_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lock", "--diff", "a.json"]) == 2
    assert "gpuledger lock --help" in capsys.readouterr().err


def test_help_and_version_still_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "Usage" in capsys.readouterr().out
    assert main(["runs", "--help"]) == 0
    assert "--json" in capsys.readouterr().out
    assert main(["--version"]) == 0


def test_a_bare_gpuledger_prints_the_help() -> None:
    env = {**os.environ, "COLUMNS": "100"}
    proc = subprocess.run(CLI, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2
    assert "Usage" in proc.stdout and "Traceback" not in proc.stderr


# ---- invalid input --------------------------------------------------------------------------------


def test_a_binary_profile_file_is_exit_4_in_one_line(
    golden_db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = tmp_path / "profile.yaml"
    profile.write_bytes(bytes(range(256)) * 4)
    assert main(["cost", RUN, "--profile", str(profile), "--no-save"]) == 4
    lines = _lines(capsys.readouterr().err)
    assert len(lines) == 1 and "not UTF-8 text" in lines[0] and str(profile) in lines[0]


def test_a_binary_catalog_file_is_exit_4_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    catalog = tmp_path / "gpus.yaml"
    catalog.write_bytes(bytes(range(128, 256)))
    monkeypatch.setenv("GPULEDGER_CATALOG", str(catalog))
    assert main(["gpus"]) == 4
    lines = _lines(capsys.readouterr().err)
    assert len(lines) == 1 and "not UTF-8 text" in lines[0] and str(catalog) in lines[0]


# ---- output that cannot be written: exit 74 -------------------------------------------------------


def test_stdout_on_a_full_disk_is_exit_74_in_one_line(golden_db: str) -> None:
    with open("/dev/full", "w") as full:
        proc = subprocess.run([*CLI, "runs", "--json"], stdout=full, stderr=subprocess.PIPE, text=True,
                              timeout=120)
    assert proc.returncode == 74, proc.stderr
    lines = _lines(proc.stderr)
    assert lines == ["error: cannot write the output: No space left on device"], proc.stderr


@pytest.mark.parametrize("args", [["runs"], ["export", RUN], ["report", RUN, "--md", "-"]])
def test_a_closed_pipe_ends_the_output_silently_with_exit_74(golden_db: str, args: list[str]) -> None:
    """``gpuledger runs | head -1``: the reader is gone; no traceback, no "Exception ignored"."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([*CLI, *args], stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert proc.returncode == 74, proc.stderr
    assert proc.stderr == ""


def test_readme_exit_code_table_is_the_error_tree() -> None:
    """0 success, 1 warnings/drift (doctor, lock --check), every error class's code: nothing more."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    documented = {int(m) for m in re.findall(r"^\| (\d+) \|", section, flags=re.M)}
    tree = {
        cls.exit_code for cls in vars(errors).values()
        if isinstance(cls, type) and issubclass(cls, errors.GpuledgerError)
    }
    assert documented == {0, 1} | tree


# ---- signals --------------------------------------------------------------------------------------

# A child that runs gpuledger as the console script does (import main, call it), with the module of the
# command it runs (``runs``: gpuledger.cli.store_cmds, imported when the command is resolved) made slow: the
# signal lands while the application is being imported.
SLOW_IMPORT = textwrap.dedent(
    """
    import importlib.abc, sys, time

    class Slow(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name == "gpuledger.cli.store_cmds":
                sys.stderr.write("importing\\n")
                sys.stderr.flush()
                time.sleep(60)
            return None

    sys.meta_path.insert(0, Slow())
    from gpuledger.cli.main import main
    sys.exit(main())
    """
)


def _wait_for(proc: subprocess.Popen[str], marker: str, timeout: float = 60) -> None:
    assert proc.stderr is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if marker in line:
            return
        if not line and proc.poll() is not None:
            break
    proc.kill()
    pytest.fail(f"the child never printed {marker!r} (exit {proc.poll()})")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_while_the_cli_is_still_importing_is_exit_130_in_one_line(
    sig: signal.Signals, golden_db: str
) -> None:
    proc = subprocess.Popen([sys.executable, "-c", SLOW_IMPORT, "runs"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(proc, "importing")
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, (proc.returncode, err)
    name = " (SIGTERM)" if sig == signal.SIGTERM else ""
    assert _lines(err) == [f"error: interrupted{name}"], err
    assert out == ""


FIFO_WAITS = {"wait_for_partner", "pipe_wait", "fifo_open"}


def test_sigterm_while_a_command_waits_on_its_input_is_exit_130(golden_db: str, tmp_path: Path) -> None:
    """A profile given as a FIFO nobody writes to: the command blocks in open(); SIGTERM ends it."""
    fifo = tmp_path / "profile.yaml"
    os.mkfifo(fifo)
    proc = subprocess.Popen([*CLI, "cost", RUN, "--profile", str(fifo), "--no-save"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        # /proc/PID/wchan names the kernel function the process sleeps in: opening a FIFO without a writer
        while Path(f"/proc/{proc.pid}/wchan").read_text() not in FIFO_WAITS:
            assert time.monotonic() < deadline and proc.poll() is None, proc.poll()
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, (proc.returncode, err)
    assert _lines(err) == ["error: interrupted (SIGTERM)"], err
