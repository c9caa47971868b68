"""GPU specifications and prices as versioned data with sources; roofline helpers.

``load_catalog(extra=None)`` reads the built-in ``data/gpu_catalog.yaml``, then the user's file
(``$GPULEDGER_CATALOG`` or ``<user config dir>/gpuledger/gpus.yaml``), then ``extra``.
"""

from gpuledger.catalog.catalog import Catalog, load_catalog, user_catalog_path
from gpuledger.catalog.model import FIGURE_UNITS, Figure, GpuSpec, parse_hex_id
from gpuledger.catalog.names import normalise_name
from gpuledger.catalog.roofline import (
    RooflineScale,
    normalise_dtype,
    peak_bandwidth,
    peak_compute,
    roofline_scale,
)

__all__ = [
    "FIGURE_UNITS",
    "Catalog",
    "Figure",
    "GpuSpec",
    "RooflineScale",
    "load_catalog",
    "normalise_dtype",
    "normalise_name",
    "parse_hex_id",
    "peak_bandwidth",
    "peak_compute",
    "roofline_scale",
    "user_catalog_path",
]
