"""The current CUDA device's peaks: the peak table's entry (harness.hardware.gpu_peaks) for the device's name,
with the device's own facts (L2 size and SM count from torch's device properties, clocks from NVML) in place of
the table's wherever the device gives them.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Mapping

from harness.hardware.gpu_peaks import FROM_DEVICE, FROM_NVML, DevicePeaks, lookup
from harness.profile.nvml import nvml_clocks


def for_current_device(
    device: int | None = None,
    measured: Mapping[str, float] | str | os.PathLike[str] | None = None,
) -> DevicePeaks:
    """Peaks of a CUDA device, with its SM limits and L2 size read from the device itself, and its
    clocks from NVML where pynvml is importable; the table's values only where the device is silent."""
    import torch

    index = torch.cuda.current_device() if device is None else device
    props = torch.cuda.get_device_properties(index)
    entry = lookup(
        props.name,
        total_memory_b=props.total_memory,
        compute_capability=(props.major, props.minor),
        sm_count=props.multi_processor_count,
        measured=measured,
    )
    if props.multi_processor_count and entry.limits is not None:
        entry = replace(entry, sm_count_source=FROM_DEVICE)
    clocks = {k: v for k, v in nvml_clocks(index).items() if v is not None}
    entry = replace(entry, clocks_mhz=clocks,
                    clocks_source=FROM_NVML if clocks else "not read (pynvml absent or NVML unavailable)")
    if entry.limits is not None:
        # Fields that not every torch version exposes keep the architecture table's value.
        entry = replace(entry, limits=replace(
            entry.limits,
            max_threads_per_sm=props.max_threads_per_multi_processor,
            smem_per_sm=props.shared_memory_per_multiprocessor,
            regs_per_sm=getattr(props, "regs_per_multiprocessor", entry.limits.regs_per_sm),
            smem_per_block_optin=getattr(
                props, "shared_memory_per_block_optin", entry.limits.smem_per_block_optin
            ),
        ))
    l2 = getattr(props, "L2_cache_size", None)
    if l2:
        return replace(entry, l2_bytes=int(l2), l2_source=FROM_DEVICE)
    return entry

