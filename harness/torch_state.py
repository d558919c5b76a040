"""Process-global torch settings, pinned for every trial and restored after it.

The worker process measures trial after trial. A variant that turns on cuDNN's benchmark mode,
allows TF32 matmuls or raises Dynamo's cache limit would otherwise leave that setting to every
trial after it, the baseline's drift re-times and confirm rounds included, and the comparison
would no longer be of the variant alone. So each request starts from the same pinned settings
(torch's own defaults, which is how the report's model ran: TF32 for cuDNN convolutions, full fp32
matmuls), and whatever a variant sets is undone when the request ends. `snapshot()` is what a
card records of the settings it was measured under.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Any, Iterator

import torch

# torch's defaults; the report's model ran with them (fp32 VAE convolutions in TF32 on cuDNN).
PINNED: dict[str, Any] = {
    "cudnn.benchmark": False,
    "cudnn.deterministic": False,
    "cudnn.allow_tf32": True,
    "cuda.matmul.allow_tf32": False,
    "float32_matmul_precision": "highest",
    "deterministic_algorithms": False,
}


def snapshot() -> dict[str, Any]:
    """The current values of the pinned settings (and Dynamo's cache limit, when Dynamo is loaded)."""
    state = {
        "cudnn.benchmark": bool(torch.backends.cudnn.benchmark),
        "cudnn.deterministic": bool(torch.backends.cudnn.deterministic),
        "cudnn.allow_tf32": bool(torch.backends.cudnn.allow_tf32),
        "cuda.matmul.allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "deterministic_algorithms": bool(torch.are_deterministic_algorithms_enabled()),
    }
    dynamo = _dynamo()
    if dynamo is not None:
        state["dynamo.cache_size_limit"] = int(dynamo.config.cache_size_limit)
    return state


def apply(state: dict[str, Any]) -> None:
    """Set the settings named in `state` (a `snapshot()` or `PINNED`)."""
    torch.backends.cudnn.benchmark = bool(state["cudnn.benchmark"])
    torch.backends.cudnn.deterministic = bool(state["cudnn.deterministic"])
    torch.backends.cudnn.allow_tf32 = bool(state["cudnn.allow_tf32"])
    # float32_matmul_precision and cuda.matmul.allow_tf32 are two views of one setting: precision first.
    torch.set_float32_matmul_precision(str(state["float32_matmul_precision"]))
    torch.backends.cuda.matmul.allow_tf32 = bool(state["cuda.matmul.allow_tf32"])
    torch.use_deterministic_algorithms(bool(state["deterministic_algorithms"]))
    dynamo = _dynamo()
    if dynamo is not None and "dynamo.cache_size_limit" in state:
        dynamo.config.cache_size_limit = int(state["dynamo.cache_size_limit"])


def _dynamo() -> Any:
    """torch._dynamo when something already imported it (importing it costs seconds; unused, it holds nothing)."""
    return sys.modules.get("torch._dynamo")


@contextmanager
def pinned() -> Iterator[dict[str, Any]]:
    """Run a request under PINNED settings and fresh Dynamo caches; restore the settings found before.

    Dynamo's cache limit is restored when Dynamo was loaded before the request; the request that
    first loads it (a torch.compile variant) leaves the limit as that variant set it, which the
    next request's snapshot records on its card.
    """
    before = snapshot()
    dynamo = _dynamo()
    if dynamo is not None:
        dynamo.reset()  # no compiled graph or guard of an earlier trial serves this one
    apply({**before, **PINNED})
    try:
        yield snapshot()
    finally:
        apply(before)
