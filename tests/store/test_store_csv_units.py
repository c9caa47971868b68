"""``gpuledger export RUN --format csv`` of a training or an image run carries its work in its own units
(issue #33, item 8): a column per unit of the run's summary with each row's count — training tokens, steps,
samples; images, denoise steps, requests — which add up to the run's totals, and the run's headline rate.
The runs are stored the way the bench stores them: their records, and the summary their spec makes of them."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime

import pytest

from gpuledger.cli.main import main
from gpuledger.kinds.image.spec import ImageSpec
from gpuledger.kinds.image.summary import TIMING_KEY, ImageTiming
from gpuledger.kinds.train.spec import TrainSpec
from gpuledger.kinds.train.summary import TrainStep
from gpuledger.records import BenchSpec, RequestRecord, RunInfo
from gpuledger.store import open_store


def store(engine: str, config: BenchSpec, records: list[RequestRecord]) -> str:
    summary = config.summarize(records)
    assert summary is not None
    with open_store(None) as st:
        run_id = st.create_run(RunInfo(id="", label=engine, engine=engine, model="m", config=config,
                                       started_at=datetime(2026, 1, 1, tzinfo=UTC)))
        st.add_requests(run_id, records)
        st.update_run(run_id, status="complete", summary=summary)
    return run_id


def export_csv(capsys: pytest.CaptureFixture[str], run_id: str) -> list[dict[str, str]]:
    assert main(["export", run_id, "--format", "csv"]) == 0
    return list(csv.DictReader(io.StringIO(capsys.readouterr().out)))


def test_a_training_runs_csv_has_its_training_tokens_steps_and_rate(
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = TrainSpec.model_validate({"engine": "torch-train", "model": {"spec": "m", "name": "m"},
                                       "device": "cpu", "batch_size": 2, "seq_len": 64, "steps": 4})
    records = []
    for i in range(4):
        step = TrainStep(step=i, forward_s=0.3, backward_s=0.6, optimizer_s=0.1, step_s=1.0, loss=2.0,
                         nonfinite=False, tokens=128, samples=2, micro_batches=1)
        records.append(RequestRecord(index=i, t_send=i * 1.25, t_end=i * 1.25 + 1.0, stage="train",
                                     server_timings={"train": step.model_dump(mode="json")}))
    rows = export_csv(capsys, store("torch-train", config, records))
    assert len(rows) == 4
    assert {k: rows[0][k] for k in ("training_tokens", "steps", "samples")} == {
        "training_tokens": "128", "steps": "1", "samples": "2"}
    assert sum(int(r["training_tokens"]) for r in rows) == 512
    rate = 512 / 4.75  # four steps over the window from the first start to the last end
    assert [float(r["run_training_tokens_per_s"]) for r in rows] == [pytest.approx(rate)] * 4


def test_an_image_runs_csv_has_its_images_and_rate(capsys: pytest.CaptureFixture[str]) -> None:
    config = ImageSpec(engine="diffusers", model="dummy:tiny-sd", steps=4, batch_size=2, num_images=6)
    records = []
    for i in range(3):
        timing = ImageTiming(engine="diffusers", images=2, steps=4, denoise_s=0.8)
        records.append(RequestRecord(index=i, t_send=float(i), t_end=i + 1.0, stage="c=1",
                                     server_timings={TIMING_KEY: timing.model_dump(mode="json")}))
    rows = export_csv(capsys, store("diffusers", config, records))
    assert [r["images"] for r in rows] == ["2", "2", "2"]
    assert [r["denoising_steps"] for r in rows] == ["8", "8", "8"]  # 4 steps for each of 2 images
    assert [r["requests"] for r in rows] == ["1", "1", "1"]
    assert [float(r["run_images_per_s"]) for r in rows] == [pytest.approx(6 / 3.0)] * 3
