"""Command-line interface: thin wrappers that parse, call the library and render.

The command modules import the library (store, bench, cost, report, doctor, ...) inside their command
functions, not at the top: every command module is loaded when ``gpuledger`` starts, and importing the
whole library there would add about a third of a second to every command, ``--help`` included. These
imports go downward like any other (``tests/test_layers.py`` checks them too); none dodges a cycle.
"""
