"""Nsight Compute metric names that readers of a card need without the ncu backend: pure Python, no torch.

The ncu backend's own tables (which metric carries each report field, the metric sets a trial requests)
are the profiler's; a metric set that requests these names takes them from here.
"""

from __future__ import annotations

# Bytes moved through L1/TEX and through L2 (lts), next to the DRAM bytes of the report fields.
CACHE_BYTES_METRICS: dict[str, str] = {
    "l1tex_mb": "l1tex__t_bytes.sum",
    "lts_mb": "lts__t_bytes.sum",
}
