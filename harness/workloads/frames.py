"""A conv3d's k calls: consecutive streaming windows of one frame sequence (`Workload.calls` of a conv3d).

The realtime decoder runs each causal conv once per call on the call's T_new new frames after the
kT-1 frames it cached from the call before (dilated: d_t x (kT-1)); with no temporal stride or padding
its output is T_new frames. k consecutive calls read overlapping windows of one frame sequence, so one
call on k x T_new + d_t x (kT-1) frames computes all k calls' outputs (what vae_conv_kernels'
frame_batching times).

T_new comes from the card's shape: input T minus the overlap (= the output's T). A 3-tap kernel on one
new frame per call reads T_in = k + 2 frames for k calls; the report's kT=3 cards have T = 3, 4, 6: 1,
2 or 4 new frames after the 2 cached ones (docs/domain.md), so k calls read k + 2, 2k + 2 or 4k + 2.
A kT=1 kernel shares no frames: k calls are then k x T_new frames concatenated, the same arithmetic
with no overlap. Impossible (a WorkloadError with the reason): a temporal stride (the outputs of
consecutive calls no longer start T_new frames apart) or temporal padding (each separate call pads its
own window, one call on the whole sequence only its ends).

Call 0's window is exactly the workload's input; the later calls' new frames are seeded at the input's
spread (per draw: a redrawn workload's later frames are its own), in the input's memory format. Each
call's reference is the conv on its own window; `CallBatch.reference` stacks them on dim 0, the form
`calls_on_dim0` gives the one call's output. The windows' type, `FrameWindows`, is harness.workloads.base's,
beside the CallBatch that carries them; `frame_windows` here says where a shape's calls read.
"""

from __future__ import annotations

from typing import Any

import torch

from harness.workloads.base import CallBatch, FrameWindows, Workload, bind_call, draw_key, draws_of
from harness.workloads.params import WorkloadError


def frame_windows(shape: dict[str, Any], calls: int) -> FrameWindows:
    """The windows of `calls` consecutive calls of this conv3d shape; WorkloadError where they cannot be one call."""
    stride_t, padding_t, dilation_t = (int(shape[key][0]) for key in ("stride", "padding", "dilation"))
    if stride_t != 1:
        raise WorkloadError(f"temporal stride {stride_t}: consecutive calls' outputs would not start T_new frames "
                            "apart, so one call on their frames is not their k calls")
    if padding_t != 0:
        raise WorkloadError(f"temporal padding {padding_t}: each call pads its own window with zero frames, one "
                            "call on the whole sequence only its ends")
    t_in, k_t = int(shape["input"][2]), int(shape["weight"][2])
    return FrameWindows(calls=calls, t_in=t_in, overlap=dilation_t * (k_t - 1))


def memory_format_of(t: torch.Tensor) -> torch.memory_format:
    """channels_last_3d for a tensor in that layout (and not also plain contiguous), else contiguous."""
    if t.is_contiguous(memory_format=torch.channels_last_3d) and not t.is_contiguous():
        return torch.channels_last_3d
    return torch.contiguous_format


def calls_on_dim0(y: torch.Tensor, windows: FrameWindows) -> torch.Tensor:
    """The output of one call on the whole sequence, [N, Cout, k x T_new, Ho, Wo], as the k calls' outputs
    stacked on dim 0 ([k x N, Cout, T_new, Ho, Wo], call-major, as CallBatch.reference stacks them): a view
    for N=1, a copy otherwise (the calls' blocks of one sample are not adjacent in memory then)."""
    return y.unflatten(2, (windows.calls, windows.t_new)).movedim(2, 0).flatten(0, 1)


def streaming_calls(w: Workload, k: int) -> CallBatch:
    """k consecutive calls of a conv3d workload: windows of one sequence, its input then seeded new frames."""
    windows = frame_windows(w.shape, k)
    x = w.inputs["input"]
    n, c, _, h, width = x.shape
    draws = draws_of(w)
    later = draws.spreads["input"].draw(f"later_frames@{draw_key(w.draw)}", (n, c, (k - 1) * windows.t_new, h, width),
                                        draws.seed)
    layout = memory_format_of(x)
    frames = torch.cat([x, later.to(device=x.device, dtype=x.dtype)], dim=2).contiguous(memory_format=layout)
    others = [bind_call(w, {"input": frames[:, :, windows.window(j)].contiguous(memory_format=layout)})
              for j in range(1, k)]
    inputs = [w.inputs, *(call_inputs for call_inputs, _ in others)]
    references = [w.reference, *(bound.reference for _, bound in others)]
    return CallBatch(k, inputs, {"input": frames}, references, windows=windows)
