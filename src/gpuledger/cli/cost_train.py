"""``gpuledger cost RUN --train-tokens N``: the hours and money to train N tokens on the stack a training run
measured (``kinds/train/pricing.py``: ``job_cost``), added to the cost document as ``training_job`` and
printed after the run's cost."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuledger.cli.common import console
from gpuledger.cost.pricing.model import money_prefix
from gpuledger.kinds.train.pricing import job_cost

if TYPE_CHECKING:
    from gpuledger.cost import RunCost


def add_job(cost: RunCost, train_tokens: float, document: dict[str, Any]) -> dict[str, Any]:
    """The job's figures, also stored in ``document["training_job"]``."""
    job = job_cost(cost, train_tokens)
    document["training_job"] = job
    return job


def _n(value: Any, fmt: str = ",.4g") -> str:
    return "n/a" if not isinstance(value, int | float) else format(value, fmt)


def render_job(job: dict[str, Any]) -> None:
    """The job in a few lines: the money first, then the hours, the device-hours, steps and energy."""
    from gpuledger.report.layout import paragraph, print_table

    cur = str(job["currency"])
    p = money_prefix(cur)
    console.print()
    money, hours, days = _n(job[p], ",.2f"), _n(job["hours"], ",.1f"), _n(job["days"], ",.2f")
    paragraph(console, f"Training {_n(job['train_tokens'], '.4g')} tokens on this stack: {money} {cur}, "
              f"{hours} hours ({days} days)", indent=2)
    rows = [
        ("training tokens/s (measured)", _n(job["training_tokens_per_s"])),
        ("compute hours (at that rate)", _n(job["compute_hours"], ",.2f")),
        (f"hours at {job['utilisation']:.0%} utilisation", _n(job["hours"], ",.2f")),
        ("device-hours", _n(job["device_hours"], ",.1f") if job["device_hours"] is not None
         else f"n/a — a {job['devices']} run"),
        ("optimizer steps", _n(job["steps"], ",.0f")),
        (f"{cur} per hour", _n(job[f"{p}_per_hour"])),
        *((f"  {k}", f"{_n(v, ',.2f')} {cur}") for k, v in job[f"{p}_by_component"].items() if v),
        _energy_row(job),
    ]
    print_table(console, f"Training job ({cur})", ("", ""), rows, header=False)
    paragraph(console, str(job["method"]), lead="method: ", indent=2)
    energy = job.get("energy")
    if energy:
        paragraph(console, "; ".join([*energy["assumes"], str(energy["priced"])]), lead="energy assumes: ",
                  indent=2)


def _energy_row(job: dict[str, Any]) -> tuple[str, str]:
    energy = job.get("energy")
    if not energy:
        return "energy", f"n/a — {job['energy_reason']}"
    return ("energy (estimate)", f"{_n(energy['kwh'])} kWh = ({_n(energy['training_kwh'])} training + "
            f"{_n(energy['idle_kwh'])} idle) × PUE {energy['pue']:g}")
