"""Cost model: profiles, hourly cost, cost of a run, comparison, estimate. Pure functions over stored data.

``load_profile(name_or_path)``, ``default_profile_for(run)``, ``cost_of_run(run, profile)`` -> ``RunCost``,
``compare(runs_costs)`` -> ``Comparison``, ``hourly_cost(profile, power_w)`` -> ``HourlyCost``,
``estimate_run(run, gpu_name)`` -> ``Estimate``. Formulas: docs/cost.md. Every function prices whatever
unit of work a run measured (``RunSummary.work()``); a workload kind's own pricing figures (text generation:
``kinds/text/pricing.py``) are its ``pricing`` facet, found through the registry (``records.kinds``).

Its parts, each importing only those listed before it: ``pricing`` (profile, presets, power, hourly cost,
``cost_of_run``), ``published`` (others' measured points), ``estimate`` (carrying a run to another GPU,
pricing an unmeasured workload), ``advise``, and ``comparison`` (compare, break-even, repeat groups,
repricing).
"""

from typing import TYPE_CHECKING

from gpuledger.lazy import exports

if TYPE_CHECKING:
    from gpuledger.cost.comparison.breakeven import BreakEven, SensitivityRow, ratio_of
    from gpuledger.cost.comparison.compare import Comparison, PairComparison, compare
    from gpuledger.cost.estimate.estimate import Estimate, estimate_run
    from gpuledger.cost.pricing.model import (
        CostInputs,
        Evaluation,
        HourlyCost,
        evaluate,
        hourly_cost,
        money_prefix,
    )
    from gpuledger.cost.pricing.power import PowerResolution
    from gpuledger.cost.pricing.presets import (
        builtin_presets,
        cpu_defaults,
        default_profile_for,
        load_profile,
    )
    from gpuledger.cost.pricing.profile import HOURS_PER_MONTH, CostProfile, profile_from_text
    from gpuledger.cost.pricing.runcost import RunCost, cost_of_run

__getattr__, __dir__ = exports(__name__, {
    "BreakEven": "gpuledger.cost.comparison.breakeven",
    "SensitivityRow": "gpuledger.cost.comparison.breakeven",
    "ratio_of": "gpuledger.cost.comparison.breakeven",
    "Comparison": "gpuledger.cost.comparison.compare",
    "PairComparison": "gpuledger.cost.comparison.compare",
    "compare": "gpuledger.cost.comparison.compare",
    "Estimate": "gpuledger.cost.estimate.estimate",
    "estimate_run": "gpuledger.cost.estimate.estimate",
    "CostInputs": "gpuledger.cost.pricing.model",
    "Evaluation": "gpuledger.cost.pricing.model",
    "HourlyCost": "gpuledger.cost.pricing.model",
    "evaluate": "gpuledger.cost.pricing.model",
    "hourly_cost": "gpuledger.cost.pricing.model",
    "money_prefix": "gpuledger.cost.pricing.model",
    "PowerResolution": "gpuledger.cost.pricing.power",
    "builtin_presets": "gpuledger.cost.pricing.presets",
    "cpu_defaults": "gpuledger.cost.pricing.presets",
    "default_profile_for": "gpuledger.cost.pricing.presets",
    "load_profile": "gpuledger.cost.pricing.presets",
    "HOURS_PER_MONTH": "gpuledger.cost.pricing.profile",
    "CostProfile": "gpuledger.cost.pricing.profile",
    "profile_from_text": "gpuledger.cost.pricing.profile",
    "RunCost": "gpuledger.cost.pricing.runcost",
    "cost_of_run": "gpuledger.cost.pricing.runcost",
})

__all__ = [
    "HOURS_PER_MONTH",
    "BreakEven",
    "Comparison",
    "CostInputs",
    "CostProfile",
    "Estimate",
    "Evaluation",
    "HourlyCost",
    "PairComparison",
    "PowerResolution",
    "RunCost",
    "SensitivityRow",
    "builtin_presets",
    "compare",
    "cost_of_run",
    "cpu_defaults",
    "default_profile_for",
    "estimate_run",
    "evaluate",
    "hourly_cost",
    "load_profile",
    "money_prefix",
    "profile_from_text",
    "ratio_of",
]
