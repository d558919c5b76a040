"""This CPU's practical peaks, measured once per machine and cached as JSON.

The CPU backend's roofline estimates (sm_pct, dram_pct) divide by these numbers, so they are
measured on the machine itself, with the thread count torch will use, rather than taken from a
datasheet:

- FLOP/s per dtype (float32, bfloat16, float16 where torch supports it): square products, by
  `torch.mm` and by oneDNN's 1x1 channels-last convolution of 8n rows (a CPU's BLAS need not be its
  fastest GEMM: MKL's float32 torch.mm on an AMD EPYC reached 222 GFLOP/s, oneDNN 490, a conv3d 490),
  from n = 256 up, doubling while the next size's product (8x the work) fits a quarter of
  the dtype's share of the time budget, up to 4096 (harness.profile.cpu_peak_tries): n <= 1024
  alone stopped short of the peak, and a conv3d then ran at 116% of the "peak". The sizes are
  taken in turns within the dtype's share of the budget, in three consecutive tries; the peak is
  the best 2*n**3 / time of any single product, and each try's own best is kept (`tries`: the
  spread a prediction's interval states).
- Memory bandwidth: `dst.copy_(src)` of a byte buffer of max(4 x last-level cache, 128 MiB)
  (at most 1 GiB); bytes = read + written (2 x buffer, the STREAM convention: write-allocate
  traffic is not counted), peak = bytes / the fastest repeat. With few cores this is the bandwidth
  those cores can pull, which is what the roofline of work on them needs.

Cache: `$HARNESS_CACHE_DIR` or `~/.cache/harness/`, one file per key (CPU model name, logical
core count, torch version, torch.get_num_threads()). A cache file that cannot be read or does not
hold valid peaks for this key is re-measured with a warning; a cache that cannot be written is
warned about; neither is fatal. A measurement taken while other processes held the cores (see
`CpuPeaks.cpu_share`: judged by the float32 product, which uses every thread on every CPU) is measured
once more, the best of both kept, and cached only if the second was undisturbed; else it is used but not
cached, so that a later process measures again. Caches of an earlier schema (torch.mm alone; n <= 1024, judged
by the best share of any measurement, so a float32 product slowed by another job could hide behind an undisturbed
copy) are measured again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import platform
import time
import warnings
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, TypeGuard

from harness.profile.cpu_peak_tries import measure_bandwidth, measure_matmul, now
from harness.profile.library_kernels import measure_conv_layouts, measure_few_rows

SCHEMA = 4  # 4: oneDNN's product beside torch.mm (3: sizes grown to the plateau, busy judged by float32, tries kept)
MATMUL_DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")
BUSY_CPU_SHARE = 0.75
BUSY_JUDGE = "float32"  # the measurement whose share says whether other work took the cores

_memo: dict[str, CpuPeaks] = {}


@dataclass
class CpuPeaks:
    flops_per_s: dict[str, float]  # dtype name -> FLOP/s
    mem_bw_bytes_per_s: float  # read + written bytes per second
    sources: dict[str, str]  # dtype name or "mem_bw" -> how the number was obtained
    cpu_model: str
    logical_cores: int
    torch_version: str
    torch_threads: int
    llc_bytes: int | None = None  # last-level cache size, if the OS says
    measured_at: str = ""
    load_avg_1m: float | None = None  # the OS load average when measuring began (noise hint)
    # process CPU time / (wall time x torch threads) in the float32 products: ~1 when the threads had their
    # cores, ~0.5 when another process was taking half of them (then the peaks are far too low). float32,
    # not every measurement: a CPU without bf16 math runs a bf16 mm on one thread, idle or not.
    cpu_share: float | None = None
    unsupported: dict[str, str] = field(default_factory=dict)  # dtype -> why no peak
    tries: dict[str, list[float]] = field(default_factory=dict)  # dtype or "mem_bw" -> each try's best rate
    by_size: dict[str, dict[str, float]] = field(default_factory=dict)  # dtype -> product size n -> best FLOP/s
    # layout -> its float32 3x3x3 convolution's speedup over NCDHW at each reference shape (library_kernels)
    conv_layouts: dict[str, list[float]] = field(default_factory=dict)
    # the reference convolutions: cin, cout, output [T, H, W] (3x3x3 kernels) and their NCDHW float32 best seconds
    conv_references: list[dict[str, Any]] = field(default_factory=list)
    # dtype -> "dram"/"cache" -> {"n": the weight's side, "seconds"/"slowest": {rows: best/slowest repeat's time}}
    few_rows: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)

    @property
    def busy(self) -> bool:
        """Measured while other work took the cores: the numbers understate this CPU."""
        return self.cpu_share is not None and self.cpu_share < BUSY_CPU_SHARE

    def flops_for(self, dtype: str) -> float | None:
        value = self.flops_per_s.get(dtype)
        return float(value) if value else None

    def key(self) -> dict[str, Any]:
        return {
            "cpu_model": self.cpu_model,
            "logical_cores": self.logical_cores,
            "torch_version": self.torch_version,
            "torch_threads": self.torch_threads,
        }

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["kind"] = "cpu"
        return out

    @classmethod
    def from_dict(cls, obj: Any) -> CpuPeaks:
        """Validate and rebuild; ValueError on anything that is not a sound set of peaks."""
        if not isinstance(obj, dict):
            raise ValueError("peaks must be an object")
        flops = obj.get("flops_per_s")
        if not isinstance(flops, dict) or not flops:
            raise ValueError("flops_per_s missing or empty")
        for name, value in flops.items():
            if not _positive(value):
                raise ValueError(f"flops_per_s[{name!r}] is not a positive number")
        if not _positive(obj.get("mem_bw_bytes_per_s")):
            raise ValueError("mem_bw_bytes_per_s is not a positive number")
        for name in ("cpu_model", "torch_version"):
            if not isinstance(obj.get(name), str):
                raise ValueError(f"{name} is not a string")
        for name in ("logical_cores", "torch_threads"):
            if not isinstance(obj.get(name), int) or isinstance(obj.get(name), bool):
                raise ValueError(f"{name} is not an integer")
        sources = obj.get("sources", {})
        unsupported = obj.get("unsupported", {})
        if not isinstance(sources, dict) or not isinstance(unsupported, dict):
            raise ValueError("sources/unsupported must be objects")
        llc = obj.get("llc_bytes")
        load = obj.get("load_avg_1m")
        share = obj.get("cpu_share")
        tries = obj.get("tries", {})
        if not isinstance(tries, dict) or not all(isinstance(v, list) and all(map(_positive, v))
                                                  for v in tries.values()):
            raise ValueError("tries must map names to lists of positive rates")
        by_size = obj.get("by_size", {})
        if not isinstance(by_size, dict) or not all(isinstance(v, dict) and all(map(_positive, v.values()))
                                                    for v in by_size.values()):
            raise ValueError("by_size must map dtypes to sizes' positive rates")
        layouts = obj.get("conv_layouts", {})
        if not isinstance(layouts, dict) or not all(isinstance(v, list) and all(map(_positive, v))
                                                    for v in layouts.values()):
            raise ValueError("conv_layouts must map layouts to lists of positive speedups")
        references = obj.get("conv_references", [])
        if not isinstance(references, list) or not all(isinstance(r, dict) and _positive(r.get("seconds"))
                                                       for r in references):
            raise ValueError("conv_references must be a list of reference convolutions with their times")
        few_rows = obj.get("few_rows", {})
        if not isinstance(few_rows, dict) or not all(isinstance(v, dict) and all(
                isinstance(r, dict) and _positive(r.get("n")) and isinstance(r.get("seconds"), dict)
                and all(map(_positive, r["seconds"].values())) for r in v.values()) for v in few_rows.values()):
            raise ValueError("few_rows must map dtypes to weights' sides and positive times")
        return cls(
            flops_per_s={str(k): float(v) for k, v in flops.items()},
            mem_bw_bytes_per_s=float(obj["mem_bw_bytes_per_s"]),
            sources={str(k): str(v) for k, v in sources.items()},
            cpu_model=obj["cpu_model"],
            logical_cores=obj["logical_cores"],
            torch_version=obj["torch_version"],
            torch_threads=obj["torch_threads"],
            llc_bytes=int(llc) if isinstance(llc, int) and not isinstance(llc, bool) else None,
            measured_at=str(obj.get("measured_at", "")),
            load_avg_1m=float(load) if _positive(load) or _is_zero(load) else None,
            cpu_share=float(share) if _positive(share) or _is_zero(share) else None,
            unsupported={str(k): str(v) for k, v in unsupported.items()},
            tries={str(k): [float(x) for x in v] for k, v in tries.items()},
            by_size={str(k): {str(n): float(r) for n, r in v.items()} for k, v in by_size.items()},
            conv_layouts={str(k): [float(x) for x in v] for k, v in layouts.items()},
            conv_references=[dict(r) for r in references],
            few_rows={str(k): {str(w): {"n": int(r["n"]), **{key: {str(m): float(t) for m, t in r[key].items()}
                                                             for key in ("seconds", "slowest") if key in r}}
                               for w, r in v.items()} for k, v in few_rows.items()},
        )


def _is_zero(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0


def _positive(value: Any) -> TypeGuard[int | float]:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


# ---------------------------------------------------------------------------------------------
# Machine identity


def cpu_model_name() -> str:
    """The CPU's model name from /proc/cpuinfo, else what `platform` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.lower().startswith(("model name", "hardware", "cpu model")) and ":" in line:
                    name = line.split(":", 1)[1].strip()
                    if name:
                        return name
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown-cpu"


