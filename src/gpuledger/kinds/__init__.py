"""The workloads gpuledger measures, one package each: ``text`` (LLM inference), ``train`` (PyTorch
training), ``image`` (image generation). A package defines ``KIND`` in its ``__init__`` and holds its
facets (``gpuledger.records.kinds``: what each facet provides, at which layer); docs/contracts.md
"Workload kinds" shows how a fourth is added."""
