"""Image runs through cost, compare, estimate and report: USD per 1,000 images from the unit's declaration, a
comparison that warns when the steps differ, and the report's contact sheet of the thumbnails the run kept
(off with --no-images). The runs hold what the ComfyUI engine measured against the replay server."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from comfy_replay import Knobs, ReplayServer
from typer.testing import CliRunner

from gpuledger.cli.main import app
from gpuledger.engines.image.base import ImageResult, request_for
from gpuledger.engines.image.comfyui import ComfyUIEngine
from gpuledger.engines.image.workflow import load_workflow
from gpuledger.kinds.image.spec import ImageSpec
from gpuledger.records import RunInfo
from gpuledger.store import open_store

SDXL = (
    Path(__file__).resolve().parents[1] / "fixtures" / "captures" / "comfyui" / "api_image_sdxl_simple.json"
)


def _measure(steps: int, n: int = 4) -> tuple[ImageSpec, list[ImageResult]]:
    async def go() -> tuple[ImageSpec, list[ImageResult]]:
        async with ReplayServer(Knobs()) as srv:
            spec = ImageSpec(
                engine="comfyui",
                base_url=srv.url,
                workflow=str(SDXL),
                steps=steps,
                height=128,
                width=128,
                batch_size=1,
                num_images=n,
                concurrency=1,
                seed=1,
                model="sdxl-base",
            )
            engine = ComfyUIEngine(spec, load_workflow(SDXL))
            await engine.open(1)
            out = [
                await engine.generate_image(
                    request_for(
                        i,
                        seed=1,
                        steps=steps,
                        height=128,
                        width=128,
                        batch_size=1,
                        guidance=None,
                        keep_thumbnail=i < 2,
                    )
                )
                for i in range(n)
            ]
            await engine.close()
            return spec, out

    return asyncio.run(go())


def _store_run(url: str, steps: int, label: str) -> str:
    spec, results = _measure(steps)
    t0 = results[0].t_send
    records = [r.to_record(t0) for r in results]
    with open_store(url) as store:
        run_id = store.create_run(
            RunInfo(
                id="",
                label=label,
                engine="comfyui",
                model="sdxl-base",
                config=spec,
                workload=spec.workload_record(),
                started_at=datetime.now(UTC),
                environment={"cpu": {"logical_cpus": 2}},
            )
        )
        store.add_requests(run_id, records)
        cpu = {
            "device": "cpu",
            "vendor": "cpu",
            "name": "AMD EPYC",
            "mean_power_w": None,
            "energy_j": None,
            "peak_util_ratio": 1.0,
            "sources": ["psutil"],
            "valid": True,
        }
        store.update_run(
            run_id,
            status="complete",
            summary=spec.summarize(records),
            telemetry_summary=[cpu],
            duration_s=records[-1].t_end,
        )
    return run_id


def _cli(*args: str) -> dict[str, object]:
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    doc: dict[str, object] = json.loads(result.stdout)
    return doc


@pytest.fixture
def url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    u = f"sqlite:///{tmp_path / 's.sqlite'}"
    monkeypatch.setenv("GPULEDGER_DB", u)
    return u


def test_an_image_run_is_priced_per_thousand_images(url: str) -> None:
    run = _store_run(url, 4, "a")
    with open_store(url) as store:
        summary = store.get_run(run).summary
    assert summary is not None and summary.kind == "image_generation"
    per_s = summary.rate("image")
    assert per_s is not None and per_s > 0
    cost = _cli("cost", run, "--profile", "cpu-cloud")
    hourly = cost["usd_per_hour"]
    assert isinstance(hourly, float)
    assert cost["usd_per_1k_images"] == pytest.approx(hourly / (per_s * 3600) * 1000)
    assert "usd_per_1m_denoising_steps" in cost
    assert cost["throughput"]["images_per_s"] == pytest.approx(per_s)  # type: ignore[index]


def test_comparing_image_runs_warns_when_the_steps_differ(url: str) -> None:
    a = _store_run(url, 4, "four steps")
    b = _store_run(url, 8, "eight steps")
    comp = _cli("compare", a, b, "--profile", "cpu-cloud")
    assert comp["basis"] == "image"
    pair = comp["pairs"][0]  # type: ignore[index]
    assert "different workloads: steps = 4 vs 8" in pair["warnings"]


def test_the_report_shows_a_contact_sheet_unless_told_not_to(url: str, tmp_path: Path) -> None:
    run = _store_run(url, 4, "a")
    html, md = tmp_path / "r.html", tmp_path / "r.md"
    result = CliRunner().invoke(
        app, ["report", run, "--profile", "cpu-cloud", "--html", str(html), "--md", str(md)]
    )
    assert result.exit_code == 0, result.output
    page = html.read_text()
    assert page.count('<img src="data:image/png;base64,') == 2
    assert "USD per 1,000 images" in page and "Seconds per request, by stage" in page
    assert "KSampler" in page  # the ComfyUI node classes
    assert "2 thumbnail(s) of the generated images in the HTML report" in md.read_text()
    bare = tmp_path / "bare.html"
    result = CliRunner().invoke(
        app, ["report", run, "--profile", "cpu-cloud", "--html", str(bare), "--no-images"]
    )
    assert result.exit_code == 0, result.output
    text = bare.read_text()
    assert '<img src="data:image/png' not in text and "thumbnails left out (--no-images)" in text


def test_estimate_scales_an_image_run_as_compute_bound(url: str) -> None:
    run = _store_run(url, 4, "a")
    gpu = {
        "device": "nvidia:0",
        "vendor": "nvidia",
        "name": "NVIDIA H200",
        "mean_power_w": 500.0,
        "energy_j": 1000.0,
        "peak_util_ratio": 1.0,
        "mean_util_ratio": 0.9,
        "sources": ["nvml"],
        "valid": True,
    }
    with open_store(url) as store:
        info = store.get_run(run)
        store.update_run(
            run, telemetry_summary=[gpu], config=info.config.model_copy(update={"dtype": "bf16"})
        )
        measured = store.get_run(run).summary
    assert measured is not None
    doc = _cli("estimate", run, "--gpu", "b200")
    roof = doc["roofline"]
    assert roof["prefill_share"] == 1.0  # type: ignore[index]
    # compute-bound: the throughput scales by peak dense FLOP/s (B200 2250 / H200 989 TFLOPS)
    assert doc["estimated_throughput"]["images_per_s"] == pytest.approx(  # type: ignore[index]
        (measured.rate("image") or 0) * 2250 / 989, rel=1e-6
    )
    assert "usd_per_1k_images" in json.dumps(doc)
