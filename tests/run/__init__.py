"""Tests of the in-process PyTorch engine and `gpuledger run`."""
