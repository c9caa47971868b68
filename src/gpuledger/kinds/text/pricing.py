"""The text kind's ``pricing`` facet: what only a text-generation run's price has — the prefill/decode split
of a token price, and the price of an output token counting only the requests that met the SLOs
(``cost_extras``, found by ``cost.runcost`` through the registry for the runs of this kind).

Split rule: with the profile's ``output_to_input_cost_ratio`` R, input tokens get the share
``in/s ÷ (in/s + R x out/s)`` of the hourly cost; without it, the share of request time spent before the
first token (mean TTFT ÷ mean E2E: ``TextGenerationSummary.compute_share``), the measured proxy for the
prefill share of the work.
"""

from __future__ import annotations

from typing import Any, Self

from gpuledger.cost.pricing.document import MoneyKeys, PriceSplit, PricingExtras, Qualifier, UnitPrice
from gpuledger.cost.pricing.model import SECONDS_PER_HOUR
from gpuledger.cost.pricing.runcost import RunCost
from gpuledger.kinds.text.summary import TextGenerationSummary
from gpuledger.records import unit_info

INPUT, OUTPUT = "input_token", "output_token"
SHARE_KEY = "input_cost_share"  # the input tokens' share of the hourly cost, in the document


def _price(unit: str, value: float | None, qualifier: Qualifier = "priced separately") -> UnitPrice:
    return UnitPrice.of(unit, unit_info(unit), value, qualifier)


class TextPricing(PricingExtras):
    """A text-generation run's own figures: the price of an output token counting only the requests that
    met the SLOs (``at_slo``; None without SLOs or without a good request) and the input/output split."""

    at_slo: UnitPrice
    token_split: PriceSplit

    def items(self, money: MoneyKeys) -> dict[str, Any]:
        return {money.price(self.at_slo): self.at_slo.value, "split": self.token_split.entries(money)}

    def prices(self) -> list[UnitPrice]:
        shown = list(self.token_split.parts) if self.token_split.rule else []
        return shown + ([self.at_slo] if self.at_slo.value is not None else [])

    def notes(self) -> list[tuple[str, str]]:
        return [("split rule", self.token_split.rule)] if self.token_split.rule else []

    def split(self) -> PriceSplit:
        return self.token_split

    @classmethod
    def read(cls, data: dict[str, Any], money: MoneyKeys) -> Self | None:
        at_slo = _price(OUTPUT, None, "at SLO")
        if "split" not in data:
            return None
        value = data.pop(money.price(at_slo), None)
        parts = [_price(INPUT, None), _price(OUTPUT, None)]
        split = PriceSplit.read(data.pop("split"), money, parts, SHARE_KEY)
        return cls(at_slo=at_slo.model_copy(update={"value": value}), token_split=split)


def token_split(cost: RunCost) -> PriceSplit:
    """The hourly cost divided between input and output tokens, and the price of each (per 1M)."""
    ev, inp = cost.evaluation, cost.inputs
    in_tps = inp.rate(INPUT) or 0.0
    out_tps = inp.rate(OUTPUT) or 0.0
    ratio = inp.profile.output_to_input_cost_ratio
    if ratio is not None:
        share_in = in_tps / (in_tps + ratio * out_tps)
        rule = (
            f"user ratio: an output token costs {ratio:g} input tokens (profile output_to_input_cost_ratio)"
        )
    else:
        share, how = cost.summary.compute_share()
        if share is None:
            return PriceSplit(
                rule=None,
                reason="no TTFT/E2E in the run and no output_to_input_cost_ratio in the profile",
                share_key=SHARE_KEY,
                parts=[_price(INPUT, None), _price(OUTPUT, None)],
            )
        share_in = share
        rule = f"time share: input (prefill) gets the share of request time before the first token ({how})"
    served = SECONDS_PER_HOUR * inp.utilisation
    cost_h = ev.hourly.total
    in_price = cost_h * share_in / (in_tps * served) * 1e6 if in_tps > 0 else None
    out_price = cost_h * (1.0 - share_in) / (out_tps * served) * 1e6 if out_tps > 0 else None
    return PriceSplit(rule=rule, share=share_in, share_key=SHARE_KEY,
                      parts=[_price(INPUT, in_price), _price(OUTPUT, out_price)])


def cost_extras(cost: RunCost) -> TextPricing | None:
    """The price of an output token at the SLOs and the input/output split, for a text-generation run's
    cost document (a published point, priced from its published rates, has neither)."""
    if not isinstance(cost.summary, TextGenerationSummary):
        return None
    inp = cost.inputs
    rps, good = inp.rate("request"), inp.rate("good_request")
    at_slo = None
    if good and rps:
        at_slo = cost.evaluation.headline_cost() * rps / good
    return TextPricing(at_slo=_price(OUTPUT, at_slo, "at SLO"), token_split=token_split(cost))


# What this kind adds to a cost document, to read a stored one back (``CostDocument.read``).
EXTRAS: tuple[type[PricingExtras], ...] = (TextPricing,)
