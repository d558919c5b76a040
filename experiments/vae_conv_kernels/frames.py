"""Frame batching: k consecutive streaming calls of a causal conv3d as one call on more frames.

The realtime decoder runs each causal conv once per call on the call's T_new new frames after the
kT-1 frames it cached from the call before (dilated: d_t x (kT-1)); with no temporal stride or padding
its output is T_new frames. k consecutive calls read overlapping windows of one frame sequence, so one
call on k x T_new + d_t x (kT-1) frames computes all k calls' outputs: a k-times larger GEMM M (more
tiles per wave) for the same weight, at the price of waiting for k calls' frames (latency).

T_new comes from the card's shape: input T minus the overlap (= the output's T). A 3-tap kernel on one
new frame per call reads T_in = k + 2 frames for k calls; the report's kT=3 cards have T = 3, 4, 6: 1,
2 or 4 new frames after the 2 cached ones (docs/domain.md), so k calls read k + 2, 2k + 2 or 4k + 2.
A kT=1 kernel shares no frames: k calls are then k x T_new frames concatenated, the same arithmetic
with no overlap, so it is batched too. Impossible, and skipped with the reason: a temporal stride (the
outputs of consecutive calls no longer start T_new frames apart) or temporal padding (each separate
call pads its own window, one batched call only the ends).

The first call's frames are exactly the workload's input, so its output has the float64 reference;
the other calls' new frames are seeded, of the input's scale.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from harness.experiment import VariantSkipped
from harness.workloads.base import Workload
from harness.workloads.inputs import synthetic

from experiments.vae_conv_kernels.kernel import memory_format_of


@dataclass(frozen=True)
class FrameWindows:
    """Where each of `calls` consecutive calls reads in the batched frame sequence."""

    calls: int
    t_in: int  # frames one call reads (its new frames after the cached ones)
    overlap: int  # frames shared with the call before: the causal cache, d_t x (kT - 1)

    @property
    def t_new(self) -> int:
        """Frames each call adds, and the frames of its output."""
        return self.t_in - self.overlap

    @property
    def total(self) -> int:
        """Frames the one batched call reads: calls x T_new + overlap."""
        return self.calls * self.t_new + self.overlap

    def window(self, call: int) -> slice:
        start = call * self.t_new
        return slice(start, start + self.t_in)


def frame_windows(shape: dict[str, Any], calls: int) -> FrameWindows:
    """The windows of `calls` consecutive calls of this conv3d shape; VariantSkipped where batching is impossible."""
    if isinstance(calls, bool) or not isinstance(calls, int) or calls < 2:
        raise VariantSkipped(f"k={calls!r}: batching needs at least 2 calls (k=1 is the baseline itself)")
    stride_t, padding_t, dilation_t = (int(shape[key][0]) for key in ("stride", "padding", "dilation"))
    if stride_t != 1:
        raise VariantSkipped(f"temporal stride {stride_t}: consecutive calls' outputs would not start T_new "
                             "frames apart, so one call on their frames is not their k calls")
    if padding_t != 0:
        raise VariantSkipped(f"temporal padding {padding_t}: each call pads its own window with zero frames, one "
                             "batched call only the ends of the sequence")
    t_in, k_t = int(shape["input"][2]), int(shape["weight"][2])
    return FrameWindows(calls=calls, t_in=t_in, overlap=dilation_t * (k_t - 1))


def batched_frames(w: Workload, windows: FrameWindows) -> torch.Tensor:
    """The workload's input followed by the later calls' new frames (seeded), in the input's layout."""
    x = w.inputs["input"]
    n, c, _, h, width = x.shape
    later_shape = (n, c, (windows.calls - 1) * windows.t_new, h, width)
    std = float(x.float().std()) if x.numel() > 1 else 1.0
    later = synthetic("later_frames", later_shape, int(w.seed or 0), std=std or 1.0)
    frames = torch.cat([x, later.to(device=x.device, dtype=x.dtype)], dim=2)
    return frames.contiguous(memory_format=memory_format_of(x))


def calls_on_dim0(y: torch.Tensor, windows: FrameWindows) -> torch.Tensor:
    """The batched call's output [N, Cout, k x T_new, Ho, Wo] as the k calls' outputs stacked on dim 0
    ([k x N, Cout, T_new, Ho, Wo], call-major, as Prepared.expected holds them): a view for N=1, a copy
    otherwise (the calls' blocks of one sample are not adjacent in memory then)."""
    return y.unflatten(2, (windows.calls, windows.t_new)).movedim(2, 0).flatten(0, 1)
