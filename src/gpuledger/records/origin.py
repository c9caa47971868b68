"""Where a run's figures come from when the run did not measure them itself: a published point.

``RunSummary.origin()`` is ``None`` for every run gpuledger measured. A summary of figures someone else
published (``kinds/text/published.py``) returns an ``Origin``: who published them and when, on which GPU
and how many, and the power per GPU they published (if any). The cost model, the reports and ``show``
word every such figure with ``Origin.label`` — "published by SOURCE (DATE), not measured here" — never
"measured".
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Origin:
    """The provenance of a run's figures that gpuledger did not measure.

    ``gpu`` is a GPU catalog key (resolved when the point was imported), ``gpus`` how many GPUs produced
    the published rates together, ``power_w_per_gpu`` the power per GPU the publisher gave (None: not
    published)."""

    kind: str  # "published"
    source: str
    date: str | None = None
    url: str | None = None
    gpu: str | None = None
    gpus: int | None = None
    power_w_per_gpu: float | None = None
    power_note: str | None = None

    @property
    def by(self) -> str:
        """``"published by InferenceX (2026-04-03)"``."""
        return f"{self.kind} by {self.source} ({self.date or 'undated'})"

    @property
    def label(self) -> str:
        """``"published by InferenceX (2026-04-03), not measured here"``: how every figure is worded."""
        return f"{self.by}, not measured here"
