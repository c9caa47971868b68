"""A vendor library that fails at import does not take another command down (issue #33, item 12): with the
extras ``[amd]`` and ``[cluster]`` on a machine without ROCm, ``import ray`` imports amdsmi, which prints two
lines on stdout and raises ``KeyError('libamd_smi.so')`` — Ray catches only ImportError, so ``matrix --ray
local`` died with ``internal error: KeyError``. Fakes at the import boundary only: an ``amdsmi`` package that
does what the real wheel does without ROCm, and a ``ray`` package whose import does ``import amdsmi`` the way
Ray's accelerator probe does; gpuledger runs unchanged in a child process with them first on its path."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

BROKEN_AMDSMI = """\
print("/opt/rocm/lib/libamd_smi.so: cannot open shared object file: No such file or directory")
print("Unable to find libamd_smi.so library try installing amd-smi-lib from your package manager")
raise KeyError('libamd_smi.so')
"""

FAKE_RAY = """\
try:  # as ray._private.thirdparty.pyamdsmi does while `import ray` runs
    import amdsmi  # noqa: F401
except ImportError as exc:
    AMDSMI = f"ImportError: {exc}"
else:
    AMDSMI = "imported"

__version__ = "2.99.0"
_joined = []


def is_initialized():
    return bool(_joined)


def init(address, **options):
    _joined.append(address)


def nodes():
    return [{"Alive": True}]


def shutdown():
    _joined.clear()
"""

CHILD = """\
from gpuledger.bench import cluster
print(cluster.connect("local"))
import ray
print(ray.AMDSMI)
from gpuledger.telemetry.amd import AmdSmiSource
print(AmdSmiSource().reason)
"""


def fake_site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    (site / "amdsmi").mkdir(parents=True)
    (site / "amdsmi" / "__init__.py").write_text(BROKEN_AMDSMI)
    (site / "ray" / "_private").mkdir(parents=True)
    (site / "ray" / "__init__.py").write_text(FAKE_RAY)
    (site / "ray" / "_private" / "__init__.py").write_text("")
    (site / "ray" / "_private" / "worker.py").write_text(textwrap.dedent("""\
        def print_to_stdstream(data, ignore_prefix):
            pass
        """))
    return site


def test_joining_ray_with_a_broken_amdsmi_installed_works_and_keeps_stdout_clean(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(fake_site(tmp_path))}
    proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    joined, ray_saw, reason = proc.stdout.splitlines()  # nothing else on stdout: amdsmi's two lines are gone
    assert joined == "on Ray 2.99.0 at local (1 node)"
    assert ray_saw.startswith("ImportError: ")  # a plain ImportError inside `import ray`, which Ray handles
    assert reason == (
        "amdsmi unavailable: libamd_smi.so could not be loaded (/opt/rocm/lib/libamd_smi.so: cannot open "
        "shared object file: No such file or directory); is ROCm installed?"
    )
