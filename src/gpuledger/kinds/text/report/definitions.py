"""The metric definitions a report of text-generation runs quotes in its "how measured" section.

They are the project's definitions (docs/design.md, "Metric definitions"), quoted word for word (one
entry per metric), followed by the one figure the report derives itself (per GPU / per user); the
bench metrics, the telemetry energy maths and the cost model implement exactly these.
"""

from __future__ import annotations

METRIC_DEFINITIONS: tuple[tuple[str, str], ...] = (
    ("TTFT", "first content token received − request sent."),
    ("ITL", "gaps between successive content chunks, per token (a chunk of k tokens counts k tokens)."),
    ("TPOT", "(E2E − TTFT) / (output_tokens − 1), requests with > 1 output token."),
    ("E2E", "last token − request sent."),
    ("Output tok/s", "output tokens ÷ wall time of the measured window."),
    (
        "Goodput",
        "requests meeting every given SLO ÷ window.",
    ),
    (
        "Token counts",
        "server usage when reported, else client-side count; the record says which.",
    ),
    (
        "Energy",
        "hardware counter when present and validated against integrated power, else the integral of "
        "sampled power; J/token = energy in window ÷ tokens in window.",
    ),
    (
        "Cost per 1M tokens",
        "hourly cost ÷ (tokens/s × 3600 × utilisation) × 1e6, where hourly cost = hardware amortisation + "
        "energy (watts × PUE × price) + labour amortisation + other opex; or a rental $/GPU-hour. Input and "
        "output tokens are priced separately when asked.",
    ),
    (
        "Money",
        "a cost profile names its currency (ISO 4217; USD by default) and every price in it is in that "
        "currency; reports say the currency.",
    ),
    (
        "Throughput per GPU / tokens per second per user (sweeps)",
        "output tok/s of a stage ÷ number of accelerators measured in the run (1 for a CPU run); "
        "tokens/s per user = 1000 ÷ the stage's median TPOT in ms (how fast one user sees tokens arrive).",
    ),
)
