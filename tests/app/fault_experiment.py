"""A test-only experiment whose variants misbehave on demand (tests/app/test_fault_injection.py).

`fault(kind)` runs the card's conv3d after misbehaving on its first call (the correctness call):
ok, raise, segfault, oom (an 8 GiB allocation, over the RLIMIT_AS the test sets), cuda_oom
(torch.OutOfMemoryError as CUDA raises it), hang, exit (os._exit(3)), or wait_kill (write the pid to
$HARNESS_FAULT_PID_FILE, then hang until the test kills the process). `pause(seconds)` is correct but
sleeps on its first call, so a trial is reliably in flight for that long (signal tests).
The baseline misbehaves as $HARNESS_FAULT_BASELINE says (default ok), when it is prepared.
"""

from __future__ import annotations

import ctypes
import os
import time
from typing import Callable

import torch
import torch.nn.functional as F

from harness.api.experiment import Experiment
from harness.workloads.base import Workload

EXPERIMENT = Experiment(
    name="fault_injection",
    op_kinds=("conv3d",),
    hypothesis="a variant that misbehaves is recorded as failed, with its reason, and the search goes on",
    check="effective_flops",
)


def misbehave(kind: str) -> None:
    if kind == "ok":
        return
    if kind == "raise":
        raise ValueError("injected failure\nand a second line the reason leaves out")
    if kind == "segfault":
        ctypes.string_at(0)  # reads address 0: SIGSEGV
    elif kind == "oom":
        torch.empty(8 * 2**30, dtype=torch.uint8)  # never touched: only the address space is asked for
    elif kind == "cuda_oom":
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB (injected)")
    elif kind == "hang":
        time.sleep(3600)
    elif kind == "exit":
        os._exit(3)
    elif kind == "wait_kill":
        path = os.environ["HARNESS_FAULT_PID_FILE"]
        with open(f"{path}.tmp", "w", encoding="ascii") as handle:
            handle.write(str(os.getpid()))
        os.replace(f"{path}.tmp", path)
        time.sleep(3600)
    raise ValueError(f"fault kind {kind!r} did not fault")


def _conv(w: Workload) -> Callable[[], torch.Tensor]:
    x, weight, bias = w.inputs["input"], w.inputs["weight"], w.inputs.get("bias")
    s = w.shape
    return lambda: F.conv3d(x, weight, bias, s["stride"], s["padding"], s["dilation"], s["groups"])


@EXPERIMENT.baseline
def base(w: Workload) -> Callable[[], torch.Tensor]:
    misbehave(os.environ.get("HARNESS_FAULT_BASELINE", "ok"))
    return _conv(w)


@EXPERIMENT.variant
def fault(w: Workload, kind: str = "ok") -> Callable[[], torch.Tensor]:
    conv = _conv(w)
    calls = [0]

    def run() -> torch.Tensor:
        calls[0] += 1
        if calls[0] == 1:
            misbehave(kind)
        return conv()

    return run


@EXPERIMENT.variant
def ok(w: Workload, tag: int = 0) -> Callable[[], torch.Tensor]:
    return _conv(w)


@EXPERIMENT.variant
def pause(w: Workload, seconds: float = 2.0) -> Callable[[], torch.Tensor]:
    conv = _conv(w)
    calls = [0]

    def run() -> torch.Tensor:
        calls[0] += 1
        if calls[0] == 1:
            time.sleep(float(seconds))
        return conv()

    return run
