"""How a CPU peak is measured (harness.profile.cpu_peaks): square `torch.mm`s of sizes grown while the next one fits
the budget, taken in turns in consecutive tries, and a copy of a buffer larger than the last-level cache.

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


def measure_matmul(dtype_name: str, budget_s: float) -> Measured:
    """Best 2*n**3/t over square `torch.mm`s of the grown sizes, taken in turns until the budget ends.

    Taking turns over sizes and keeping the best single product makes the peak robust to a
    shared, noisy machine (rates swing by 2x between moments on a cloud VM) and to a size that
    happens to suit the BLAS blocking badly.
    """
    import torch

    dtype = getattr(torch, dtype_name)
    deadline = time.perf_counter() + budget_s
    operands: dict[int, tuple[Any, Any, Any]] = {}

    def first(n: int) -> float:
        a, b, c = (torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype), torch.empty(n, n, dtype=dtype))
        torch.mm(a, b, out=c)  # warm-up; raises if the dtype is unsupported
        t0 = time.perf_counter()
        torch.mm(a, b, out=c)
        operands[n] = (a, b, c)
        return time.perf_counter() - t0

    sizes = [n for n, _ in grown_sizes(first, budget_s)]
    best_rate = {n: 0.0 for n in sizes}
    rates: list[float] = []  # each round's best product
    rounds = 0
    while True:
        best = 0.0
        for n in sizes:
            a, b, c = operands[n]
            t0 = time.perf_counter()
            torch.mm(a, b, out=c)
            dt = time.perf_counter() - t0
            if dt > 0:
                best_rate[n] = max(best_rate[n], 2.0 * n**3 / dt)
                best = max(best, 2.0 * n**3 / dt)
        rates.append(best)
        rounds += 1
        if rounds >= _MATMUL_MAX_ROUNDS or (rounds >= TRIES and time.perf_counter() >= deadline):
            break
    n_best = max(best_rate, key=lambda n: best_rate[n])
    per_size = ", ".join(f"n={n}: {rate / 1e9:.1f}" for n, rate in best_rate.items())
    return best_rate[n_best], (
        f"measured {now()}, torch.mm {dtype_name}, best single product over {rounds} rounds of "
        f"sizes {'/'.join(str(n) for n in best_rate)} (best GFLOP/s {per_size}); peak at n={n_best}"
    ), tries(rates)


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
