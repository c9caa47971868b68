"""The document of ``gpuledger show RUN --json`` (:class:`ShowDocument`): the run as exported, its saved cost
evaluations, its energy and efficiency, and what it did in its own unit (the parts ``runs`` shares are in
``report/run_documents.py``). Its dump is the ``--json`` document; the terminal tables read the same model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field

from gpuledger.cost.pricing.document import EfficiencyDoc
from gpuledger.cost.pricing.efficiency import run_efficiency
from gpuledger.cost.pricing.runview import EnergyView, energy_view
from gpuledger.records import DeviceWindow, RunInfo
from gpuledger.report.run_documents import (
    DocModel,
    JsonObject,
    QuantityDoc,
    WorkDoc,
    headline_rate,
    kind_name,
    output_rate,
    work_of,
)
from gpuledger.store.document import run_to_dict


class ShowDocument(DocModel):
    """``show RUN --json``: the run as exported (its header and its stored documents), its environment
    hash, its saved cost evaluations, its energy and efficiency (MBU, MFU), and what it did in its own
    unit (``kind``, ``rate``, ``work``)."""

    id: str
    label: str
    created_at: str | None
    started_at: str | None
    status: str
    engine: str
    model: str
    base_url: str | None
    unit: str
    kind: str | None
    workload: JsonObject
    config: JsonObject
    environment: JsonObject
    server: JsonObject
    summary: JsonObject
    telemetry_summary: list[DeviceWindow]
    client: JsonObject
    duration_s: float | None
    num_requests: int
    finished_at: str | None
    env_hash: str | None
    cost_evaluations: list[JsonObject]
    output_tokens_per_s: QuantityDoc
    rate: QuantityDoc
    work: list[WorkDoc] = Field(default_factory=list)
    energy: EnergyView
    efficiency: EfficiencyDoc

    @classmethod
    def of(
        cls, run: RunInfo, env_hash: str | None, cost_evaluations: Sequence[dict[str, Any]]
    ) -> ShowDocument:
        return cls.model_validate({
            **run_to_dict(run),
            "telemetry_summary": run.telemetry_summary,
            "kind": kind_name(run),
            "env_hash": env_hash,
            "cost_evaluations": list(cost_evaluations),
            "output_tokens_per_s": QuantityDoc.of(output_rate(run)),
            "rate": QuantityDoc.of(headline_rate(run)),
            "work": work_of(run.summary),
            "energy": energy_view(run),
            "efficiency": run_efficiency(run).document(),
        })


__all__ = ["ShowDocument"]
