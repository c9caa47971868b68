"""A real single-node Slurm on 127.0.0.1 for the tests (the COOKBOOK's recipe): munged, slurmctld and slurmd
from Debian's packages, under a temporary directory, on free ports, as root; stopped by their pids.

``SlurmCluster(base).start()`` writes its own munge key (never /etc/munge's), starts munged on a socket in
``base``, writes ``base/slurm.conf`` (one node, ``localhost`` at 127.0.0.1, partition ``bench``, 2 CPUs)
and starts the controller and the node daemon, then waits until ``sinfo`` says the node is idle. Every
client command needs ``SLURM_CONF``: ``env()`` is the environment to run them with. ``missing()`` says
why this machine cannot run it (programs not installed, not root), or None.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo", "srun")
CPUS = 2
PARTITION = "bench"
READY_S = 60.0


def missing() -> str | None:
    """Why a real Slurm cannot be started here, or None."""
    absent = [p for p in PROGRAMS if shutil.which(p, path=os.environ.get("PATH", "") + ":/usr/sbin") is None]
    if absent:
        return (f"{', '.join(absent)} not installed (apt-get install -y --no-install-recommends slurmctld "
                "slurmd slurm-client munge)")
    if os.geteuid() != 0:
        return "not root (slurmd and munged run as root here, as the COOKBOOK's recipe)"
    return None


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _program(name: str) -> str:
    found = shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin")
    assert found is not None, name
    return found


class SlurmCluster:
    """One controller and one node on 127.0.0.1, everything under ``base``."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.conf = base / "slurm.conf"
        self.munge_dir = base / "munge"
        self.socket = self.munge_dir / "munge.sock"
        self.ctld_port, self.slurmd_port = _free_ports(2)
        self._pid_files = [base / "slurmd.pid", base / "slurmctld.pid", self.munge_dir / "munged.pid"]

    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def _conf_text(self) -> str:
        d = self.base
        return "\n".join([
            "ClusterName=gpuledgertest",
            "SlurmctldHost=localhost(127.0.0.1)",
            f"SlurmctldPort={self.ctld_port}",
            f"SlurmdPort={self.slurmd_port}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.socket}",
            f"StateSaveLocation={d / 'state'}",
            f"SlurmdSpoolDir={d / 'spool'}",
            f"SlurmctldPidFile={d / 'slurmctld.pid'}",
            f"SlurmdPidFile={d / 'slurmd.pid'}",
            f"SlurmctldLogFile={d / 'slurmctld.log'}",
            f"SlurmdLogFile={d / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SchedulerType=sched/builtin",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "ReturnToService=2",
            "SlurmUser=root",
            "MpiDefault=none",
            "KillWait=5",
            f"NodeName=localhost NodeAddr=127.0.0.1 CPUs={CPUS} State=UNKNOWN",
            f"PartitionName={PARTITION} Nodes=localhost Default=YES MaxTime=INFINITE State=UP",
            "",
        ])

    def start(self) -> None:
        self.base.chmod(0o755)  # munged refuses a socket directory others cannot traverse
        for sub in ("state", "spool"):
            (self.base / sub).mkdir()
        self.munge_dir.mkdir()
        key = self.munge_dir / "munge.key"
        key.write_bytes(os.urandom(1024))
        shutil.chown(self.munge_dir, "munge", "munge")
        shutil.chown(key, "munge", "munge")
        key.chmod(0o400)
        self._run("runuser", "-u", "munge", "--", _program("munged"), "--force", f"--socket={self.socket}",
                  f"--key-file={key}", f"--pid-file={self.munge_dir / 'munged.pid'}",
                  f"--log-file={self.munge_dir / 'munged.log'}", f"--seed-file={self.munge_dir / 'seed'}")
        self.conf.write_text(self._conf_text())
        self._run(_program("slurmctld"), "-f", str(self.conf))
        self._wait_for(self.base / "slurmctld.pid")
        self._run(_program("slurmd"), "-f", str(self.conf), "-N", "localhost")
        self._wait_idle()

    def _run(self, *argv: str) -> None:
        subprocess.run(list(argv), check=True, capture_output=True, timeout=60, env=self.env())

    def _wait_for(self, path: Path) -> None:
        deadline = time.monotonic() + READY_S
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.1)

    def _wait_idle(self) -> None:
        deadline = time.monotonic() + READY_S
        state = ""
        while time.monotonic() < deadline:
            proc = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=30,
                                  env=self.env())
            state = proc.stdout.strip() or proc.stderr.strip()
            if state == "idle":
                return
            time.sleep(0.3)
        raise RuntimeError(f"the Slurm node did not become idle within {READY_S:g} s (sinfo: {state!r}); "
                           f"logs in {self.base}")

    def squeue(self, arrays: list[str]) -> dict[str, str]:
        """Each task of the arrays still known to squeue, and its state."""
        proc = subprocess.run(["squeue", "-h", "-r", "-t", "all", "-j", ",".join(arrays), "-o", "%i|%T"],
                              capture_output=True, text=True, timeout=30, env=self.env())
        return dict(line.split("|", 1) for line in proc.stdout.split() if "|" in line)

    def log_tail(self, lines: int = 20) -> str:
        out = []
        for name in ("slurmctld.log", "slurmd.log"):
            path = self.base / name
            if path.exists():
                out.append(f"-- {name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:]))
        return "\n".join(out)

    def stop(self) -> None:
        """Stop the daemons by their pids (node, controller, munged), waiting for each to exit."""
        for pid_file in self._pid_files:
            try:
                pid = int(pid_file.read_text().strip())
            except (OSError, ValueError):
                continue
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.1)
            else:
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.base, ignore_errors=True)
