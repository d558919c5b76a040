"""torch.compile as a variant: compiled (and autotuned) while the variant is prepared, never inside a timed
call, with a fresh Dynamo state per trial, and a failure to compile turned into a skip with its first line.

Every experiment with a `compiled(mode)` variant (a linear, a conv, a fused head, a whole block) compiles
through `compile_call`, so that they compare the same thing: what Inductor makes of the op.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Literal, get_args

import torch

from harness.api.experiment import VariantSkipped
from harness.api.optional import missing

# A compiled variant annotates its mode with it: the run refuses any other before measuring (harness.api.experiment).
CompileMode = Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]
COMPILE_MODES: tuple[str, ...] = get_args(CompileMode)


def frozen_module(module: torch.nn.Module, **tensors: torch.Tensor | None) -> torch.nn.Module:
    """`module` holding the workload's tensors as frozen parameters (weight=..., bias=...): CUDA-graph modes
    treat parameters as static instead of copying closure tensors into the graph's buffers on every replay."""
    for name, tensor in tensors.items():
        if tensor is not None:
            setattr(module, name, torch.nn.Parameter(tensor, requires_grad=False))
    return module


def compile_call(target: Callable[..., torch.Tensor], args: tuple[Any, ...], mode: str, device: str, *,
                 fullgraph: bool = True, what: str = "") -> tuple[Callable[[], torch.Tensor], float]:
    """(the compiled call of `target(*args)` without autograd, the seconds compiling took).

    The first call compiles and autotunes here; a mode not in COMPILE_MODES or a failed compile (Inductor
    needs a C++ compiler on the CPU, Triton on CUDA) raises VariantSkipped with the reason.
    """
    if mode not in COMPILE_MODES:
        raise VariantSkipped(f"mode={mode!r}: choose {', '.join(COMPILE_MODES)}")
    # Inductor writes Triton kernels for CUDA: without triton it fails deep inside the compile; say why here.
    if str(device).startswith("cuda") and (why := missing("triton")) is not None:
        raise VariantSkipped(f"torch.compile on CUDA {why}")
    # Past the recompile limit Dynamo silently falls back to eager: every trial starts from a fresh state.
    torch.compiler.reset()
    fn = torch.compile(target, mode=None if mode == "default" else mode, fullgraph=fullgraph, dynamic=False)

    def run() -> torch.Tensor:
        with torch.no_grad():
            return fn(*args)

    t0 = time.perf_counter()
    try:
        run()
        if str(device).startswith("cuda"):
            torch.cuda.synchronize()
    except Exception as exc:  # whatever the compiler stack raises, the variant cannot run here
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise VariantSkipped(f"torch.compile(mode={mode}){what} failed on {device}: {first[:300]}") from None
    return run, time.perf_counter() - t0
