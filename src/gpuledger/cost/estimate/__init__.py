"""Carrying a measured run to another GPU (``estimate_run``) and pricing a workload nobody measured
(``estimate_model``, the roofline floor). Imports cost.pricing and cost.published."""
