"""Layout conversions on a card: the kernels that only move a tensor into another memory layout, with their
time and DRAM bytes, so the diff and the channels_last check count every one of them.

cuDNN wraps an NCDHW conv in NCHW<->NHWC transposes (`nchwToNhwcKernel`, `nhwcToNchwKernel`); given
channels_last_3d tensors on an H200 (cuDNN 9.19) it ran two generic `convertTensor_kernel`s instead (74.3 +
4.2 us), which a check that knew only the transposes read as "none left". cuTENSOR's permutations and
torch's own layout copies (as a CPU trace names them) are conversions too.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from harness.cards.kernel_families import kernel_family
from harness.cards.launches import per_invocation_value
from harness.cards.model import Card

# By family (the name without namespace, template and arguments), lower-cased.
_CONVERSION_FAMILY = re.compile(r"nchwtonhwc|nhwctonchw|nchw2nhwc|nhwc2nchw|converttensor")
# cuTENSOR names its kernels by what they do; a permutation or transpose there only moves the layout.
_CUTENSOR = re.compile(r"cutensor", re.IGNORECASE)
_CUTENSOR_MOVE = re.compile(r"permut|transpose")
# torch's layout copies, as the CPU and torch_cuda backends name ops (oneDNN reorders show up as these).
_TORCH_COPIES = frozenset({"aten::copy_", "aten::contiguous", "aten::clone", "aten::_to_copy"})


def is_layout_conversion(name: str) -> bool:
    """Whether kernel `name` (a full name or its family) only converts a tensor's memory layout."""
    family = kernel_family(name)
    if family in _TORCH_COPIES or _CONVERSION_FAMILY.search(family.lower()):
        return True
    return bool(_CUTENSOR.search(name) and _CUTENSOR_MOVE.search(family.lower()))


@dataclass(frozen=True)
class LayoutConversions:
    """A card's conversion kernels (full names, card order), their duration sum and DRAM bytes (read + write)."""

    kernels: list[str]
    dur_us: float | None  # None: a conversion kernel's duration is unknown
    dram_mb: float | None  # None: a conversion kernel's bytes are unknown

    def counts(self) -> str:
        """'nchwToNhwcKernel x2, nhwcToNchwKernel x1', or 'none'."""
        found = Counter(kernel_family(name) for name in self.kernels)
        return ", ".join(f"{family} x{n}" for family, n in found.items()) or "none"

    def text(self) -> str:
        """'convertTensor_kernel x2 (78.6 us, 199.8 MB)': the counts with their time and bytes."""
        if not self.kernels:
            return "none"
        time = f"{self.dur_us:.1f} us" if self.dur_us is not None else "time unknown"
        moved = f"{self.dram_mb:.1f} MB" if self.dram_mb is not None else "bytes unknown"
        return f"{self.counts()} ({time}, {moved})"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def layout_conversions(card: Card) -> LayoutConversions:
    """The conversion kernels of `card`, per invocation as profiled."""
    kernels = [k for k in card.kernels if is_layout_conversion(k.name)]
    durations = [per_invocation_value(card, k, k.metric("dur_us")) for k in kernels]
    moved = [(per_invocation_value(card, k, k.metric("dram_read_mb")),
              per_invocation_value(card, k, k.metric("dram_write_mb"))) for k in kernels]
    return LayoutConversions(
        kernels=[k.name for k in kernels],
        dur_us=None if any(d is None for d in durations) else sum(d or 0.0 for d in durations),
        dram_mb=None if any(r is None or w is None for r, w in moved) else sum((r or 0.0) + (w or 0.0)
                                                                             for r, w in moved),
    )
