"""The profiler backends by name, one registry for the run and its worker process.

`resolve` turns `profiler.name` (auto, cpu, torch_cuda, ncu) into a backend name for a device; `make`
builds that backend. On CUDA, auto means ncu only where ncu is found and profiles one tiny kernel
(harness.profile.ncu.probe), once, before the first card: an ncu that cannot read the counters would
otherwise fail every trial. Each backend is imported only when made: ncu's and the CUDA trace's
modules stay unloaded on a CPU run.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from harness.errors import HarnessError
from harness.profile.base import Profiler


def _cpu(cfg: Mapping[str, Any]) -> Profiler:
    from harness.profile.cpu import CpuProfiler

    return CpuProfiler()


def _torch_cuda(cfg: Mapping[str, Any]) -> Profiler:
    from harness.profile.torch_cuda import TorchCudaProfiler

    return TorchCudaProfiler()


def _ncu(cfg: Mapping[str, Any]) -> Profiler:
    from harness.profile.ncu_backend import NcuProfiler

    return NcuProfiler(dict(cfg))


BACKENDS: dict[str, Callable[[Mapping[str, Any]], Profiler]] = {"cpu": _cpu, "torch_cuda": _torch_cuda, "ncu": _ncu}
# The end of every note of auto's fallback from ncu (docs/gpu.md: "the note naming ncu's error is warned").
FALLBACK = "falling back to the torch.profiler CUDA trace: metrics are estimated"


class UnknownProfiler(HarnessError):
    """A profiler name no backend has; one line naming the known ones."""


def resolve(cfg: Mapping[str, Any], device: str) -> tuple[str, list[str]]:
    """The backend `profiler.name` means on `device` (auto: ncu where it is found and profiles a tiny
    kernel, else the CUDA trace; the CPU profiler on a CPU), and the notes a fallback leaves."""
    name = str(cfg.get("name", "auto"))
    if name != "auto":
        if name not in BACKENDS:
            raise UnknownProfiler(f"profiler={name!r}: choose auto, {', '.join(BACKENDS)}")
        return name, []
    if not device.startswith("cuda"):
        return "cpu", []
    from harness.profile.ncu.probe import probe_ncu
    from harness.profile.ncu_backend import ncu_usable

    usable, found = ncu_usable(cfg)
    if not usable:
        return "torch_cuda", [f"ncu unusable ({found}); {FALLBACK}"]
    probe = probe_ncu(found)
    if probe.failure is not None:
        return "torch_cuda", [f"ncu at {found} cannot profile here ({probe.failure.code}: {probe.failure}); "
                              f"{FALLBACK}"]
    return "ncu", []


def make(name: str, cfg: Mapping[str, Any]) -> Profiler:
    """The backend `name` (a resolved name), configured by the profiler section `cfg`."""
    if name not in BACKENDS:
        raise UnknownProfiler(f"profiler={name!r}: choose {', '.join(BACKENDS)}")
    return BACKENDS[name](cfg)
