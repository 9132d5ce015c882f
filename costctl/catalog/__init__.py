"""GPU catalog, price table, memory estimator and recommendations (``costctl gpus`` / ``recommend``).

Public entry points:

* :func:`normalize_gpu_name` ``(raw, *, memory_gb=None) -> (name, known)`` -- stable; provider adapters call it.
* :func:`get_gpu`, :func:`load_catalog` -- catalog rows (:class:`GpuModel`).
* :func:`load_price_table` ``(settings) -> PriceTable`` with ``lookup(gpu, provider=, billing=)`` and
  ``cheapest(gpu, billing=, currency=)``; :func:`make_entry` builds a validated :class:`PriceEntry`.
* :func:`import_skypilot_csv` -- SkyPilot ``vms.csv`` -> per-GPU-hour prices.
* :func:`estimate_memory` ``(model, Setup) -> MemoryBreakdown``; models from :func:`preset`,
  :func:`shape_from_params`, :func:`shape_from_hf_config`, or a measured profile
  (:mod:`costctl.catalog.measure`, needs torch).
* :func:`recommend` -- fitting cards ranked by job cost, advice for the others.
"""

from .gpus import Catalog, GpuModel, get_gpu, load_catalog, normalize_gpu_name
from .memory import MemoryBreakdown, Setup, estimate_memory
from .models import MeasuredProfile, TransformerShape, preset, shape_from_hf_config, shape_from_params
from .prices import PriceEntry, PriceTable, load_price_table, make_entry
from .recommend import Recommendation, Reference, recommend
from .skypilot import import_skypilot_csv, parse_skypilot_csv

__all__ = [
    "Catalog",
    "GpuModel",
    "MeasuredProfile",
    "MemoryBreakdown",
    "PriceEntry",
    "PriceTable",
    "Recommendation",
    "Reference",
    "Setup",
    "TransformerShape",
    "estimate_memory",
    "get_gpu",
    "import_skypilot_csv",
    "load_catalog",
    "load_price_table",
    "make_entry",
    "normalize_gpu_name",
    "parse_skypilot_csv",
    "preset",
    "recommend",
    "shape_from_hf_config",
    "shape_from_params",
]
