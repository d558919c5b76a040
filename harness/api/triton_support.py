"""Triton, where it is installed, for the experiments' own kernels: the optional import, the math mode a
float32 tl.dot follows, and what the compiler assigned to a launch.

Triton ships with torch's CUDA wheels, not with the CPU ones (nor with the base install: the `triton`
extra brings it); a kernel module imports `triton`, `tl` and `grouped_tile` from here and defines its
kernels only when `triton is not None`; its variants register `needs=("cuda", "triton")`, so the search
does not draw them without it, and skip with `TRITON_MISSING` if called anyway. Every name here exists
either way, so importing a kernel module never fails. Under TRITON_INTERPRET=1 the same kernels run on CPU
tensors (the tests).
"""

from __future__ import annotations

import time
from typing import Any, Callable

import torch

from harness.api.experiment import VariantSkipped
from harness.api.optional import install_hint
from harness.api.tiles import TileConfig, device_limits, launch_problem

try:
    import triton
    import triton.language as tl
except ImportError as _exc:  # pragma: no cover - depends on the install
    triton = None
    tl = None
    TRITON_MISSING: str | None = f"needs triton ({_exc}): {install_hint('triton')}"
else:
    TRITON_MISSING = None

if triton is not None:

    @triton.jit
    def grouped_tile(M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
        """This program's output tile (pid_m, pid_n) in grouped order: GROUP_M row tiles are walked
        together, so the weight's column tiles they share stay in L2 (Triton's matmul tutorial)."""
        pid = tl.program_id(axis=0)
        num_pid_m = tl.cdiv(M, BLOCK_M)
        num_pid_n = tl.cdiv(N, BLOCK_N)
        num_pid_in_group = GROUP_M * num_pid_n
        first_pid_m = (pid // num_pid_in_group) * GROUP_M
        group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
        pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
        pid_n = (pid % num_pid_in_group) // group_size_m
        return pid_m, pid_n

else:  # pragma: no cover - depends on the install

    def grouped_tile(*args: Any, **kwargs: Any) -> Any:
        """Stands in for the jitted helper without Triton, so a kernel module imports (and defines no kernel)."""
        raise VariantSkipped(TRITON_MISSING or "needs triton")


__all__ = ["TRITON_MISSING", "check_launchable", "compiled_facts", "first_launch", "grouped_tile", "input_precision",
           "tl", "triton"]


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


def check_launchable(config: TileConfig, elem_size: int, device: str) -> None:
    """Skip (VariantSkipped, with why) a tile that cannot launch on the device's SMs (Hopper's without one),
    before anything is compiled; then a device without CUDA or an install without Triton."""
    limits, limits_source = device_limits(device)
    problem = launch_problem(config, elem_size, limits)
    if problem is not None:
        raise VariantSkipped(f"cannot launch: {problem} ({limits_source})")
    missing = [] if str(device).startswith("cuda") else [f"needs CUDA: a Triton GPU kernel (device is {device})"]
    if triton is None:
        missing.append(TRITON_MISSING or "triton not installed")
    if missing:
        raise VariantSkipped("; ".join(missing))


def first_launch(launch: Callable[[], tuple[Any, Any]], device: str) -> dict[str, Any]:
    """Launch once here, so the kernel compiles while the variant is prepared, not in a timed call;
    `launch` returns (output, the launch's compiled kernel). The facts: compile seconds and what the
    compiler assigned. Resources the compiler refuses make the variant a skip."""
    if triton is None:
        raise VariantSkipped(TRITON_MISSING or "needs triton")
    t0 = time.perf_counter()
    try:
        _, compiled = launch()
        if str(device).startswith("cuda"):
            torch.cuda.synchronize()
    except triton.OutOfResources as exc:
        raise VariantSkipped(f"cannot launch: {exc}") from None
    return {"compile_s": round(time.perf_counter() - t0, 3), **compiled_facts(compiled)}
