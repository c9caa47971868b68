"""Hostile GPU tools for the tests: programs on PATH (small shell scripts) that print garbage, 10 MB,
invalid UTF-8, NULs, quoted new lines, bare carriage returns, JSON nested 200,000 deep or numbers of 5,000
digits, or that hang with a child of their own, or exit while a child they started holds their pipes.

Every process a script starts writes its pid to ``pids`` (one per line), so a test can check that none
survives the command that ran it (:func:`survivors`). Nothing here is faked in-process: gpuledger runs the
scripts through its real runner.
"""

from __future__ import annotations

import shlex
import shutil
import time
from pathlib import Path

import psutil

SH = "/bin/sh"
CAT = shutil.which("cat") or "/bin/cat"
SLEEP = shutil.which("sleep") or "/bin/sleep"
TEN_MB = 10 * 1024 * 1024

# kind -> the bytes the tool prints on stdout
PAYLOADS: dict[str, bytes] = {
    "garbage": bytes(range(256)) * 64 + b'0,"unterminated\n\r,\x00,"\n' * 50,
    "huge": b"x" * TEN_MB,  # one 10 MB line: "field larger than field limit" for the csv module
    "huge_lines": (b"0, NVIDIA A10, " + b"9" * 1000 + b" MiB\n") * (TEN_MB // 1000),
    "invalid_utf8": b"\xff\xfe\x80 0, \xc3(, GPU-\xed\xa0\x80, \xf0\x28\x8c\x28\n" * 40,
    "nul": b"0,\x00\x00,NVIDIA\x00A10,\x00\n" * 40,
    "quoted_newlines": b'index, name\n0, "NVIDIA\nA10", "GPU-\n1\n2"\n"' + b"q" * 200_000 + b'\n',
    "carriage_returns": b"0, NVIDIA A10\r, GPU-x\r1\r, 00000000:17:00.0\r\n" * 20,  # bare CR: csv.Error
    "deep_json": b"[" * 200_000,
    "big_number_json": b'[{"gpu": 0, "power": {"socket_power": {"value": ' + b"9" * 5000 + b"}}}]",
}
PRINTING = tuple(PAYLOADS)
KINDS = (*PRINTING, "hang", "leaves_child")


def hostile_tool(bin_dir: Path, name: str, kind: str, pids: Path) -> Path:
    """Write ``bin_dir/name``: a program that misbehaves as ``kind`` whatever its arguments.

    ``hang``: starts ``sleep 1000`` in the background and sleeps 1000 s itself. ``leaves_child``: starts a
    background ``sleep 1000`` that keeps stdout open, prints one line and exits 0. The printing kinds
    print their payload and exit 0."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    q = shlex.quote
    lines = ["#!" + SH, f"echo $$ >> {q(str(pids))}"]
    if kind == "hang":
        lines += [f"{SLEEP} 1000 &", f"echo $! >> {q(str(pids))}", f"exec {SLEEP} 1000"]
    elif kind == "leaves_child":
        lines += [f"{SLEEP} 1000 &", f"echo $! >> {q(str(pids))}", "echo started", "exit 0"]
    else:
        payload = bin_dir / f".{name}.{kind}.out"
        payload.write_bytes(PAYLOADS[kind])
        lines += [f"{CAT} {q(str(payload))}", "exit 0"]
    path = bin_dir / name
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o755)
    return path


def answers_once_then_hangs(bin_dir: Path, name: str, first: Path, pids: Path) -> Path:
    """A tool that prints ``first`` the first time it runs and hangs (with a child) every time after."""
    q = shlex.quote
    flag = bin_dir / f".{name}.answered"
    script = "\n".join([
        "#!" + SH,
        f"echo $$ >> {q(str(pids))}",
        f"if [ ! -e {q(str(flag))} ]; then : > {q(str(flag))}; {CAT} {q(str(first))}; exit 0; fi",
        f"{SLEEP} 1000 &",
        f"echo $! >> {q(str(pids))}",
        f"exec {SLEEP} 1000",
    ]) + "\n"
    path = bin_dir / name
    path.write_text(script)
    path.chmod(0o755)
    return path


def _alive(pid: int, folder: Path) -> bool:
    """Whether ``pid`` is still one of ours: running (not a zombie) and a ``sleep 1000`` or a script from
    ``folder`` (a pid reused by an unrelated process does not count)."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        cmd = " ".join(proc.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False
    return ("sleep" in cmd and "1000" in cmd) or str(folder) in cmd


def survivors(pids: Path, wait_s: float = 3.0) -> list[int]:
    """The processes listed in ``pids`` still running after at most ``wait_s`` (killed processes take a
    moment to be reaped by whoever adopted them)."""
    if not pids.exists():
        return []
    listed = [int(p) for p in pids.read_text().split()]
    deadline = time.monotonic() + wait_s
    alive = [p for p in listed if _alive(p, pids.parent)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [p for p in alive if _alive(p, pids.parent)]
    return alive


def kill_survivors(pids: Path) -> None:
    """Clean up after a failing test: end the processes this test's scripts started (by pid)."""
    for pid in survivors(pids, wait_s=0):
        try:
            psutil.Process(pid).kill()
        except psutil.NoSuchProcess:
            continue