def last_level_cache_bytes() -> int | None:
    """Size of the largest CPU cache the OS reports (sysfs), or None."""
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    best: int | None = None
    try:
        entries = list(base.glob("index*"))
    except OSError:
        return None
    for entry in entries:
        try:
            text = (entry / "size").read_text().strip().upper()
        except OSError:
            continue
        factor = 1
        if text.endswith("K"):
            factor, text = 1024, text[:-1]
        elif text.endswith("M"):
            factor, text = 1024**2, text[:-1]
        elif text.endswith("G"):
            factor, text = 1024**3, text[:-1]
        try:
            size = int(text) * factor
        except ValueError:
            continue
        best = size if best is None else max(best, size)
    return best


def machine_key() -> dict[str, Any]:
    import torch

    return {
        "cpu_model": cpu_model_name(),
        "logical_cores": os.cpu_count() or 1,
        "torch_version": torch.__version__,
        "torch_threads": torch.get_num_threads(),
    }


def cache_dir() -> Path:
    env = os.environ.get("HARNESS_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "harness"


def cache_path(key: dict[str, Any] | None = None) -> Path:
    key = key if key is not None else machine_key()
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_dir() / f"cpu_peaks-{digest}.json"


# ---------------------------------------------------------------------------------------------
# Measurement


def measure_cpu_peaks(*, budget_s: float = 4.0) -> CpuPeaks:
    """Measure now (no cache): about `budget_s` seconds in all, spread over dtypes and bandwidth
    (plus set-up, and more on a loaded machine)."""
    import torch

    try:
        load: float | None = os.getloadavg()[0]
    except (OSError, AttributeError):
        load = None
    key = machine_key()
    llc = last_level_cache_bytes()
    share = budget_s / (len(MATMUL_DTYPES) + 1)
    shares: dict[str, float] = {}  # per measurement: process CPU time / (wall time x torch threads)
    threads = max(1, torch.get_num_threads())

    def timed_share(name: str, measure: Callable[[], Any]) -> Any:
        cpu0, wall0 = time.process_time(), time.perf_counter()
        measured = measure()
        wall = time.perf_counter() - wall0
        if wall > 0:
            shares[name] = (time.process_time() - cpu0) / (wall * threads)
        return measured

    flops: dict[str, float] = {}
    sources: dict[str, str] = {}
    tries: dict[str, list[float]] = {}
    by_size: dict[str, dict[str, float]] = {}
    unsupported: dict[str, str] = {}
    for name in MATMUL_DTYPES:
        if not hasattr(torch, name):
            unsupported[name] = "torch has no such dtype"
            continue
        try:
            flops[name], sources[name], tries[name], sizes = timed_share(
                name, functools.partial(measure_matmul, name, share))
            by_size[name] = {str(n): rate for n, rate in sizes.items()}
        except (RuntimeError, TypeError, NotImplementedError) as exc:
            unsupported[name] = f"no product ran: {str(exc).splitlines()[0][:200]}"
            continue
    if not flops:
        raise RuntimeError(f"no matmul dtype could be measured on this CPU: {unsupported}")
    bw, sources["mem_bw"], tries["mem_bw"] = timed_share("mem_bw", functools.partial(measure_bandwidth, share, llc))
    return CpuPeaks(
        flops_per_s=flops,
        mem_bw_bytes_per_s=bw,
        sources=sources,
        llc_bytes=llc,
        measured_at=now(),
        load_avg_1m=load,
        cpu_share=shares.get(BUSY_JUDGE, max(shares.values(), default=None)),
        unsupported=unsupported,
        tries=tries,
        by_size=by_size,
        **_library_kernels(llc),
        **key,
    )


def _library_kernels(llc: int | None) -> dict[str, Any]:
    """harness.profile.library_kernels' measurements (`conv_layouts` and `conv_references`, `few_rows`), each left
    out with a warning where this torch cannot run it."""
    measures: dict[str, Callable[[], dict[str, Any]]] = {
        "the reference convolutions": lambda: dict(zip(("conv_layouts", "conv_references"), measure_conv_layouts())),
        "the few-row products": lambda: {"few_rows": measure_few_rows(llc)}}
    found: dict[str, Any] = {}
    for what, measure in measures.items():
        try:
            found.update(measure())
        except (RuntimeError, TypeError, NotImplementedError) as exc:
            warnings.warn(f"{what} could not be measured ({str(exc).splitlines()[0][:200]}): predictions state no "
                          "range from them", RuntimeWarning, stacklevel=2)
    return found


def best_of(first: CpuPeaks, second: CpuPeaks) -> CpuPeaks:
    """Two measurements as one: each peak the higher (a peak is the best of its tries), the second's CPU share
    (whether the cores were free when it was taken)."""
    names = set(first.flops_per_s) | set(second.flops_per_s)
    return replace(
        second,
        flops_per_s={n: max(first.flops_per_s.get(n, 0.0), second.flops_per_s.get(n, 0.0)) for n in names},
        mem_bw_bytes_per_s=max(first.mem_bw_bytes_per_s, second.mem_bw_bytes_per_s),
        sources={**first.sources, **{n: s for n, s in second.sources.items()
                                     if second.flops_per_s.get(n, 0.0) >= first.flops_per_s.get(n, 0.0)}},
        tries={n: first.tries.get(n, []) + second.tries.get(n, []) for n in set(first.tries) | set(second.tries)},
        by_size={d: {n: max(first.by_size.get(d, {}).get(n, 0.0), second.by_size.get(d, {}).get(n, 0.0))
                     for n in set(first.by_size.get(d, {})) | set(second.by_size.get(d, {}))}
                 for d in set(first.by_size) | set(second.by_size)},
    )


# ---------------------------------------------------------------------------------------------
# Cache


def _read_cache(path: Path, key: dict[str, Any]) -> CpuPeaks | None:
    """Peaks from `path`; None if absent; warns and returns None if the file is unusable."""
    if not path.exists():
        return None
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(obj, dict) or obj.get("schema") != SCHEMA:
            raise ValueError(f"unknown cache schema {obj.get('schema') if isinstance(obj, dict) else None!r}")
        peaks = CpuPeaks.from_dict(obj.get("peaks"))
        if peaks.key() != key:
            raise ValueError("cache file is for a different machine key")
        return peaks
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, ValueError, TypeError, KeyError) as exc:
        warnings.warn(
            f"CPU peak cache {path} is unusable ({exc}); measuring the peaks again",
            RuntimeWarning,
            stacklevel=3,
        )
        return None


