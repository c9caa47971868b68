"""The in-process PyTorch engine, by concern: ``imports`` (the one place torch and transformers are imported,
lazily), ``models`` (built-in architectures, planning, loading), ``device`` (device, dtype, memory estimate),
``generate`` (a batch with per-step times) and ``engine`` (the ``Engine`` the bench runner drives).
Importing this package imports neither torch nor transformers."""
