"""The definitions a report quotes in its "how measured" section for every kind of run: energy, the cost
per unit of work and money (docs/design.md, "Metric definitions", in the words of any unit). A kind whose
figures need more defines its own (its ``report`` facet: ``KindReport.definitions``; text generation quotes
the project's token definitions word for word: ``kinds/text/report/definitions.py``).
"""

from __future__ import annotations

GENERIC_DEFINITIONS: tuple[tuple[str, str], ...] = (
    (
        "Energy",
        "hardware counter when present and validated against integrated power, else the integral of "
        "sampled power; J per unit of work = energy in window ÷ the units of work in window.",
    ),
    (
        "Cost per unit of work",
        "hourly cost ÷ (units/s × 3600 × utilisation) × the units a price is quoted for (1,000 images, "
        "1M training tokens, ...), where hourly cost = hardware amortisation + energy (watts × PUE × "
        "price) + labour amortisation + other opex; or a rental $/GPU-hour.",
    ),
    (
        "Money",
        "a cost profile names its currency (ISO 4217; USD by default) and every price in it is in that "
        "currency; reports say the currency.",
    ),
)
