"""The output cast of the decoded frames (aten.to, float32 -> uint8): fewer bytes, fewer passes.

The report's two cast cards per resolution are one `unrolled_elementwise_kernel` each (the dynamic-cast
path), reading float32 frames [1, 3, T, H, W] and writing uint8 (T = 9 and 12; see
harness/workloads/cast.py for how that is inferred). The cast is pure data movement: 5 bytes per element
at best. Levers:

- `torch_cast(memory_format, out)`: the same torch cast, with the frames in the layout a channels_last_3d
  VAE head would hand over (the output keeps it; for a dense elementwise cast the layout should not
  change the bytes, so this is a control), and/or into a preallocated output (`out.copy_(frames)`: no
  allocation per call; on a CPU a fresh large buffer costs page faults on first touch, on a GPU the
  caching allocator makes it nearly free).
- `vectorized_kernel(block_size, vector_width)`: a Triton CUDA kernel (Triton ships with torch's CUDA
  wheels) in which each program of `block_size` threads casts `block_size * vector_width` contiguous
  elements, so each thread handles `vector_width` of them (Triton issues the widest loads the alignment
  allows, at most 16 bytes per access). CUDA only: skipped with the reason on a CPU or without Triton.
- `fused_producer(mode)`: the cast fused into the op that produces the frames. The real producer is the
  VAE decoder's head (conv3d 96->3, then clamp), and fusing the cast into that conv's epilogue is not
  expressible here (cuDNN offers no such epilogue through torch). What is expressible, and what the
  model's postprocess does, is the elementwise chain after the head: `((x.clamp(-1, 1) + 1) * 127.5)`
  then `.to(uint8)`. `mode=compiled` runs that chain as one torch.compile (Inductor) kernel that reads
  float32 x once and writes uint8; `mode=eager` runs the same chain op by op (four passes over the
  frames, three float32 intermediates), which is what a model without the fusion pays. Both do more
  than the baseline (which only casts): a fused time at or below the cast-only baseline means the
  cast costs nothing once fused into its producer.

Correctness: every variant must reproduce the baseline's uint8 output exactly (tolerance 0). The cast is
deterministic; a variant that rounds to nearest instead of truncating like `.to(uint8)` differs by one
LSB (max_rel = 1/254 ~ 3.9e-3) on about half the elements, and that is a different op, not noise, so
even one LSB is not admitted. For `fused_producer` the producer's input x is made from the frames at
set-up (x = frames / 127.5 - 1 in float32, then nudged by a few ulps where float rounding would move the
truncation across an integer), so that the eager chain reproduces the baseline's output bit for bit; the
compiled kernel must then match it too (a kernel that contracts the affine into an FMA and rounds
differently at an integer boundary is caught). On these frames (uniform in [0, 255)) x stays in
[-1, 1), so the clamp never binds; it is kept because the model's chain has it.

Semantics of the uint8 cast: torch converts float -> int64 -> uint8 (truncation toward zero, then wrap);
the Triton kernel does the same. On the frames' range [0, 255) that is plain truncation.
"""

from __future__ import annotations

from typing import Any, Callable, Literal

import torch

from harness.api.experiment import Experiment, Prepared, VariantSkipped
from harness.api.optional import install_hint
from harness.cards.fields import DRAM_BANDWIDTH_BOUND, LATENCY_OR_OCCUPANCY_LIMITED, UNRESOLVED
from harness.workloads.base import Workload
from harness.workloads.params import parse_dtype

EXPERIMENT = Experiment(
    name="output_cast",
    op_kinds=("cast",),
    hypothesis="the frames' cast moves fewer DRAM bytes and takes less time when it writes into a reused "
    "buffer, runs as a tuned vectorized kernel, or is fused into the producer's postprocess",
    check="bytes_and_time_fall",
    classes=(DRAM_BANDWIDTH_BOUND, LATENCY_OR_OCCUPANCY_LIMITED, UNRESOLVED),
    workload_dtype="float32",
)

CastFormat = Literal["contiguous", "channels_last_3d"]
FORMATS = {"contiguous": torch.contiguous_format, "channels_last_3d": torch.channels_last_3d}
CastOut = Literal["new", "preallocated"]
ProducerMode = Literal["eager", "compiled"]
BlockSize = Literal[32, 64, 128, 256, 512, 1024]  # whole warps, a power of 2


