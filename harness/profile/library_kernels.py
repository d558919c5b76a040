"""What a device's libraries' kernels achieve at reference shapes, beside its peaks: the measured ranges and shares a
prediction states where a library's kernel need not run as the roofline says (harness.predict.references). Each is
a stated microbenchmark, measured once per machine and cached: a CPU's with its peaks (harness.profile.cpu_peaks),
a GPU's on its own (`gpu_reference_kernels`).

- Convolution layouts: a 3x3x3 float32 convolution at each reference shape in NCDHW and in each channels-last
  layout, timed in turns: each layout's speedup there (harness.predict.layout's library-kernel range), and the
  NCDHW time (the share of its roofline a convolution of such channels reaches: harness.predict.terms). On a GPU
  (float32 in TF32, torch's default for convolutions) the shapes are 64x the CPU's (T and H x4), as the GPU is
  about that much faster: a CPU-sized reference would time the launch.
- Few-row products: `F.linear` of 1 to 64 rows (the report's M=3 linears, and their rows batched) by a square
  weight that streams from DRAM (4x the last-level cache, at least 64 MiB) and by one that fits half of the
  last-level cache (a GPU's L2): each row count's time (harness.predict.batching: such a product runs far from its
  roofline, 3 bfloat16 rows at 34 GB/s on an AMD EPYC whose copy ran at 47 to 86, 60 rows at 70% of the math peak).

A GPU's times are CUDA events around each call; a CPU's, the wall clock.
"""

from __future__ import annotations

import functools
import json
import math
import time
from typing import Any, Callable

ROW_COUNTS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
_DRAM_MIN_BYTES = 64 * 2**20
_DRAM_MAX_BYTES = 512 * 2**20
_FEW_ROW_REPEATS = 3
DISTURBED = 1.5
FEW_ROW_DTYPES = ("float32", "bfloat16")
SCHEMA = 1

# The reference convolutions of measure_conv_layouts: 3x3x3 kernels, (Cin, Cout, output T, H, W), square ones at
# three widths and a narrow output (the kinds of convolution of a video VAE), 0.2 to 3.6 GFLOP each on a CPU (at
# 16x less the speedups swung by 0.1 between two measurements).
CONV_REFERENCES = ((64, 64, (4, 64, 32)), (128, 128, (4, 32, 32)), (256, 256, (4, 16, 16)), (64, 4, (4, 128, 64)))
GPU_SCALE = (4, 4, 1)  # T, H, W of a GPU's references over a CPU's
CONV_LAYOUTS = {"channels_last_3d": (True, True), "channels_last_input": (True, False),
                "channels_last_weight": (False, True)}  # which of input and weight are channels-last
_CONV_REPEATS = 3


def _timer(device: str) -> Callable[[Callable[[], Any]], float]:
    """Seconds of one call: CUDA events on a GPU (the kernels' time, not the launch's), else the wall clock."""
    import torch

    if not device.startswith("cuda"):
        def wall(fn: Callable[[], Any]) -> float:
            t0 = time.perf_counter()
            fn()
            return time.perf_counter() - t0
        return wall

    def events(fn: Callable[[], Any]) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    return events


def measure_conv_layouts(device: str = "cpu") -> tuple[dict[str, list[float]], list[dict[str, Any]]]:
    """For each layout of CONV_LAYOUTS, at each reference convolution, float32: the NCDHW convolution's best time
    over the layout's (its speedup); and each reference with its NCDHW best time (`cin`, `cout`, `output`,
    `seconds`). A library's kernel for channels-last tensors need not run at the NCDHW kernel's share of the peak
    (oneDNN's ran 0.94x to 1.27x its NCDHW time on an AMD EPYC): the spread is what harness.predict.layout states
    for the library's kernel choice; nor does a narrow convolution run near the peak (64 -> 4 channels at 18% of
    it there): the share its reference reached is what a convolution's compute is timed at (harness.predict.terms)."""
    import torch
    import torch.nn.functional as F

    timed = _timer(device)
    scale = GPU_SCALE if device.startswith("cuda") else (1, 1, 1)

    def fmt(tensor: Any, last: bool) -> Any:
        return tensor.contiguous(memory_format=torch.channels_last_3d) if last else tensor

    out: dict[str, list[float]] = {name: [] for name in CONV_LAYOUTS}
    references: list[dict[str, Any]] = []
    for cin, cout, shape in CONV_REFERENCES:
        t, h, w = (n * s for n, s in zip(shape, scale))
        x, weight, bias = (torch.randn(1, cin, t + 2, h + 2, w + 2, device=device),
                           torch.randn(cout, cin, 3, 3, 3, device=device), torch.randn(cout, device=device))
        forms = {"contiguous": (x, weight), **{name: (fmt(x, last_x), fmt(weight, last_w))
                                                for name, (last_x, last_w) in CONV_LAYOUTS.items()}}
        for inp, wt in forms.values():
            F.conv3d(inp, wt, bias)  # warm-up: the library picks and prepares its kernel
        best = {name: math.inf for name in forms}
        for _ in range(_CONV_REPEATS):  # in turns, so that a moment of interference meets every form alike
            for name, (inp, wt) in forms.items():
                best[name] = min(best[name], timed(functools.partial(F.conv3d, inp, wt, bias)))
        for name in CONV_LAYOUTS:
            out[name].append(best["contiguous"] / best[name])
        references.append({"cin": cin, "cout": cout, "output": [t, h, w], "seconds": best["contiguous"]})
    return out, references


