"""The image kind's ``report`` facet (``REPORT``): what a report shows of image-generation runs.

Its section: seconds per image, images per minute, denoising steps per second, the time of each stage,
ComfyUI's node classes, and a contact sheet of the thumbnails the run kept (downscaled PNGs, embedded as
``data:`` URIs; ``--no-images`` leaves them out). Its columns of the overview (requests, images, images per
second and per minute) and of how measured (the engine, what one image was); the answer's key facts are the
summary's (``ImageSummary.key_figures``: images/s, s/image percentiles, denoising it/s).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpuledger.kinds.image.summary import ImageSummary
from gpuledger.report import fmt
from gpuledger.report.kinds import KindReport, ReportOptions, counts_cells
from gpuledger.report.model import Section, Table, Thumb
from gpuledger.report.rundata import RunData

ITEMS = "requests"

DEFINITIONS = (
    (
        "seconds per image",
        "a request's latency (end − sent) ÷ the images it returned; p50/p90/p99 over the requests",
    ),
    ("images per minute", "images of the successful requests ÷ the measured window × 60"),
    (
        "denoising steps/s",
        "Σ (steps × images) ÷ the measured window — one step of one image is one "
        "denoising step, the unit priced per 1M",
    ),
    (
        "it/s (per request)",
        "a request's steps ÷ its denoising time: the rate a progress bar shows (a batch's "
        "images denoise together)",
    ),
    (
        "text encoding / denoising / VAE decode",
        "diffusers: each stage timed with the device synchronised "
        "(encode_prompt, the steps' callbacks, vae.decode); denoising runs from the end of text encoding "
        "to the end of the last step",
    ),
    (
        "queue wait / execution",
        "ComfyUI: execution_start received − prompt sent / execution_success received − "
        "execution_start received",
    ),
)


def images_section(runs: Sequence[RunData], options: ReportOptions) -> Section | None:
    """The section, or None when no run generated images."""
    images = options.images
    own = [(r, r.info.summary) for r in runs if isinstance(r.info.summary, ImageSummary)]
    if not own:
        return None
    rows: list[tuple[str, ...]] = []
    stage_rows: list[tuple[str, ...]] = []
    node_rows: list[tuple[str, ...]] = []
    thumbs: list[Thumb] = []
    missing: list[str] = []
    for r, s in own:
        spi = s.seconds_per_image
        rows.append(
            (
                r.ref.name,
                s.workload_text() or "—",
                f"{s.images_total:,}",
                fmt.num(spi.p50),
                fmt.num(spi.p90),
                fmt.num(spi.p99),
                fmt.num(s.images_per_min, 3),
                fmt.num(s.denoise_steps_per_s, 3),
                fmt.num(s.step_it_per_s.p50, 3),
                fmt.gib(s.peak_memory_bytes),
            )
        )
        st = s.stage_times
        stage_rows.append(
            (
                r.ref.name,
                fmt.num(st.text_encode_s.mean),
                fmt.num(st.denoise_s.mean),
                fmt.num(st.decode_s.mean),
                fmt.num(st.queue_wait_s.mean),
                fmt.num(st.execution_s.mean),
            )
        )
        for n in s.node_classes or []:
            node_rows.append((r.ref.name, n.class_type, f"{n.runs}", f"{n.cached}", fmt.num(n.mean_s)))
        if not s.steps_total:
            missing.append(
                f"{r.ref.name}: denoising steps — the engine ({s.engine or r.info.engine}) does not "
                "report them"
            )
        if images:
            for t in s.thumbnails:
                size = f"{t.source_width}×{t.source_height}" if t.source_width and t.source_height else ""
                thumbs.append(
                    Thumb(
                        caption=f"{r.ref.name}, request {t.request}" + (f", {size}" if size else ""),
                        png_base64=t.png_base64,
                        width=t.width,
                        height=t.height,
                    )
                )
            if not s.thumbnails:
                missing.append(
                    f"{r.ref.name}: no thumbnails were kept"
                    + (f" ({s.notes[0]})" if any("thumbnail" in n for n in s.notes[:1]) else "")
                )
    tables = [
        Table(
            key="images",
            title="Per image (measured window)",
            columns=(
                "run",
                "what",
                "images",
                "s/image p50",
                "p90",
                "p99",
                "images/min",
                "denoising steps/s",
                "it/s p50",
                "peak device memory GiB",
            ),
            rows=tuple(rows),
            provenance="the runs' summaries (kinds.image.summary.summarize_images)",
        ),
        Table(
            key="image_stages",
            title="Seconds per request, by stage (mean)",
            columns=("run", "text encoding", "denoising", "VAE decode", "queue wait", "execution"),
            rows=tuple(stage_rows),
            provenance="per-request timings of the engine (docs/image.md)",
        ),
    ]
    if node_rows:
        tables.append(
            Table(
                key="comfy_nodes",
                title="ComfyUI node classes",
                columns=("run", "class", "runs", "cached", "mean s"),
                rows=tuple(node_rows),
                provenance="the websocket's executing messages",
            )
        )
    notes: list[Any] = []
    if not images:
        notes.append("thumbnails left out (--no-images)")
    elif thumbs:
        notes.append(
            "thumbnails: the first images of each run, downscaled to at most 96 px and kept in the run's "
            "record (kinds.image.summary.Thumbnail); a dummy model's random weights draw noise"
        )
    return Section(
        key="images",
        title="Image generation",
        intro="What an image took on this stack: per image, per stage, and the pictures the run made.",
        tables=tuple(tables),
        images=tuple(thumbs),
        not_measured=tuple(missing),
        notes=tuple(notes),
        definitions=DEFINITIONS,
    )


def _summary(r: RunData) -> ImageSummary | None:
    s = r.info.summary
    return s if isinstance(s, ImageSummary) else None


def overview_cells(r: RunData) -> dict[str, str]:
    """Requests, the window, the images and their rates."""
    s = _summary(r)
    return {
        **counts_cells(r, ITEMS),
        "images": fmt.num(s.images_total if s is not None else None),
        "images/s": fmt.num(s.images_per_s if s is not None else None),
        "images/min": fmt.num(s.images_per_min if s is not None else None),
        "req/s": fmt.num(s.requests_per_s if s is not None else None),
    }


def how_cells(r: RunData) -> dict[str, str]:
    """What one image was and which engine timed it."""
    s = _summary(r)
    return {
        "images of": fmt.text(s.workload_text() or None) if s is not None else fmt.MISSING,
        "timed by": fmt.text((s.engine if s is not None else None) or r.info.engine),
    }


REPORT = KindReport(
    name="image",
    sections=(images_section,),
    overview=overview_cells,
    overview_note="Counts and rates over the measured window (first request sent → last one finished, "
    "warm-up excluded); images as the engine returned them (a request is one batch).",
    how=how_cells,
    how_note="Images and denoising steps as the engine reported them (docs/image.md).",
    items=ITEMS,
)

__all__ = ["DEFINITIONS", "REPORT", "how_cells", "images_section", "overview_cells"]
