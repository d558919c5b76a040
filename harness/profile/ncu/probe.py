"""Whether ncu can profile on this machine at all, asked once before the first card; and which ncu it is.

An installed ncu may still be unable to profile: no permission for the counters (ERR_NVGPUCTRPERM), a
runtime that hides them ("Failed to initialize the profiler: LibraryNotLoaded"), or a profiler that
starts but records nothing. `profiler=auto` would then fail every trial, so it profiles one tiny
kernel first (`probe_ncu`) and, on a failure, uses the CUDA trace with a note naming ncu's error.
The tiny program is the one the GPU check's ncu_preflight step (scripts/gpu_check_steps/ncu_steps.py)
runs: a PTX kernel launched through the CUDA driver API with ctypes (it starts in a fraction of a
second, where importing torch takes seconds), torch where libcuda will not load that way.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from harness.profile.ncu.failures import NcuFailure, deadline_exceeded, detect, ncu_missing
from harness.profile.ncu.metrics import SENTINEL_METRIC
from harness.profile.ncu.parse import NcuKernelRecord, NcuParseError, parse_text
from harness.profile.ncu.runner import run_command

PROBE_DEADLINE_S = 60.0  # ncu's first start on a machine can take tens of seconds; one kernel takes less
VERSION_DEADLINE_S = 30.0

TINY_KERNEL = r'''
import ctypes, sys
PTX = b"""
.version 7.0
.target sm_50
.address_size 64
.visible .entry tiny(.param .u64 p_out)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [p_out];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, 42;
    st.global.u32 [%rd2], %r1;
    ret;
}
"""
def driver():
    cuda = ctypes.CDLL("libcuda.so.1")
    def ok(code, what):
        if code != 0:
            raise RuntimeError(f"{what} returned CUDA error {code}")
    ok(cuda.cuInit(0), "cuInit")
    dev, ctx, mod, fn = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    ok(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    ok(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    ok(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    ok(cuda.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(PTX)), "cuModuleLoadData")
    ok(cuda.cuModuleGetFunction(ctypes.byref(fn), mod, b"tiny"), "cuModuleGetFunction")
    ptr = ctypes.c_uint64()
    ok(cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(4)), "cuMemAlloc")
    params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(ptr), ctypes.c_void_p))
    ok(cuda.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, None, params, None), "cuLaunchKernel")
    ok(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
    host = ctypes.c_uint32()
    ok(cuda.cuMemcpyDtoH_v2(ctypes.byref(host), ptr, ctypes.c_size_t(4)), "cuMemcpyDtoH")
    return host.value
try:
    print("tiny kernel (driver API) wrote", driver())
except Exception as exc:
    print("driver API path failed:", exc, "- trying torch", file=sys.stderr)
    import torch
    x = torch.ones(4096, device="cuda")
    print("tiny kernel (torch) wrote", float((x * 2).sum()))
'''

# ncu executable -> the probe's failure (None: it profiled), and -> its version line; once per process.
_PROBED: dict[str, NcuFailure | None] = {}
_VERSIONS: dict[str, str] = {}


@dataclass(frozen=True)
class ProbeOutcome:
    executable: str
    failure: NcuFailure | None  # None: ncu profiled the tiny kernel

    @property
    def ok(self) -> bool:
        return self.failure is None


def probe_command(ncu: str, python: str | None = None) -> list[str]:
    """ncu profiling the one kernel of TINY_KERNEL, printing its duration as a raw-page CSV."""
    return [ncu, "--metrics", SENTINEL_METRIC, "--clock-control", "none", "--target-processes", "all",
            "--csv", "--page", "raw", "--print-units", "base", "-c", "1",
            python or sys.executable, "-c", TINY_KERNEL]


def _timed(record: NcuKernelRecord) -> bool:
    """Whether ncu recorded a duration for this kernel (a number, not "n/a")."""
    found = record.value(SENTINEL_METRIC)
    return found is not None and isinstance(found[1], float)


def _probe(ncu: str, deadline_s: float) -> NcuFailure | None:
    try:
        result = run_command(probe_command(ncu), deadline_s)
    except FileNotFoundError:
        return ncu_missing(f"no executable {ncu!r}")
    if result.timed_out:
        return deadline_exceeded(deadline_s)
    text = result.stdout + "\n" + result.stderr
    failure = detect(text, result.returncode)
    if failure is not None:
        if failure.code == "no_kernels":  # detect's advice is about NVTX ranges, which the probe has none of
            return NcuFailure("no_kernels", "ncu profiled no kernel of a one-kernel probe program (No kernels "
                              "were profiled.): check that ncu supports this GPU and driver (`ncu --version`, "
                              "`nvidia-smi`), or use profiler=torch_cuda")
        return failure
    try:
        records = parse_text(result.stdout)
    except NcuParseError as exc:
        return NcuFailure("no_kernels", f"ncu ran the probe program but printed no kernel table ({exc}): run "
                          "`ncu --metrics gpu__time_duration.sum python -c 'import torch; torch.ones(1, "
                          "device=\"cuda\")'` to see what it prints, or use profiler=torch_cuda")
    if not any(_timed(record) for record in records):
        return NcuFailure("no_kernels", f"ncu profiled the probe kernel but recorded no {SENTINEL_METRIC}: the "
                          "counters are not readable here; use profiler=torch_cuda")
    return None


def probe_ncu(ncu: str, deadline_s: float = PROBE_DEADLINE_S) -> ProbeOutcome:
    """Whether `ncu` profiles one tiny kernel here (once per process and executable)."""
    if ncu not in _PROBED:
        _PROBED[ncu] = _probe(ncu, deadline_s)
    return ProbeOutcome(ncu, _PROBED[ncu])


def ncu_version(ncu: str) -> str:
    """The version line `ncu --version` prints ("Version 2025.3.1.0 (build ...)"), or why there is none."""
    if ncu not in _VERSIONS:
        try:
            result = run_command([ncu, "--version"], VERSION_DEADLINE_S)
        except FileNotFoundError:
            _VERSIONS[ncu] = f"unknown (no executable {ncu!r})"
        else:
            lines = [line.strip() for line in (result.stdout + "\n" + result.stderr).splitlines() if line.strip()]
            line = next((ln for ln in lines if ln.lower().startswith("version")), lines[-1] if lines else "")
            if result.timed_out or result.returncode != 0 or not line:
                _VERSIONS[ncu] = f"unknown (`{ncu} --version` exit {result.returncode}: {line or 'no output'})"
            else:
                _VERSIONS[ncu] = line
    return _VERSIONS[ncu]
