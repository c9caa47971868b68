"""The setup-labour ledger (gpuledger.cost.pricing.labour): setup_labour_hours is the time from a machine's
first doctor run with an error to the first run with no error after it, and the distinct problems met on the
way (seed §2.3, §7.3 step 4); resolve_setup_hours is what the cost model prices from it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpuledger.cost.pricing.labour import resolve_setup_hours, setup_labour_hours
from gpuledger.cost.pricing.profile import CostProfile
from gpuledger.errors import InvalidInputError
from gpuledger.records import DoctorRunRecord, RunInfo

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


def run(hours: float, errors: int, *ids: str, machine: str = "rig", warnings: int = 0) -> DoctorRunRecord:
    findings = [
        {"id": i, "layer": "kernel", "severity": "error" if n < errors else "warning", "title": i}
        for n, i in enumerate(ids)
    ]
    findings.append({"id": "gpu.detected", "layer": "hardware", "severity": "ok", "title": "ok"})
    return DoctorRunRecord(
        machine=machine,
        created_at=T0 + timedelta(hours=hours),
        errors=errors,
        warnings=warnings,
        findings=findings,
    )


def test_hours_from_first_error_to_first_all_clear() -> None:
    ledger = setup_labour_hours(
        [
            run(0, 1, "nvidia.nouveau_loaded"),
            run(2, 1, "nvidia.secure_boot_blocks_module"),
            run(5.5, 0),
            run(9, 0),
        ]
    )
    rig = ledger["rig"]
    assert rig.hours == 5.5
    assert rig.problems == ["nvidia.nouveau_loaded", "nvidia.secure_boot_blocks_module"]
    assert rig.resolved and rig.runs == 4 and rig.open_hours == 0


def test_clean_runs_before_the_first_error_do_not_count() -> None:
    rig = setup_labour_hours([run(0, 0), run(24, 1, "amd.gfx_unsupported"), run(26, 0)])["rig"]
    assert rig.hours == 2.0 and rig.episodes[0].start == T0 + timedelta(hours=24)


def test_warnings_alone_do_not_keep_an_episode_open() -> None:
    rig = setup_labour_hours(
        [run(0, 1, "amd.kfd_permission"), run(1, 0, "container.nvidia_runtime_missing", warnings=1)]
    )["rig"]
    assert rig.hours == 1.0 and rig.resolved


def test_a_later_breakage_is_a_second_episode_and_adds_up() -> None:
    rig = setup_labour_hours(
        [
            run(0, 1, "nvidia.driver_not_installed"),
            run(3, 0),
            run(100, 1, "nvidia.driver_library_mismatch"),
            run(100.5, 0),
        ]
    )["rig"]
    assert [e.hours for e in rig.episodes] == [3.0, 0.5]
    assert rig.hours == 3.5
    assert rig.problems == ["nvidia.driver_not_installed", "nvidia.driver_library_mismatch"]


def test_an_open_episode_is_reported_apart() -> None:
    rig = setup_labour_hours([run(0, 1, "amd.gfx_unsupported"), run(30, 1, "amd.gfx_unsupported")])["rig"]
    assert rig.hours == 0.0 and not rig.resolved and rig.open_hours == 30.0
    assert rig.document().episodes[0].end is None


def test_machines_are_separate_and_input_order_does_not_matter() -> None:
    records = [
        run(4, 0, machine="a"),
        run(0, 1, "x.y", machine="a"),
        run(1, 1, "p.q", machine="b"),
        run(2, 0, machine="b"),
    ]
    ledger = setup_labour_hours(records)
    assert (ledger["a"].hours, ledger["b"].hours) == (4.0, 1.0)
    assert setup_labour_hours(reversed(records))["a"].document() == ledger["a"].document()


def test_naive_timestamps_are_taken_as_utc() -> None:
    naive = DoctorRunRecord(machine="rig", created_at=datetime(2026, 11, 2, 10, 0), errors=0, warnings=0)
    assert setup_labour_hours([run(0, 1, "a.b"), naive])["rig"].hours == 1.0


# resolve_setup_hours: what the cost model prices as setup labour, and where it says the hours came from.
def test_the_run_machine_picks_its_ledger_entry() -> None:
    records = [run(0, 1, "a.b", machine="a"), run(2, 0, machine="a"), run(0, 1, "c.d", machine="b"),
               run(5, 0, machine="b")]
    profile = CostProfile(rental_per_gpu_hour=2.0, labour_rate_per_hour=100, from_doctor_history=True)
    hours, source = resolve_setup_hours(profile, records, RunInfo(id="r1", environment={"machine": "b"}))
    assert hours == 5.0
    assert source == (
        "doctor history: machine b, first error to first all-clear "
        "(gpuledger.cost.pricing.labour.setup_labour_hours)"
    )


def test_an_open_episode_is_named_in_the_source_and_not_priced() -> None:
    records = [run(0, 1, "a.b"), run(1, 0), run(10, 1, "c.d"), run(13.5, 1, "c.d")]
    profile = CostProfile(rental_per_gpu_hour=2.0, labour_rate_per_hour=100, from_doctor_history=True)
    hours, source = resolve_setup_hours(profile, records, RunInfo(id="r1"))
    assert hours == 1.0
    assert source.endswith("; a setup episode is still open (3.5 h so far, not counted)")


def test_without_doctor_history_the_profile_hours_are_used() -> None:
    given = CostProfile(rental_per_gpu_hour=2.0, setup_hours=8)
    assert resolve_setup_hours(given, None, RunInfo(id="r1"))[0] == 8
    none = CostProfile(rental_per_gpu_hour=2.0)
    assert resolve_setup_hours(none, None, RunInfo(id="r1")) == (
        0.0, "profile: no setup_hours given (setup labour not priced)"
    )
    asked = CostProfile(rental_per_gpu_hour=2.0, from_doctor_history=True)
    with pytest.raises(InvalidInputError, match="the doctor history was not provided"):
        resolve_setup_hours(asked, None, RunInfo(id="r1"))
