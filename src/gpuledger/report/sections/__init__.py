"""The report's sections, one module each; ``gpuledger.report.build`` reads the runs and orders them."""
