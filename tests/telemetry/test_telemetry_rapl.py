"""RAPL from a fake powercap tree under a root directory (real files, real permissions)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from telemetry_fakes import write_zone

from gpuledger.telemetry.base import SourceError
from gpuledger.telemetry.rapl import RaplSource, find_zones, unwrap_step
from gpuledger.telemetry.sampler import BackgroundSampler


def set_energy(zone: Path, uj: int) -> None:
    (zone / "energy_uj").write_text(f"{uj}\n")


def test_no_powercap_directory_says_rapl_is_not_present(tmp_path: Path) -> None:
    src = RaplSource(tmp_path)
    assert src.available is False
    assert src.reason == "rapl: not present (no /sys/class/powercap)"
    assert src.devices() == []


def test_powercap_without_rapl_zones_says_so(tmp_path: Path) -> None:
    (tmp_path / "sys/class/powercap/dtpm").mkdir(parents=True)
    src = RaplSource(tmp_path)
    assert src.available is False
    assert src.reason is not None and "no intel-rapl or amd-rapl zone" in src.reason


def test_only_top_level_zones_are_read(tmp_path: Path) -> None:
    write_zone(tmp_path, "intel-rapl:0", "package-0", 1_000_000)
    write_zone(tmp_path, "intel-rapl:0:0", "core", 500_000)
    write_zone(tmp_path, "intel-rapl:1", "package-1", 2_000_000)
    write_zone(tmp_path, "amd-rapl:0", "package-0", 3_000_000)
    assert [p.name for p in find_zones(tmp_path)] == ["amd-rapl:0", "intel-rapl:0", "intel-rapl:1"]


def test_energy_is_the_sum_of_packages_since_the_source_opened(tmp_path: Path) -> None:
    z0 = write_zone(tmp_path, "intel-rapl:0", "package-0", 10_000_000)
    z1 = write_zone(tmp_path, "intel-rapl:1", "package-1", 20_000_000)
    sub = write_zone(tmp_path, "intel-rapl:0:0", "core", 1)
    src = RaplSource(tmp_path)
    assert src.available and src.reason is None
    assert [d.key for d in src.devices()] == ["cpu"]
    first = src.read(100.0)
    assert [(r.metric, r.value, r.source, r.device.key) for r in first] == [("energy_j", 0.0, "rapl", "cpu")]
    set_energy(z0, 10_000_000 + 45_000_000)  # +45 J
    set_energy(z1, 20_000_000 + 5_000_000)  # +5 J
    set_energy(sub, 999_999_999)  # a sub-zone: inside package-0, never added
    assert src.read(101.0)[0].value == pytest.approx(50.0)


def test_psys_overlaps_the_packages_and_is_left_out(tmp_path: Path) -> None:
    pkg = write_zone(tmp_path, "intel-rapl:0", "package-0", 0)
    psys = write_zone(tmp_path, "intel-rapl:1", "psys", 0)
    src = RaplSource(tmp_path)
    src.read(0.0)
    set_energy(pkg, 7_000_000)
    set_energy(psys, 30_000_000)
    assert src.read(1.0)[0].value == pytest.approx(7.0)


def test_a_counter_wrapping_at_max_energy_range_is_unwrapped(tmp_path: Path) -> None:
    zone = write_zone(tmp_path, "intel-rapl:0", "package-0", 262_000_000_000, max_uj=262_143_328_850)
    src = RaplSource(tmp_path)
    src.read(0.0)
    set_energy(zone, 100_000_000)  # wrapped: 143_328_850 to the top, then 100_000_000 more
    assert src.read(1.0)[0].value == pytest.approx((143_328_850 + 100_000_000) / 1e6)
    set_energy(zone, 160_000_000)
    assert src.read(2.0)[0].value == pytest.approx((143_328_850 + 160_000_000) / 1e6)


def test_a_decrease_without_a_known_range_is_an_error_not_a_negative_energy() -> None:
    assert unwrap_step(10, 25, None) == 15
    with pytest.raises(SourceError, match="max_energy_range_uj is unknown"):
        unwrap_step(25, 10, None)


@pytest.fixture
def shared_tree() -> Iterator[Path]:
    """A tree other users can traverse (pytest's tmp dirs are private to root)."""
    d = Path(tempfile.mkdtemp(prefix="gpuledger-rapl-", dir="/tmp"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d)


def as_unprivileged_user(fn: Callable[[], dict[str, object]]) -> dict[str, object]:
    """Run ``fn`` with the permissions of an ordinary user: in-process when we are one, else in a
    forked child that drops to ``nobody`` (root reads any file, so EACCES needs a real other user)."""
    if os.geteuid() != 0:
        return fn()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: drop privileges, run, report, exit without running pytest's teardown
        try:
            os.close(r)
            os.setgid(65534)
            os.setuid(65534)
            os.write(w, json.dumps(fn()).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    assert data, "the unprivileged child reported nothing"
    result: dict[str, object] = json.loads(data)
    return result


def test_an_unreadable_zone_gives_a_needs_root_reason_not_zero(shared_tree: Path) -> None:
    write_zone(shared_tree, "intel-rapl:0", "package-0", 5_000_000)
    locked = write_zone(shared_tree, "intel-rapl:1", "package-1", 5_000_000)
    (locked / "energy_uj").chmod(0o400 if os.geteuid() == 0 else 0o000)

    def probe() -> dict[str, object]:
        src = RaplSource(shared_tree)
        return {"available": src.available, "reason": src.reason, "devices": [d.key for d in src.devices()]}

    got = as_unprivileged_user(probe)
    assert got["available"] is False and got["devices"] == []
    reason = str(got["reason"])
    assert reason.startswith("needs root: /sys/class/powercap/intel-rapl:1/energy_uj")
    assert "intel-rapl:0" not in reason


def test_a_zone_vanishing_mid_window_drops_rapl_but_sampling_goes_on(tmp_path: Path) -> None:
    zone = write_zone(tmp_path, "intel-rapl:0", "package-0", 0)
    rapl = RaplSource(tmp_path)
    sampler = BackgroundSampler([rapl], interval_s=0.1, t0=0.0)
    sampler.poll(0.0)
    set_energy(zone, 2_000_000)
    sampler.poll(0.1)
    shutil.rmtree(zone)
    sampler.poll(0.2)
    sampler.poll(0.3)
    assert [s.value for s in sampler.samples()] == [0.0, pytest.approx(2.0)]
    assert "rapl failed at t=0.20 s: rapl: cannot read intel-rapl:0 (package-0)" in sampler.failures()["rapl"]
    (summary,) = sampler.summaries(window_end=0.3)
    assert summary.valid is False and "rapl failed" in (summary.validity_reason or "")
    assert [s for s in sampler.statuses() if s.name == "rapl"][0].available is False
