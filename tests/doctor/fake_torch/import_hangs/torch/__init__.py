"""Fake torch: scenario import_hangs (a CUDA initialisation that never returns)."""

import time

time.sleep(60)
