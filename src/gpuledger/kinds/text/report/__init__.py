"""The text kind's ``report`` facet: what a report of LLM-inference runs shows of them (``REPORT``).

Its own sections, in order: latency (the percentile table and the TTFT / ITL / E2E distributions:
``latency.py``), throughput (per load level, against concurrency, the Pareto view: ``throughput.py``) and
the server's own view over the window (``server_state.py``, from ``serverstate.py``); its columns of the
overview (output, total and request rates, goodput) and of how measured (where the token counts came from,
output lengths, SLOs); the project's metric definitions (TTFT, ITL, TPOT, E2E, ...); and the answer's key
facts (the rate, TTFT and TPOT percentiles: ``TextGenerationSummary.key_figures``).
"""

from __future__ import annotations

from gpuledger.kinds.text.report.definitions import METRIC_DEFINITIONS
from gpuledger.kinds.text.report.latency import latency_section, request_stride
from gpuledger.kinds.text.report.server_state import server_state_section
from gpuledger.kinds.text.report.throughput import throughput_section
from gpuledger.kinds.text.summary import TextGenerationSummary
from gpuledger.report import fmt
from gpuledger.report.kinds import KindReport, counts_cells
from gpuledger.report.rundata import RunData

ITEMS = "requests"


def overview_cells(r: RunData) -> dict[str, str]:
    """Requests, the window and the rates: output and total tokens, requests, and goodput with SLOs."""
    return {
        **counts_cells(r, ITEMS),
        "output tok/s": fmt.num(_rate(r, "output_token")),
        "total tok/s": fmt.num(_rate(r, "token")),
        "req/s": fmt.num(_rate(r, "request")),
        "goodput (req/s)": fmt.num(_rate(r, "good_request")),
    }


def _rate(r: RunData, unit: str) -> float | None:
    s = r.info.summary
    return s.rate(unit) if s is not None else None


def how_cells(r: RunData) -> dict[str, str]:
    """Where the token counts came from, requests that got another output length than asked, the SLOs."""
    s = r.info.summary
    if not isinstance(s, TextGenerationSummary):
        return {"token counts from": fmt.MISSING, "output length mismatch": fmt.MISSING, "SLOs": fmt.MISSING}
    sources = ", ".join(f"{k}: {v}" for k, v in s.token_source.items())
    m = s.output_len_mismatch
    mismatch = (
        fmt.MISSING
        if "output_len_mismatch" not in s.model_fields_set
        else f"{m.count} of {m.checked} requests"
        if m.checked
        else "not checked (no requested length)"
    )
    slo = s.slo.model_dump(mode="json", exclude_unset=True) if s.slo is not None else None
    return {
        "token counts from": sources or fmt.MISSING,
        "output length mismatch": mismatch,
        "SLOs": fmt.MISSING if slo is None else ", ".join(f"{k}={v}" for k, v in slo.items()),
    }


REPORT = KindReport(
    name="text",
    sections=(latency_section, throughput_section, server_state_section),
    overview=overview_cells,
    overview_note="Counts and rates over the measured window (first send → last finish, warmup excluded); "
    "tokens as counted per request (see how measured); goodput only when SLOs were given.",
    how=how_cells,
    how_note="Token counts: server usage when reported, else the server's tokenizer, else a client count "
    "(one token per content chunk).",
    definitions=METRIC_DEFINITIONS,
    definitions_note="the project's metric definitions, quoted verbatim, and the report's per-GPU / per-user "
    "figures",
    items=ITEMS,
    request_stride=request_stride,
)

__all__ = ["REPORT", "how_cells", "overview_cells"]
