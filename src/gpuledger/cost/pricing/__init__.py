"""Pricing one run: the cost profile and its presets, the hourly cost (hardware, energy, labour, opex), the
power and devices a run is priced on, the operating point of a sweep, MBU/MFU, and ``cost_of_run`` ->
``RunCost``. The bottom of cost/: it imports no other part of it."""