def _dst(w: Workload) -> torch.dtype:
    return parse_dtype(w.shape["dst_dtype"])


def _dense(frames: torch.Tensor) -> bool:
    return frames.is_contiguous() or (frames.dim() == 5 and frames.is_contiguous(memory_format=torch.channels_last_3d))


@EXPERIMENT.baseline
def torch_to(w: Workload) -> Callable[[], torch.Tensor]:
    """The report's op: `frames.to(dst)`, a new output tensor per call."""
    return w.run


@EXPERIMENT.variant
def torch_cast(w: Workload, memory_format: CastFormat = "contiguous", out: CastOut = "new") -> Prepared:
    """torch's cast with the frames in `memory_format` (converted at set-up), into a new or reused output."""
    frames = w.inputs["frames"]
    if memory_format == "channels_last_3d" and frames.dim() != 5:
        raise VariantSkipped(f"channels_last_3d needs 5-D frames, these are {tuple(frames.shape)}")
    frames = frames.contiguous(memory_format=FORMATS[memory_format])
    dst = _dst(w)
    if out == "new":

        def fn() -> torch.Tensor:
            return frames.to(dst)
    else:
        buffer = torch.empty_like(frames, dtype=dst)  # keeps the frames' layout

        def fn() -> torch.Tensor:
            return buffer.copy_(frames)

    return Prepared(fn, facts={"memory_format": memory_format, "out": out})


# ---------------------------------------------------------------------------------------------
# A Triton CUDA kernel

_TRITON_KERNEL: Any = None


def _triton_kernel() -> Any:
    global _TRITON_KERNEL
    if _TRITON_KERNEL is not None:
        return _TRITON_KERNEL
    try:
        import triton
        import triton.language as tl
    except ImportError as exc:
        raise VariantSkipped(f"needs triton ({exc}): {install_hint('triton')}") from None

    @triton.jit
    def cast_kernel(src, dst, n, BLOCK: tl.constexpr, VIA_INT64: tl.constexpr):
        start = tl.program_id(0).to(tl.int64) * BLOCK
        offsets = start + tl.arange(0, BLOCK)
        inside = offsets < n
        x = tl.load(src + offsets, mask=inside)
        if VIA_INT64:  # torch's float -> uint8: truncate to int64, then wrap
            y = x.to(tl.int64).to(dst.dtype.element_ty)
        else:
            y = x.to(dst.dtype.element_ty)
        tl.store(dst + offsets, y, mask=inside)

    _TRITON_KERNEL = (triton, cast_kernel)
    return _TRITON_KERNEL


