"""Output files, as docs/contracts.md "Output files" states them: every command that writes a file
(``export -o``, ``report --html/--md``, ``lock -o``, ``run --html``) writes it the same way: atomically
over a regular file or to a new path, and never through or over anything else (a symlink, a FIFO, a
device node, a directory), which is refused with one line and exit 4 and left untouched.

The runs come from the golden store (written by a real gpuledger, tests/golden)."""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuledger.cli.main import main

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "golden"
RUN = json.loads((GOLDEN / "ids.json").read_text())["h200"]

# The command line writing to ``p``; ``root`` is an empty machine root for `lock` (no GPUs).
Args = Callable[[Path, Path], list[str]]
WRITERS: dict[str, Args] = {
    "export json": lambda p, root: ["export", RUN, "-o", str(p)],
    "export csv": lambda p, root: ["export", RUN, "--format", "csv", "-o", str(p)],
    "report --html": lambda p, root: ["report", RUN, "--html", str(p)],
    "report --md": lambda p, root: ["report", RUN, "--md", str(p)],
    "lock -o": lambda p, root: ["lock", "-o", str(p), "--root", str(root), "--force"],
}
# `run` checks its --html target before any work (no model is loaded for a refused target).
REFUSERS: dict[str, Args] = {
    **WRITERS,
    "run --html": lambda p, root: ["run", "--model", "dummy:smollm2-135m", "--html", str(p)],
}


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the golden store as the results store, a machine root for `lock`, and ``out/``."""
    shutil.copy(GOLDEN / "store-v1.sqlite", tmp_path / "store.sqlite")
    monkeypatch.setenv("GPULEDGER_DB", f"sqlite:///{tmp_path / 'store.sqlite'}")
    (tmp_path / "root").mkdir()
    (tmp_path / "out").mkdir()
    return tmp_path / "out"


def _root(work: Path) -> Path:
    return work.parent / "root"


def _one_error_line(err: str, *needles: str) -> None:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines and lines[0].startswith("error: "), err
    assert all(n in lines[0] for n in needles), err
    assert "Traceback" not in err


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


@pytest.mark.parametrize("writer", list(REFUSERS))
def test_a_symlink_is_refused_and_neither_it_nor_its_target_changes(
    writer: str, work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    precious = work / "precious.txt"
    precious.write_text("keep me\n")
    link = work / "out.html"
    link.symlink_to(precious)
    assert main(REFUSERS[writer](link, _root(work))) == 4
    _one_error_line(capsys.readouterr().err, str(link), "symbolic link")
    assert link.is_symlink() and os.readlink(link) == str(precious)
    assert precious.read_text() == "keep me\n"
    assert _leftovers(work) == []


@pytest.mark.parametrize("writer", list(REFUSERS))
def test_a_fifo_is_refused_and_nothing_is_written_into_it(
    writer: str, work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = work / "out.html"
    os.mkfifo(fifo)
    # A reader is open (non-blocking), so a command that wrongly wrote into the FIFO would not hang.
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        assert main(REFUSERS[writer](fifo, _root(work))) == 4
        _one_error_line(capsys.readouterr().err, str(fifo), "FIFO")
        assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
        try:
            leaked = os.read(reader, 1)
        except BlockingIOError:
            leaked = b""
        assert leaked == b""
    finally:
        os.close(reader)


@pytest.mark.parametrize("writer", list(REFUSERS))
def test_a_device_node_is_refused_and_stays_a_device(
    writer: str, work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A private copy of /dev/full (char device 1:7): the issue saw /dev/full replaced by a JSON file."""
    node = work / "full.html"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 7))
    except PermissionError:
        pytest.skip("creating a device node needs root (CAP_MKNOD)")
    assert main(REFUSERS[writer](node, _root(work))) == 4
    _one_error_line(capsys.readouterr().err, str(node), "character device")
    st = os.lstat(node)
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 7)


@pytest.mark.parametrize("writer", list(REFUSERS))
def test_a_directory_is_refused(writer: str, work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = work / "adir.html"
    target.mkdir()
    (target / "inside").write_text("x")
    assert main(REFUSERS[writer](target, _root(work))) == 4
    _one_error_line(capsys.readouterr().err, "directory")
    assert (target / "inside").read_text() == "x"


@pytest.mark.parametrize("writer", list(REFUSERS))
def test_a_missing_directory_is_refused_not_created(
    writer: str, work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = work / "missing" / "deeper" / "r.html"
    assert main(REFUSERS[writer](target, _root(work))) == 4
    _one_error_line(capsys.readouterr().err, str(work / "missing" / "deeper"), "does not exist")
    assert not (work / "missing").exists()


@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_regular_file_is_replaced_whole_keeping_its_permissions(
    writer: str, work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = work / "out.file"
    target.write_text("old\n")
    target.chmod(0o640)
    inode = target.stat().st_ino
    assert main(WRITERS[writer](target, _root(work))) == 0
    capsys.readouterr()
    assert target.read_bytes() != b"old\n" and len(target.read_bytes()) > 100
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert target.stat().st_ino != inode  # a new file renamed over the old one, not rewritten in place
    assert _leftovers(work) == []


@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_new_file_gets_the_umask_permissions(
    writer: str, work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = work / "new.file"
    old = os.umask(0o027)
    try:
        assert main(WRITERS[writer](target, _root(work))) == 0
    finally:
        os.umask(old)
    capsys.readouterr()
    assert stat.S_IMODE(target.stat().st_mode) == 0o640


def test_export_writes_what_it_prints_on_stdout(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", RUN]) == 0
    printed = capsys.readouterr().out
    target = work / "run.json"
    assert main(["export", RUN, "-o", str(target)]) == 0
    assert target.read_text() == printed


def test_lock_refuses_to_replace_a_snapshot_without_force(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = work / "gpuledger.lock.json"
    root = str(work.parent / "root")
    assert main(["lock", "-o", str(target), "--root", root]) == 0
    first = target.read_text()
    assert json.loads(first)["format"]
    capsys.readouterr()
    assert main(["lock", "-o", str(target), "--root", root]) == 4
    _one_error_line(capsys.readouterr().err, str(target), "exists", "--force")
    assert target.read_text() == first
    assert main(["lock", "-o", str(target), "--root", root, "--force"]) == 0
    assert json.loads(target.read_text())["hash"] == json.loads(first)["hash"]


def test_lock_does_not_follow_a_symlink(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """lock -o used to write through a link (to wherever it pointed)."""
    elsewhere = work / "elsewhere.json"
    elsewhere.write_text("{}\n")
    link = work / "gpuledger.lock.json"
    link.symlink_to(elsewhere)
    assert main(["lock", "-o", str(link), "--root", str(work.parent / "root"), "--force"]) == 4
    capsys.readouterr()
    assert elsewhere.read_text() == "{}\n"
