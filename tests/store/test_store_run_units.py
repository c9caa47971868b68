"""A run is stored and listed in its kind's unit (issue 27): an image run made by ``gpuledger bench --task
image`` (the tiny diffusers pipeline) is stored with the unit ``image`` and listed in images — ``runs`` (its
images and images/s), ``runs --json`` and ``show --json`` (``kind``, ``rate``, ``work``), ``export`` as JSON
and as CSV; a run stored before, with the unit ``token`` whatever it measured, reads in its kind's unit;
a text run keeps ``token``."""

from __future__ import annotations

import csv
import io
import json
import os
from typing import Any

import pytest
import sqlalchemy as sa

from gpuledger.cli.main import main
from gpuledger.store import open_store

pytest.importorskip("diffusers", reason="the tiny pipeline needs diffusers (pip install '.[image]')")


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    code = main(list(args))
    out = capsys.readouterr()
    assert code == 0, out.err
    return out.out


@pytest.fixture
def image_run(capsys: pytest.CaptureFixture[str]) -> str:
    out = _cli(
        capsys, "bench", "--task", "image", "--engine", "diffusers", "--model", "dummy:tiny-sd",
        "--steps", "2", "--height", "64", "--width", "64", "--num-images", "3", "--no-telemetry", "--json",
    )
    run_id: str = json.loads(out)["id"]
    return run_id


def _entry(capsys: pytest.CaptureFixture[str], run_id: str) -> dict[str, Any]:
    entries = json.loads(_cli(capsys, "runs", "--json"))
    return next(e for e in entries if e["id"] == run_id)


@pytest.mark.slow
def test_an_image_run_is_stored_and_listed_in_images(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, image_run: str
) -> None:
    with open_store(None) as store:
        assert store.get_run(image_run).unit == "image"

    entry = _entry(capsys, image_run)
    assert entry["unit"] == "image" and entry["kind"] == "image"
    assert entry["rate"]["unit"] == "images/s" and entry["rate"]["value"] > 0
    head = entry["work"][0]
    assert (head["unit"], head["plural"], head["count"]) == ("image", "images", 3)
    assert head["rate_key"] == "images_per_s"
    assert head["per_s"] == entry["rate"]["value"]
    assert {w["unit"] for w in entry["work"]} == {"image", "request", "denoise_step"}
    assert entry["output_tokens_per_s"]["value"] is None  # an image run has no output tokens

    shown = json.loads(_cli(capsys, "show", image_run, "--json"))
    assert shown["unit"] == "image" and shown["kind"] == "image"
    assert shown["rate"] == entry["rate"] and shown["work"] == entry["work"]

    monkeypatch.setenv("COLUMNS", "200")
    table = _cli(capsys, "runs")
    row = next(line for line in table.splitlines() if image_run in line)
    assert "3 requests" in row and "3 images" in row and "images/s" in row

    exported = json.loads(_cli(capsys, "export", image_run))
    assert exported["run"]["unit"] == "image"
    rows = list(csv.DictReader(io.StringIO(_cli(capsys, "export", image_run, "--format", "csv"))))
    assert sum(int(r["images"]) for r in rows) == 3
    assert {float(r["run_images_per_s"]) for r in rows} == {entry["rate"]["value"]}


@pytest.mark.slow
def test_an_image_run_stored_with_the_unit_token_reads_as_an_image_run(
    capsys: pytest.CaptureFixture[str], image_run: str
) -> None:
    # What every run stored before the workload kinds holds, an image run's too.
    engine = sa.create_engine(os.environ["GPULEDGER_DB"])
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE runs SET unit = 'token' WHERE id = :id"), {"id": image_run})
    engine.dispose()

    with open_store(None) as store:
        assert store.get_run(image_run).unit == "image"
    assert _entry(capsys, image_run)["unit"] == "image"
    assert json.loads(_cli(capsys, "export", image_run))["run"]["unit"] == "image"
