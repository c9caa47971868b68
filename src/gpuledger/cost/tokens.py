"""What only a text-generation run's price has: the prefill/decode split of a token price, and the price
of an output token counting only the requests that met the SLOs.

Split rule: with the profile's ``output_to_input_cost_ratio`` R, input tokens get the share
``in/s ÷ (in/s + R x out/s)`` of the hourly cost; without it, the share of request time spent before the
first token (mean TTFT ÷ mean E2E), the measured proxy for the prefill share of the work.
"""

from __future__ import annotations

from typing import Any

from gpuledger.cost.model import SECONDS_PER_HOUR, money_prefix
from gpuledger.cost.runcost import RunCost, register_pricing
from gpuledger.kinds.text.summary import TextGenerationSummary
from gpuledger.records import RunSummary


def prefill_share_of(summary: RunSummary | None) -> tuple[float | None, str]:
    """Share of request time spent before the first token (mean TTFT / mean E2E), with how it was found."""
    if summary is None:
        return None, "the run has no summary"
    if not isinstance(summary, TextGenerationSummary):
        return summary.compute_share()  # another kind of work says it itself (image generation: 1)
    ttft, e2e = summary.ttft_ms.mean, summary.e2e_ms.mean
    if ttft is None or e2e is None or e2e <= 0:
        return None, "the run has no TTFT/E2E means"
    return min(max(ttft / e2e, 0.0), 1.0), f"mean TTFT {ttft:.1f} ms / mean E2E {e2e:.1f} ms"


def token_split(cost: RunCost) -> dict[str, Any]:
    """The hourly cost divided between input and output tokens, and the price of each (per 1M)."""
    ev, inp = cost.evaluation, cost.inputs
    p = money_prefix(cost.currency)
    in_tps = inp.rate("input_token") or 0.0
    out_tps = inp.rate("output_token") or 0.0
    ratio = inp.profile.output_to_input_cost_ratio
    if ratio is not None:
        share_in = in_tps / (in_tps + ratio * out_tps)
        rule = (
            f"user ratio: an output token costs {ratio:g} input tokens (profile output_to_input_cost_ratio)"
        )
    else:
        share, how = prefill_share_of(cost.summary)
        if share is None:
            return {
                "rule": None,
                "reason": "no TTFT/E2E in the run and no output_to_input_cost_ratio in the profile",
                f"{p}_per_1m_input_tokens": None,
                f"{p}_per_1m_output_tokens": None,
            }
        share_in = share
        rule = f"time share: input (prefill) gets the share of request time before the first token ({how})"
    served = SECONDS_PER_HOUR * inp.utilisation
    cost_h = ev.hourly.total
    in_price = cost_h * share_in / (in_tps * served) * 1e6 if in_tps > 0 else None
    out_price = cost_h * (1.0 - share_in) / (out_tps * served) * 1e6 if out_tps > 0 else None
    return {
        "rule": rule,
        "input_cost_share": share_in,
        f"{p}_per_1m_input_tokens": in_price,
        f"{p}_per_1m_output_tokens": out_price,
    }


def _text_extras(cost: RunCost) -> dict[str, Any]:
    p = money_prefix(cost.currency)
    inp = cost.inputs
    rps, good = inp.rate("request"), inp.rate("good_request")
    at_slo = None
    if good and rps:
        at_slo = cost.evaluation.headline_cost() * rps / good
    return {f"{p}_per_1m_output_tokens_at_slo": at_slo, "split": token_split(cost)}


register_pricing(TextGenerationSummary, _text_extras)
