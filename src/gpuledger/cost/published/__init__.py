"""Points measured by others (MLPerf, vendors): reading them as runs, the shipped public sets, and picking
the points that answer one question. Imports cost.pricing."""
