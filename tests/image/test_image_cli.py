"""``gpuledger bench --task image`` and ``gpuledger run --task image`` on the command line: the issue's
"done when" (a tiny-sd run with seconds per image and per-stage times, priced per 1,000 images by
``cost --profile cpu-cloud``), ComfyUI and OpenAI-images runs against loopback servers, and the one-line
refusals with their exit codes."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from comfy_replay import Knobs, ReplayServer

from gpuledger.cli.main import main
from gpuledger.store.engine import data_dir

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "captures" / "comfyui"


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    def run(*args: str) -> tuple[int, str, str]:
        code = main(list(args))
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


@pytest.fixture
def comfy() -> Iterator[str]:
    """A replay ComfyUI server on its own thread and event loop (the CLI runs its own)."""
    ready = threading.Event()
    box: dict[str, Any] = {}

    def serve() -> None:
        async def main() -> None:
            async with ReplayServer(Knobs()) as srv:
                box["url"] = srv.url
                box["stop"] = asyncio.Event()
                box["loop"] = asyncio.get_running_loop()
                ready.set()
                await box["stop"].wait()

        asyncio.run(main())

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    assert ready.wait(10)
    yield str(box["url"])
    box["loop"].call_soon_threadsafe(box["stop"].set)
    t.join(10)


@pytest.mark.slow
def test_done_when_tiny_sd_is_stored_and_priced_per_thousand_images(
    cli: Callable[..., tuple[int, str, str]],
) -> None:
    code, out, err = cli(
        "bench",
        "--task",
        "image",
        "--engine",
        "diffusers",
        "--model",
        "dummy:tiny-sd",
        "--num-images",
        "4",
        "--steps",
        "4",
        "--height",
        "64",
        "--width",
        "64",
        "--json",
    )
    assert code == 0, err
    run = json.loads(out)
    s = run["summary"]
    assert s["kind"] == "image_generation" and s["images_total"] == 4
    assert s["seconds_per_image"]["p50"] > 0 and s["seconds_per_image"]["n"] == 4
    for stage in ("text_encode_s", "denoise_s", "decode_s"):
        assert s["stage_times"][stage]["n"] == 4
    import torch

    if not torch.cuda.is_available():  # --device auto fell back to the CPU: the run says so, as others do
        assert any(w.startswith("running on the CPU: ") for w in run["server"]["warnings"]), run["server"]
    # tiny-sd's PNDM scheduler runs one step more than asked: the steps priced are those that ran, and said
    assert s["steps_per_image"] == 5 and s["steps_total"] == 20 and s["step_counts"] == {"5": 4}
    assert s["notes"] == ["PNDMScheduler ran 5 denoising steps for num_inference_steps=4: steps are counted "
                          "as the pipeline ran them"]
    code, out, err = cli("cost", run["id"], "--profile", "cpu-cloud", "--json")
    assert code == 0, err
    cost = json.loads(out)
    assert cost["usd_per_1k_images"] > 0 and cost["throughput"]["images_per_s"] > 0


def test_a_comfyui_workflow_on_the_command_line(cli: Callable[..., tuple[int, str, str]], comfy: str) -> None:
    code, out, err = cli(
        "bench",
        "--task",
        "image",
        "--engine",
        "comfyui",
        "--base-url",
        comfy,
        "--workflow",
        str(CAPTURES / "api_flux_schnell.json"),
        "--steps",
        "3",
        "--height",
        "256",
        "--width",
        "256",
        "--num-images",
        "3",
        "--concurrency",
        "2",
        "--set",
        "31.cfg=1.5",
        "--json",
    )
    assert code == 0, err
    run = json.loads(out)
    assert run["summary"]["images_total"] == 3 and run["summary"]["resolution"] == "256×256"
    assert run["config"]["node_overrides"] == [{"node": "31", "input": "cfg", "value": 1.5}]
    assert "31 KSampler.cfg = 1.5" in run["server"]["comfyui"]["settings_applied"]
    code, out, _ = cli(
        "bench",
        "--task",
        "image",
        "--engine",
        "comfyui",
        "--base-url",
        comfy,
        "--workflow",
        str(CAPTURES / "api_flux_schnell.json"),
        "--steps",
        "3",
        "--num-images",
        "2",
    )
    assert code == 0 and "images/min" in out and "run id:" in out
    # `runs` lists an image run by what it made: images per second, not "no output tokens"
    code, out, _ = cli("runs", "--json")
    listed = json.loads(out)
    assert code == 0 and len(listed) == 2
    for row in listed:
        assert row["rate"]["unit"] == "images/s" and row["rate"]["value"] > 0, row["rate"]
        assert row["output_tokens_per_s"]["value"] is None and row["output_tokens_per_s"]["reason"]


def test_a_ui_format_workflow_is_exit_2_in_one_line(
    cli: Callable[..., tuple[int, str, str]], comfy: str
) -> None:
    code, _, err = cli(
        "bench",
        "--task",
        "image",
        "--engine",
        "comfyui",
        "--base-url",
        comfy,
        "--workflow",
        str(CAPTURES / "ui_image_sdxl_simple.json"),
    )
    assert code == 2 and "Export (API)" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("args", "code", "text"),
    [
        (["--engine", "diffusers", "--dataset", "random"], 2, "--dataset is for text generation"),
        (["--engine", "comfyui"], 2, "--engine comfyui needs --workflow"),
        (["--engine", "diffusers", "--concurrency", "2"], 2, "give --batch-size"),
        (
            ["--engine", "openai", "--num-images", "2"],
            2,
            "--task image runs diffusers, comfyui or openai-images",
        ),
        (["--engine", "openai-images", "--base-url", "http://127.0.0.1:9"], 6, "cannot connect"),
        (["--engine", "diffusers", "--height", "64"], 2, "give --height and --width together"),
    ],
)
def test_refusals_are_one_line_with_their_exit_code(
    cli: Callable[..., tuple[int, str, str]], args: list[str], code: int, text: str
) -> None:
    got, _, err = cli("bench", "--task", "image", *args)
    assert got == code and text in err and "Traceback" not in err


def test_a_pipeline_that_cannot_fit_is_exit_8(cli: Callable[..., tuple[int, str, str]]) -> None:
    if psutil.virtual_memory().available > 80 * 1024**3:
        pytest.skip("this machine has the RAM for flux-dev in fp32")
    code, _, err = cli(
        "bench", "--task", "image", "--model", "dummy:flux-dev", "--device", "cpu", "--dtype", "fp32"
    )
    assert code == 8 and "does not fit" in err


@pytest.mark.slow
def test_run_task_image_is_doctor_bench_cost_report(
    cli: Callable[..., tuple[int, str, str]], tmp_path: Path
) -> None:
    html = tmp_path / "r.html"
    code, out, err = cli("run", "--task", "image", "--profile", "cpu-cloud", "--html", str(html), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["task"] == "image" and doc["model"] == "dummy:tiny-sd" and doc["status"] == "complete"
    assert doc["metrics"]["images"] == 8 and doc["metrics"]["seconds_per_image_p50"] > 0
    assert doc["cost"]["usd_per_1k_images"] > 0 and doc["doctor"] is not None
    assert html.is_file() and '<img src="data:image/png;base64,' in html.read_text()


@pytest.mark.slow
def test_run_task_image_without_html_writes_the_report_into_the_reports_folder_it_creates(
    cli: Callable[..., tuple[int, str, str]],
) -> None:
    assert not (data_dir() / "reports").exists()  # a fresh data dir: the folder is run's own to create
    code, out, err = cli("run", "--task", "image", "--profile", "cpu-cloud", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["missing"] == []
    assert doc["report_html"] == str(data_dir().resolve() / "reports" / f"run-{doc['run_id']}.html")
    assert '<img src="data:image/png;base64,' in Path(doc["report_html"]).read_text()


@pytest.mark.slow
def test_run_task_image_whose_every_image_failed_is_exit_6_pointing_at_show(
    cli: Callable[..., tuple[int, str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    import diffusers

    call = diffusers.StableDiffusionPipeline.__call__
    calls: list[int] = []

    def device_lost_after_the_warmup(self: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            return call(self, **kwargs)
        raise RuntimeError("CUDA error: device lost")

    monkeypatch.setattr(diffusers.StableDiffusionPipeline, "__call__", device_lost_after_the_warmup)
    code, _, err = cli("run", "--task", "image", "--model", "dummy:tiny-sd", "--profile", "cpu-cloud")
    assert code == 6 and "every image request failed" in err and "Traceback" not in err
    run_id = err.split("run ", 1)[1].split(":", 1)[0]
    assert f"gpuledger show {run_id}" in err


def test_bench_like_repeats_an_image_runs_workload(
    cli: Callable[..., tuple[int, str, str]], comfy: str
) -> None:
    code, out, err = cli(
        "bench",
        "--task",
        "image",
        "--engine",
        "comfyui",
        "--base-url",
        comfy,
        "--workflow",
        str(CAPTURES / "api_image_sdxl_simple.json"),
        "--steps",
        "3",
        "--height",
        "128",
        "--width",
        "128",
        "--num-images",
        "2",
        "--json",
    )
    assert code == 0, err
    first = json.loads(out)
    code, out, err = cli("bench", "--like", first["id"], "--base-url", comfy, "--num-images", "3", "--json")
    assert code == 0, err
    again = json.loads(out)
    assert again["engine"] == "comfyui" and again["config"]["like"]["overridden"] == ["num_images"]
    assert (again["config"]["steps"], again["config"]["height"], again["config"]["workflow_sha256"]) == (
        3,
        128,
        first["config"]["workflow_sha256"],
    )
    assert again["summary"]["images_total"] == 3
