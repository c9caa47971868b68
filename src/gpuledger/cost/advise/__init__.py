"""``advise``: which GPU and stack to choose for a workload, from the criteria asked, published points and
estimates. Imports cost.pricing, cost.published and cost.estimate."""