def measure_few_rows(llc_bytes: int | None, device: str = "cpu") -> dict[str, dict[str, dict[str, Any]]]:
    """For each dtype of FEW_ROW_DTYPES torch can multiply, for a square weight streamed from DRAM ("dram") and one
    in half the last-level cache ("cache", where its size is known): the weight's side `n`, and the best and the
    slowest repeat's seconds of `F.linear` of each row count of ROW_COUNTS by it (`_row_times`)."""
    import torch

    sizes = {"dram": min(max(4 * (llc_bytes or 0), _DRAM_MIN_BYTES), _DRAM_MAX_BYTES)}
    if llc_bytes:
        sizes["cache"] = llc_bytes // 2
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for name in FEW_ROW_DTYPES:
        dtype, element = getattr(torch, name), torch.finfo(getattr(torch, name)).bits // 8
        for where, nbytes in sizes.items():
            n = max(64, int(math.sqrt(nbytes / element)))
            weight = torch.randn(n, n, device=device).to(dtype)
            rows = {m: torch.randn(m, n, device=device).to(dtype) for m in ROW_COUNTS}
            try:
                best, slowest = _row_times(weight, rows, _timer(device))
            except (RuntimeError, NotImplementedError):
                break
            out.setdefault(name, {})[where] = {"n": n, "seconds": {str(m): t for m, t in best.items()},
                                               "slowest": {str(m): t for m, t in slowest.items()}}
    return out


def _row_times(weight: Any, rows: dict[int, Any], timed: Callable[[Callable[[], Any]], float]
               ) -> tuple[dict[int, float], dict[int, float]]:
    """Each row count's best time, the counts in turns after a warm-up of each; then no count slower than a larger
    one (fewer rows by the same weight cannot take longer: the larger count's time bounds it). Where that bound
    cut a time by more than DISTURBED, the products are timed again and each count's best of both kept (once, a
    bfloat16 product by a weight in the cache took 4x its time at up to 12 rows in one process, and in no other).
    With each count's slowest repeat of the pass kept: how far one measurement of the product moves."""
    import torch.nn.functional as F

    def timed_all() -> tuple[dict[int, float], dict[int, float]]:
        for x in rows.values():
            F.linear(x, weight)  # warm-up: the library picks its kernel for the shape (and the weight into the cache)
        times: dict[int, list[float]] = {m: [] for m in rows}
        for _ in range(_FEW_ROW_REPEATS):
            for m, x in rows.items():
                times[m].append(timed(functools.partial(F.linear, x, weight)))
        return {m: min(t) for m, t in times.items()}, {m: max(t) for m, t in times.items()}

    best, slowest = timed_all()
    if any(t > DISTURBED * bound for t, bound in zip(best.values(), _bounded(best).values())):
        again, slowest = timed_all()
        best = {m: min(t, again[m]) for m, t in best.items()}
    return _bounded(best), _bounded(slowest)


def _bounded(seconds: dict[int, float]) -> dict[int, float]:
    """Each count's time, at most any larger count's."""
    out, bound = {}, math.inf
    for m in sorted(seconds, reverse=True):
        bound = min(bound, seconds[m])
        out[m] = bound
    return dict(sorted(out.items()))


def gpu_reference_kernels(device: str) -> dict[str, Any]:
    """A GPU's reference kernels (`conv_layouts`, `conv_references`, `few_rows`), measured once per GPU model and
    torch version and cached beside the CPU's peaks (the L2 stands for the last-level cache); {} where they cannot
    be measured, with a warning."""
    import hashlib
    import warnings

    import torch

    from harness.cards.atomic import write_json_atomic
    from harness.profile.cpu_peaks import cache_dir

    props = torch.cuda.get_device_properties(torch.device(device))
    key = {"gpu": props.name, "torch_version": torch.__version__, "schema": SCHEMA}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    path = cache_dir() / f"gpu_references-{digest}.json"
    try:
        cached = json.loads(path.read_text(encoding="utf-8"))
        if cached.get("key") == key:
            return dict(cached["kernels"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    try:
        layouts, references = measure_conv_layouts(device)
        kernels = {"conv_layouts": layouts, "conv_references": references,
                   "few_rows": measure_few_rows(getattr(props, "L2_cache_size", None) or None, device)}
    except (RuntimeError, TypeError, NotImplementedError) as exc:
        warnings.warn(f"the GPU's reference kernels could not be measured ({str(exc).splitlines()[0][:200]}): "
                      "predictions state no range from them", RuntimeWarning, stacklevel=2)
        return {}
    try:
        write_json_atomic(path, {"key": key, "kernels": kernels})
    except OSError as exc:
        warnings.warn(f"could not cache the GPU's reference kernels at {path} ({exc})", RuntimeWarning, stacklevel=2)
    return kernels
