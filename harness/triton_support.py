"""Triton, where it is installed, for the experiments' own kernels: the optional import, the math mode a
float32 tl.dot follows, and what the compiler assigned to a launch.

Triton ships with torch's CUDA wheels, not with the CPU ones; a kernel module imports `triton` and `tl`
from here and defines its kernels only when `triton is not None`, and its variants skip with
`TRITON_MISSING` otherwise. Under TRITON_INTERPRET=1 the same kernels run on CPU tensors (the tests).
"""

from __future__ import annotations

from typing import Any

import torch

try:
    import triton
    import triton.language as tl
except ImportError as _exc:  # pragma: no cover - depends on the install
    triton = None
    tl = None
    TRITON_MISSING: str | None = f"triton not installed ({_exc}); it comes with torch's CUDA wheels"
else:
    TRITON_MISSING = None

__all__ = ["TRITON_MISSING", "compiled_facts", "input_precision", "tl", "triton"]


def input_precision() -> str:
    """tl.dot's input_precision for float32 operands: torch's matmul setting (TF32 unless it is off);
    bf16 and fp16 operands ignore it."""
    return "tf32" if torch.backends.cuda.matmul.allow_tf32 else "ieee"


def compiled_facts(compiled: Any) -> dict[str, Any]:
    """Registers, spills and shared memory the compiler assigned to a launch (absent in the interpreter)."""
    facts: dict[str, Any] = {}
    for key, attr in (("regs_per_thread", "n_regs"), ("spilled_regs", "n_spills")):
        value = getattr(compiled, attr, None)
        if isinstance(value, int):
            facts[key] = value
    shared = getattr(getattr(compiled, "metadata", None), "shared", None)
    if isinstance(shared, int):
        facts["smem_bytes_compiled"] = shared
    return facts
