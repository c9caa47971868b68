"""An image run is judged by the image kind's own rules (kinds/image/checks.py): its figures are seconds per
image over requests, so its checks speak of seconds per image and requests, never of TTFT, E2E or tokens,
and the rules that cannot apply to an image load say why they are not checked."""

from __future__ import annotations

import asyncio
from pathlib import Path

from comfy_replay import Knobs, ReplayServer

from gpuledger.bench.runner import run_bench_async
from gpuledger.bench.validity import rules_for, verdict
from gpuledger.kinds.image import checks as image_checks
from gpuledger.kinds.image.options import image_spec
from gpuledger.records import RunInfo
from gpuledger.records.validity import Verdict
from gpuledger.store import open_store

SDXL = (
    Path(__file__).resolve().parents[1] / "fixtures" / "captures" / "comfyui" / "api_image_sdxl_simple.json"
)
TEXT_WORDS = ("TTFT", "TPOT", "E2E", "token", "tok/s")


def _run(tmp_path: Path, **values: object) -> tuple[RunInfo, Verdict]:
    """A ComfyUI workflow run on the replay server through the bench runner, and its verdict computed again
    from the stored requests."""

    async def go() -> tuple[RunInfo, Verdict]:
        async with ReplayServer(Knobs()) as srv:
            spec = image_spec("comfyui", base_url=srv.url, workflow=SDXL, telemetry=False, **values)  # type: ignore[arg-type]
            with open_store(f"sqlite:///{tmp_path / 's.sqlite'}") as store:
                info = await run_bench_async(spec, store)
                return info, verdict(info, store.get_requests(info.id))

    return asyncio.run(go())


def test_an_image_run_is_judged_by_the_image_rules_found_through_the_registry() -> None:
    assert rules_for("image_generation") is image_checks.RULES


def test_an_image_runs_checks_speak_of_seconds_per_image_and_never_of_tokens(tmp_path: Path) -> None:
    info, v = _run(tmp_path, steps=2, height=64, width=64, num_images=6, concurrency=1, warmup=0, seed=3)
    assert info.summary is not None and info.summary.verdict == v
    checks = {c.name: c for c in v.checks}
    skipped = {n.name: n.why for n in v.not_checked}
    assert sorted([*checks, *skipped]) == sorted([
        "client_bound", "send_schedule", "samples", "window", "warmup", "steady_state", "noise",
        "cpu_contention", "prefix_cache", "token_source", "energy", "server_queue", "errors", "finished",
    ])
    # The rules that judge the images ran: the window is judged although no request had a TTFT.
    assert {"samples", "window", "warmup", "steady_state", "noise", "errors", "finished"} <= set(checks)
    assert "seconds per image" in checks["warmup"].rule and "seconds per image" in checks["warmup"].why
    assert "seconds-per-image" in checks["samples"].rule and checks["samples"].figure == 6
    assert "seconds per image" in checks["steady_state"].rule and "seconds per image" in checks["noise"].rule
    assert checks["window"].unit == "share of the window" and 0 < checks["window"].figure <= 1
    assert checks["errors"].why == "all 6 requests succeeded"
    assert "closed-loop" in skipped["send_schedule"] and "counted by the engine" in skipped["token_source"]
    assert "prompt-prefix cache" in skipped["prefix_cache"] and "queue wait" in skipped["server_queue"]
    for text in [t for c in v.checks for t in (c.rule, c.why, c.unit)] + list(skipped.values()):
        assert not any(word in text for word in TEXT_WORDS), text


def test_an_image_run_with_a_warm_up_passes_the_warmup_check_in_requests(tmp_path: Path) -> None:
    _, v = _run(tmp_path, steps=2, height=64, width=64, num_images=4, concurrency=2, warmup=1, seed=4)
    warm = next(c for c in v.checks if c.name == "warmup")
    assert warm.status == "pass" and warm.why == "1 warm-up request sent before the window, not measured"
    window = next(c for c in v.checks if c.name == "window")
    assert "2 request slots" in window.why
