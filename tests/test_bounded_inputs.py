"""Every file a user names is read within a byte cap whatever it is (``gpuledger.boundedio``): a character
device (``/dev/zero`` reports 0 bytes to a size check), a FIFO nobody writes to, stdin. Each ends in one
line and its exit code, in a child process (a reader without a cap would exhaust its memory; one that
blocks on open would hang it), and under a memory limit too."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuledger import boundedio
from gpuledger.boundedio import TooLarge, iter_lines, read_file, read_text

REPO = Path(__file__).resolve().parents[1]
LIMIT_AS = 768 << 20  # 768 MiB of address space: the CLI and what it may read


def _cli(*args: str, stdin: Any = None, limit: bool = False) -> subprocess.CompletedProcess[str]:
    """``gpuledger ARGS`` in a child process (``limit``: under RLIMIT_AS = 768 MiB)."""
    code = "import sys\n"
    if limit:
        code += f"import resource\nresource.setrlimit(resource.RLIMIT_AS, ({LIMIT_AS}, {LIMIT_AS}))\n"
    code += f"from gpuledger.cli.main import main\nsys.exit(main({list(args)!r}))\n"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, stdin=stdin,
                          timeout=120, cwd=REPO, env=os.environ.copy())


def _one_line(done: subprocess.CompletedProcess[str], code: int, text: str) -> None:
    assert done.returncode == code, done.stderr
    assert text in done.stderr and "Traceback" not in done.stderr and len(done.stderr.splitlines()) <= 2


@pytest.mark.parametrize("limit", [False, True], ids=["no-limit", "768MiB"])
def test_import_of_dev_zero_is_refused_at_its_first_bytes(limit: bool) -> None:
    _one_line(_cli("import", "/dev/zero", limit=limit), 4,
              "/dev/zero: not a text file (a NUL byte at byte 0)")


def test_import_from_stdin_reads_dev_zero_no_further() -> None:
    with open("/dev/zero", "rb") as zero:
        _one_line(_cli("import", "-", stdin=zero, limit=True), 4, "stdin: not a text file")


def test_import_of_an_endless_text_stream_under_a_memory_limit_ends_in_one_line() -> None:
    yes = subprocess.Popen(["yes"], stdout=subprocess.PIPE)
    try:
        done = _cli("import", "-", stdin=yes.stdout, limit=True)
    finally:
        yes.kill()
        yes.wait()
    # 2 GiB are allowed; 768 MiB of address space run out first: the reader says so (exit 8), no traceback
    _one_line(done, 8, "stdin: ran out of memory after reading")


def test_lock_check_of_dev_zero_and_of_a_fifo(tmp_path: Path) -> None:
    _one_line(_cli("lock", "--check", "/dev/zero", limit=True), 4,
              "lock file /dev/zero: not a text file (a NUL byte at byte 0)")
    fifo = tmp_path / "lock.fifo"
    os.mkfifo(fifo)
    _one_line(_cli("lock", "--check", str(fifo)), 4, "is not JSON")  # empty: nobody writes to it


def test_a_workflow_of_dev_zero_is_refused(tmp_path: Path) -> None:
    done = _cli("bench", "--task", "image", "--engine", "comfyui", "--base-url", "http://127.0.0.1:9",
                "--workflow", "/dev/zero", limit=True)
    assert done.returncode in (2, 4), done.stderr
    assert "--workflow /dev/zero: not a text file" in done.stderr and "Traceback" not in done.stderr


# ----------------------------------------------------------------------------------- the reader itself


def test_the_cap_is_the_cap_for_any_file(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    assert read_file(path, 100) == b"x" * 100
    with pytest.raises(TooLarge) as err:
        read_file(path, 99, what="the file")
    assert err.value.message == "the file: more than 99 bytes (99 B), the most it may be"
    with pytest.raises(TooLarge):
        read_file("/dev/zero", 3 * boundedio.CHUNK_BYTES)
    assert read_text(path, 100) == "x" * 100


def test_lines_are_read_a_chunk_at_a_time_and_long_ones_cut(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(boundedio, "CHUNK_BYTES", 7)
    path = tmp_path / "log"
    path.write_bytes(b"a\n" + b"b" * 50 + b"\nccc\n\nlast")
    assert list(iter_lines(path, 1000, max_line=10)) == [b"a", b"b" * 11, b"ccc", b"", b"last"]
    with pytest.raises(TooLarge):
        list(iter_lines(path, 20, max_line=10))


def test_a_fifo_nobody_writes_to_reads_as_empty(tmp_path: Path) -> None:
    fifo = tmp_path / "f.fifo"
    os.mkfifo(fifo)
    assert read_file(fifo, 10) == b""


def test_a_directory_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(IsADirectoryError) as err:
        read_file(tmp_path, 10)
    assert err.value.filename == str(tmp_path)
    done = _cli("lock", "--check", str(tmp_path))
    _one_line(done, 4, f"cannot read lock file {tmp_path}: [Errno 21] Is a directory: '{tmp_path}'")