@EXPERIMENT.variant(needs=("cuda", "triton"))
def vectorized_kernel(w: Workload, block_size: BlockSize = 256, vector_width: int = 4) -> Prepared:
    """A Triton cast kernel: `block_size` threads per program, `vector_width` elements per thread (CUDA)."""
    if vector_width < 1 or vector_width & (vector_width - 1):
        raise VariantSkipped(f"vector_width={vector_width}: a power of 2 (Triton blocks are powers of 2)")
    if not w.device.startswith("cuda"):
        raise VariantSkipped(f"vectorized_kernel is a Triton CUDA kernel; needs CUDA (device is {w.device})")
    triton, kernel = _triton_kernel()
    frames = w.inputs["frames"]
    if not _dense(frames):
        raise VariantSkipped("vectorized_kernel needs dense frames (contiguous or channels_last_3d)")
    dst = _dst(w)
    out = torch.empty_like(frames, dtype=dst)  # same strides as the frames: storage order matches
    n = frames.numel()
    block = block_size * vector_width
    grid = (triton.cdiv(n, block),)
    via_int64 = dst == torch.uint8 and frames.dtype.is_floating_point
    num_warps = max(1, block_size // 32)

    def fn() -> torch.Tensor:
        kernel[grid](frames, out, n, BLOCK=block, VIA_INT64=via_int64, num_warps=num_warps)
        return out

    try:
        fn()
        torch.cuda.synchronize()
    except Exception as exc:  # a compile or launch failure of this configuration
        raise VariantSkipped(f"Triton cast kernel (block {block_size} x {vector_width}) failed: {exc}") from None
    return Prepared(fn, facts={"kernel": "triton", "block_size": block_size, "vector_width": vector_width,
                               "elements_per_program": block, "programs": grid[0], "num_warps": num_warps})


# ---------------------------------------------------------------------------------------------
# Fused into the producer's postprocess


def postprocess(x: torch.Tensor, dst: torch.dtype = torch.uint8) -> torch.Tensor:
    """The decoded frames' postprocess: [-1, 1] -> [0, 255], then the baseline's cast (truncation)."""
    return ((x.clamp(-1.0, 1.0) + 1.0) * 127.5).to(dst)


_COMPILED: dict[tuple[Any, ...], Callable[[torch.Tensor], torch.Tensor]] = {}


def _compiled(x: torch.Tensor, dst: torch.dtype) -> Callable[[torch.Tensor], torch.Tensor]:
    key = (x.device.type, x.device.index, tuple(x.shape), x.stride(), x.dtype, dst)
    if key not in _COMPILED:
        _COMPILED[key] = torch.compile(lambda t: postprocess(t, dst), dynamic=False, fullgraph=True)
    return _COMPILED[key]


def producer_input(frames: torch.Tensor, target: torch.Tensor, max_steps: int = 64) -> tuple[torch.Tensor, int]:
    """x in [-1, 1] with postprocess(x) == target, from frames ~ target: x = frames / 127.5 - 1, nudged.

    Float rounding of the affine can move a value across an integer, where truncation then differs by
    one; such elements are moved by one ulp at a time toward the side that truncates to `target`.
    Returns x and how many elements were nudged.
    """
    if frames.dtype not in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        raise VariantSkipped(f"fused_producer needs floating frames, these are {frames.dtype}")
    x = (frames.double() / 127.5 - 1.0).to(frames.dtype)
    nudged = torch.zeros_like(x, dtype=torch.bool)
    for _ in range(max_steps):
        got = postprocess(x, target.dtype)
        low, high = got.to(torch.int16) < target.to(torch.int16), got.to(torch.int16) > target.to(torch.int16)
        if not bool(low.any() or high.any()):
            return x, int(nudged.sum())
        x = torch.where(low, torch.nextafter(x, torch.full_like(x, 2.0)), x)
        x = torch.where(high, torch.nextafter(x, torch.full_like(x, -2.0)), x)
        nudged |= low | high
    raise VariantSkipped("fused_producer: could not make a producer input that reproduces the baseline output "
                         "(frames outside [0, 255]?)")


@EXPERIMENT.variant
def fused_producer(w: Workload, mode: ProducerMode = "compiled") -> Prepared:
    """The postprocess chain clamp -> affine -> cast, eager (4 passes) or as one compiled kernel."""
    dst = _dst(w)
    if dst != torch.uint8:
        raise VariantSkipped(f"fused_producer models the [-1, 1] -> uint8 postprocess; the cast here is to {dst}")
    frames = w.inputs["frames"]
    target = frames.to(dst)  # the baseline's output, which the chain must reproduce
    x, nudged = producer_input(frames, target)
    if mode == "eager":

        def fn() -> torch.Tensor:
            return postprocess(x, dst)
    else:
        compiled = _compiled(x, dst)
        try:
            compiled(x)  # compiles here, not in the timed calls
        except Exception as exc:  # no C++ compiler, no Triton, an Inductor failure: say which
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise VariantSkipped(f"torch.compile of the postprocess failed on {w.device}: {first[:300]}") from None

        def fn() -> torch.Tensor:
            return compiled(x)
    # Bytes the chain must move: one pass reads x and writes uint8; eager adds three float round trips.
    src_b, dst_b = x.element_size(), torch.empty((), dtype=dst).element_size()
    per_element = src_b + dst_b if mode == "compiled" else 3 * 2 * src_b + src_b + dst_b
    return Prepared(fn, facts={"mode": mode, "chain": "((x.clamp(-1, 1) + 1) * 127.5).to(uint8)",
                               "producer_input": f"x = frames / 127.5 - 1 (float32), {nudged} element(s) "
                               "nudged by ulps so the eager chain reproduces the baseline exactly",
                               "passes_over_frames": 1 if mode == "compiled" else 4,
                               "min_bytes_moved": float(x.numel() * per_element)})