def _write_cache(path: Path, peaks: CpuPeaks) -> None:
    from harness.cards.atomic import write_json_atomic

    try:
        write_json_atomic(path, {"schema": SCHEMA, "key": peaks.key(), "peaks": peaks.as_dict()})
    except OSError as exc:
        warnings.warn(f"could not write the CPU peak cache {path} ({exc})", RuntimeWarning, stacklevel=3)


def get_cpu_peaks(refresh: bool = False) -> CpuPeaks:
    """This machine's peaks: from this process's memo, else the cache file, else measured and cached.

    `refresh=True` measures again and overwrites the cache. Peaks measured while the machine was
    busy (`CpuPeaks.busy`: this process got under 75% of its threads' CPU time in the float32 products)
    are measured once more, the best of both kept; still busy, they are used in this process, with a
    warning, but not written to the cache, so that a later process measures again.
    """
    key = machine_key()
    path = cache_path(key)
    memo_key = str(path)
    if not refresh:
        if memo_key in _memo:
            return _memo[memo_key]
        cached = _read_cache(path, key)
        if cached is not None:
            _memo[memo_key] = cached
            return cached
    peaks = measure_cpu_peaks()
    if peaks.busy:
        peaks = best_of(peaks, measure_cpu_peaks())
    if peaks.busy:
        warnings.warn(
            f"the CPU was busy while measuring its peaks (this process got {peaks.cpu_share:.0%} of "
            f"its {peaks.torch_threads} threads' CPU time, twice): the peaks are likely low, so sm_pct and "
            "dram_pct will read high; not caching them, a later process measures again",
            RuntimeWarning,
            stacklevel=2,
        )
    else:
        _write_cache(path, peaks)
    _memo[memo_key] = peaks
    return peaks


def cached_here() -> CpuPeaks | None:
    """The cached peaks of this machine's CPU (its model and core count) at the most threads, the newest of
    them, read without importing torch: a prediction for this CPU outside a run (`python -m harness.report
    predict --device cpu`); None where none is cached."""
    found = []
    for path in cache_dir().glob("cpu_peaks-*.json"):
        try:
            obj = json.loads(path.read_text(encoding="utf-8"))
            peaks = CpuPeaks.from_dict(obj.get("peaks")) if obj.get("schema") == SCHEMA else None
        except (OSError, UnicodeDecodeError, ValueError, TypeError, AttributeError):
            continue
        if peaks is not None and peaks.cpu_model == cpu_model_name() and peaks.logical_cores == (os.cpu_count() or 1):
            found.append(peaks)
    return max(found, key=lambda p: (p.torch_threads, p.measured_at), default=None)


def reset_memo() -> None:
    """Forget the peaks held in this process (the cache file is left alone)."""
    _memo.clear()
