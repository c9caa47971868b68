"""Fake torch: scenario import_fails (a broken install)."""

raise ImportError("libtorch_cuda.so: cannot open shared object file: No such file or directory")
