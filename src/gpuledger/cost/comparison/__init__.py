"""Putting priced runs side by side: ``compare`` (the ratio and its decomposition, break-even and
sensitivity), the like-for-like warnings, repeat groups with their intervals, and repricing a comparison
under other profiles. Imports cost.pricing."""
