"""``gpuledger cost RUN --train-tokens N``: the hours and money to train N tokens on the stack a training run
measured (``kinds/train/pricing.py``: ``job_cost`` -> ``TrainingJob``), added to the cost document as
``training_job`` and printed first — the job's total, its hours and energy — before the run's cost per
unit."""

from __future__ import annotations

from rich.text import Text

from gpuledger.cli.common import console
from gpuledger.kinds.train.pricing import TrainingJob

NA = "n/a"


def _n(value: float | int | None, fmt: str = ",.4g") -> str:
    return NA if value is None else format(value, fmt)


def job_headline(job: TrainingJob) -> str:
    """``"Training 2e+09 tokens on this stack: 1,234.56 USD, 12.3 hours (0.51 days); energy 45.6 kWh
    (estimate)"``: the job's answer in one line."""
    energy = (
        f"energy {_n(job.energy.kwh)} kWh (estimate)" if job.energy is not None
        else f"energy n/a — {job.energy_reason}"
    )
    money = f"{_n(job.total, ',.2f')} {job.currency}"
    hours = f"{_n(job.hours, ',.1f')} hours ({_n(job.days, ',.2f')} days)"
    return f"Training {_n(job.train_tokens, '.4g')} tokens on this stack: {money}, {hours}; {energy}"


def render_job(job: TrainingJob) -> None:
    """The job first: its total, hours and energy in one line, then how they are made — the rate, the
    compute and paid hours, the device-hours, steps, the hourly cost by component and the energy."""
    from gpuledger.report.layout import paragraph, print_table

    cur = job.currency
    paragraph(console, Text(job_headline(job), style="bold"), indent=2)
    rows = [
        ("training tokens/s (measured)", _n(job.training_tokens_per_s)),
        ("compute hours (at that rate)", _n(job.compute_hours, ",.2f")),
        (f"hours at {job.utilisation:.0%} utilisation", _n(job.hours, ",.2f")),
        ("device-hours", _n(job.device_hours, ",.1f") if job.device_hours is not None
         else f"n/a — a {job.devices} run"),
        ("optimizer steps", _n(job.steps, ",.0f")),
        (f"{cur} per hour", _n(job.per_hour)),
        *((f"  {k}", f"{_n(v, ',.2f')} {cur}") for k, v in job.by_component.items() if v),
        _energy_row(job),
    ]
    print_table(console, f"Training job ({cur})", ("", ""), rows, header=False)
    paragraph(console, job.method, lead="method: ", indent=2)
    if job.energy is not None:
        paragraph(console, "; ".join([*job.energy.assumes, job.energy.priced]), lead="energy assumes: ",
                  indent=2)
    console.print()


def _energy_row(job: TrainingJob) -> tuple[str, str]:
    e = job.energy
    if e is None:
        return "energy", f"n/a — {job.energy_reason}"
    return ("energy (estimate)", f"{_n(e.kwh)} kWh = ({_n(e.training_kwh)} training + "
            f"{_n(e.idle_kwh)} idle) × PUE {e.pue:g}")
