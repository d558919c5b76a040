"""How a CPU peak is measured (harness.profile.cpu_peaks): square products (`torch.mm` and oneDNN's 1x1 convolution)
of sizes grown while the next one fits the budget, taken in turns in consecutive tries, and a copy of a buffer
larger than the last-level cache.

Each returns the peak (the best single product or copy), how it was obtained, and each try's own best: the
spread a prediction's interval states (harness.predict.device).
"""

from __future__ import annotations

import datetime as _dt
import math
import time
from typing import Any, Callable

_MIN_BW_BUFFER = 128 * 2**20
_MAX_BW_BUFFER = 2**30
MATMUL_SIZES = (256, 512, 1024, 2048, 4096)
_MATMUL_MAX_ROUNDS = 200
TRIES = 3

Measured = tuple[float, str, list[float]]  # the peak, how it was obtained, each try's best
MatmulMeasured = tuple[float, str, list[float], dict[int, float]]  # ... and the best rate at each size


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def tries(rates: list[float], count: int = TRIES) -> list[float]:
    """The best of each of `count` consecutive runs of `rates` (in the order measured)."""
    size = max(1, math.ceil(len(rates) / count))
    return [max(rates[i:i + size]) for i in range(0, len(rates), size)]


def grown_sizes(seconds_at: Callable[[int], float], budget_s: float, sizes: tuple[int, ...] = MATMUL_SIZES
                ) -> list[tuple[int, float]]:
    """The sizes whose products a peak is taken from, each with its first warm product's seconds: from the
    smallest, doubling while the next one's product (8x the work) fits a quarter of `budget_s` (`seconds_at(n)`:
    the seconds of one warm product of size n; it raises for a dtype torch cannot multiply)."""
    kept = []
    for n in sizes:
        seconds = seconds_at(n)
        kept.append((n, seconds))
        if 8 * seconds > budget_s / 4:
            break
    return kept


TALL = 8  # the convolution's rows per column of its weight: oneDNN's GEMM nears its peak only on tall products


def _products(dtype: Any, n: int) -> dict[str, tuple[Callable[[], Any], float]]:
    """The ways to multiply at size n this module times, each with its FLOPs: `torch.mm` of two n x n matrices
    (the BLAS torch was built with), and a [TALL*n, n] x [n, n] product as a 1x1 channels-last convolution
    (oneDNN's GEMM, as the convolutions run), since a CPU's BLAS need not be its fastest GEMM: on an AMD EPYC,
    MKL's float32 torch.mm reached 222 GFLOP/s where oneDNN reached 490, as did a 3x3x3 convolution (a peak
    below what an op achieves is a wrong peak)."""
    import torch
    import torch.nn.functional as F

    a, b, c = (torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype), torch.empty(n, n, dtype=dtype))
    rows = torch.randn(1, n, TALL * n // 32, 32).to(dtype).contiguous(memory_format=torch.channels_last)
    weight = torch.randn(n, n, 1, 1).to(dtype).contiguous(memory_format=torch.channels_last)
    return {"torch.mm": (lambda: torch.mm(a, b, out=c), 2.0 * n**3),
            "1x1 channels-last conv2d": (lambda: F.conv2d(rows, weight), 2.0 * TALL * n**3)}


def measure_matmul(dtype_name: str, budget_s: float) -> MatmulMeasured:
    """Best FLOPs/t over the products of the grown sizes, by every way of `_products`, taken in turns until the
    budget ends (a way that fails for the dtype is left out; all failing raises); and the best rate at each size
    (how far from its peak a product of another size runs: harness.predict.precision's efficiency range).

    Taking turns over sizes and keeping the best single product makes the peak robust to a
    shared, noisy machine (rates swing by 2x between moments on a cloud VM) and to a size that
    happens to suit the BLAS blocking badly.
    """
    import torch

    dtype = getattr(torch, dtype_name)
    deadline = time.perf_counter() + budget_s
    products: dict[tuple[str, int], tuple[Callable[[], Any], float]] = {}

    def first(n: int) -> float:
        seconds, failure = [], None
        for way, (product, flops) in _products(dtype, n).items():
            try:
                product()  # warm-up; raises if this way cannot multiply the dtype
            except (RuntimeError, TypeError, NotImplementedError) as exc:
                failure = exc
                continue
            t0 = time.perf_counter()
            product()
            seconds.append(time.perf_counter() - t0)
            products[way, n] = (product, flops)
        if not seconds:
            raise failure or RuntimeError(f"no way to multiply {dtype_name}")
        return max(seconds)

    sizes = [n for n, _ in grown_sizes(first, budget_s)]
    best_rate = {key: 0.0 for key in products if key[1] in sizes}
    rates: list[float] = []  # each round's best product
    rounds = 0
    while True:
        best = 0.0
        for key in best_rate:
            product, flops = products[key]
            t0 = time.perf_counter()
            product()
            dt = time.perf_counter() - t0
            if dt > 0:
                best_rate[key] = max(best_rate[key], flops / dt)
                best = max(best, flops / dt)
        rates.append(best)
        rounds += 1
        if rounds >= _MATMUL_MAX_ROUNDS or (rounds >= TRIES and time.perf_counter() >= deadline):
            break
    way_best, n_best = max(best_rate, key=lambda key: best_rate[key])
    per_way = "; ".join(f"{way}: " + ", ".join(f"n={n}: {rate / 1e9:.1f}" for (w, n), rate in best_rate.items()
                                                 if w == way) for way in dict.fromkeys(w for w, _ in best_rate))
    return best_rate[way_best, n_best], (
        f"measured {now()}, {dtype_name}, best single product over {rounds} rounds of sizes "
        f"{'/'.join(str(n) for n in sizes)} (best GFLOP/s {per_way}); peak by {way_best} at n={n_best}"
    ), tries(rates), {n: max(rate for (_, m), rate in best_rate.items() if m == n) for n in sizes}


def measure_bandwidth(budget_s: float, llc: int | None) -> Measured:
    import torch

    size = max(4 * (llc or 0), _MIN_BW_BUFFER)
    size = min(size, _MAX_BW_BUFFER)
    src = torch.ones(size, dtype=torch.uint8)
    dst = torch.zeros(size, dtype=torch.uint8)
    dst.copy_(src)  # fault in the pages
    times: list[float] = []
    deadline = time.perf_counter() + budget_s
    while len(times) < 20 and (len(times) < 2 * TRIES or time.perf_counter() < deadline):
        t0 = time.perf_counter()
        dst.copy_(src)
        times.append(time.perf_counter() - t0)
    del src, dst
    rates = [2.0 * size / t for t in times if t > 0]
    return max(rates), (
        f"measured {now()}, copy_ of a {size / 2**20:.0f} MiB buffer "
        f"(bytes = read + written), best of {len(times)}"
    ), tries(rates)
