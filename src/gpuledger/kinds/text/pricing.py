"""The text kind's ``pricing`` facet: what only a text-generation run's price has — the prefill/decode split
of a token price, and the price of an output token counting only the requests that met the SLOs
(``cost_extras``, found by ``cost.runcost`` through the registry for the runs of this kind).

Split rule: with the profile's ``output_to_input_cost_ratio`` R, input tokens get the share
``in/s ÷ (in/s + R x out/s)`` of the hourly cost; without it, the share of request time spent before the
first token (mean TTFT ÷ mean E2E: ``TextGenerationSummary.compute_share``), the measured proxy for the
prefill share of the work.
"""

from __future__ import annotations

from typing import Any

from gpuledger.cost.pricing.model import SECONDS_PER_HOUR, money_prefix
from gpuledger.cost.pricing.runcost import RunCost
from gpuledger.kinds.text.summary import TextGenerationSummary


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
        share, how = cost.summary.compute_share()
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


def cost_extras(cost: RunCost) -> dict[str, Any]:
    """The price of an output token at the SLOs and the input/output split, for a text-generation run's
    cost document (a published point, priced from its published rates, has neither)."""
    if not isinstance(cost.summary, TextGenerationSummary):
        return {}
    p = money_prefix(cost.currency)
    inp = cost.inputs
    rps, good = inp.rate("request"), inp.rate("good_request")
    at_slo = None
    if good and rps:
        at_slo = cost.evaluation.headline_cost() * rps / good
    return {f"{p}_per_1m_output_tokens_at_slo": at_slo, "split": token_split(cost)}

