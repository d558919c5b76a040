"""The work of a card's op at the shape it runs: its FLOPs per call and its tensors' elements, from the shape
parameters alone (a report card's at full size, or the shape the worker planned at a run's scale).

Conventions are the workloads' (harness.workloads.linear, conv): a linear's FLOPs are 2*M*N*K, its tensors x
[M, K], weight [N, K], bias [N], y [M, N]; a convolution's FLOPs are 2 * Cout * Cin/groups * prod(kernel) * N *
prod(output spatial), its tensors input, weight, bias [Cout] and output, with a bias unless the shape says none
(the Wan VAE's convolutions have one). Other op kinds have no work here: their predictors say so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

CONV_KINDS = ("conv3d", "conv2d")


@dataclass(frozen=True)
class Work:
    """One call's FLOPs and each tensor's element count."""

    op_kind: str
    flops: float
    elements: Mapping[str, int]
    shape: Mapping[str, Any]

    def nbytes(self, element_bytes: int, names: Iterable[str] | None = None) -> float:
        """Bytes of the named tensors (all of them: the op's minimum bytes) at `element_bytes` each."""
        chosen = self.elements if names is None else {n: self.elements[n] for n in names if n in self.elements}
        return float(sum(chosen.values()) * element_bytes)


def work_of(op_kind: str, shape: Any) -> Work | None:
    """The work of an op of `op_kind` at `shape` (a card's shape parameters); None where this module has no
    arithmetic for the kind or the shape lacks what it needs."""
    if not isinstance(shape, Mapping):
        return None
    try:
        if op_kind == "linear":
            return _linear(shape)
        if op_kind in CONV_KINDS:
            return _conv(op_kind, shape)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    return None


def _linear(shape: Mapping[str, Any]) -> Work:
    m, n, k = (int(shape[key]) for key in ("M", "N", "K"))
    bias = shape.get("bias") is not False
    elements = {"x": m * k, "weight": n * k, "y": m * n, **({"bias": n} if bias else {})}
    return Work("linear", 2.0 * m * n * k, elements, dict(shape))


def _conv(op_kind: str, shape: Mapping[str, Any]) -> Work:
    x, w, out = (list(map(int, shape[key])) for key in ("input", "weight", "output"))
    groups = int(shape.get("groups") or 1)
    if len(w) != len(x) or len(out) != len(x) or w[1] * groups != x[1]:
        raise ValueError(f"{op_kind}: input {x}, weight {w} and output {out} do not fit")
    bias = shape.get("bias") is not False
    flops = 2.0 * w[0] * w[1] * math.prod(w[2:]) * out[0] * math.prod(out[2:])
    elements = {"input": math.prod(x), "weight": math.prod(w), "output": math.prod(out),
                **({"bias": w[0]} if bias else {})}
    return Work(op_kind, flops, elements, dict(shape))
