"""The table of process-global torch settings harness.trial.torch_state pins, records and restores: each with the
key a card records it under, the expression that reads it (its label) and how it is set back.

Each setting (read by; restored by):

- intra-op threads (`torch.get_num_threads()`; `torch.set_num_threads`).
- inter-op threads (`torch.get_num_interop_threads()`; nothing: torch accepts
  `set_num_interop_threads` once per process, before inter-op work, and raises after, so a change
  is only reported, as not restorable).
- autocast per device type, cpu, cuda and this build's accelerator (`torch.is_autocast_enabled(d)`,
  `torch.get_autocast_dtype(d)`; `torch.set_autocast_enabled`, `torch.set_autocast_dtype`), its
  weight cache (`torch.is_autocast_cache_enabled()`; `torch.set_autocast_cache_enabled`) and its
  nesting depth, which a `torch.autocast` entered and never left raises (the counter
  `torch.autocast_increment_nesting` returns, less one, decremented back; stepped back to the old
  depth, the cache cleared at depth 0 as leaving autocast does).
- grad mode (`torch.is_grad_enabled()`; `torch.set_grad_enabled`).
- inference mode (`torch.is_inference_mode_enabled()`; torch has no setter, only guards: a
  `torch._C._InferenceMode(old)` guard is entered and kept for the life of the process, since
  letting it go would bring the leaked mode back).
- default dtype (`torch.get_default_dtype()`; `torch.set_default_dtype`).
- default device: what `torch.set_default_device` installed, None for nothing (not
  `torch.get_default_device()`, which reads "cpu" also for an installed cpu device mode, a leak that
  costs every later torch call time); restored by `torch.set_default_device(old)`.
- torch-function and torch-dispatch mode stacks, which a mode entered and never left deepens
  (`torch._C._len_torch_function_stack()`, `_len_torch_dispatch_stack()`; the modes above the old
  depth are left, a dispatch mode through its own `__exit__`).
- flush-denormal (no getter: a float32 denormal, 1e-39, times 1 reads 0 when denormals flush;
  `torch.set_flush_denormal`, the calling thread's FTZ/DAZ bits).
- oneDNN (`torch.backends.mkldnn.enabled`, `.deterministic`, and `.allow_tf32` where it reads a
  bool: `None` on builds without Intel GPU support), cuDNN (`torch.backends.cudnn.enabled`,
  `.benchmark`, `.deterministic`, `.allow_tf32`, `.benchmark_limit` where cuDNN is available), cuBLAS
  (`torch.backends.cuda.matmul.allow_tf32`, `.allow_fp16_reduced_precision_reduction`, `.allow_bf16_...`
  with their split-K half where torch has one, `.allow_fp16_accumulation`): the attribute is set back
  (the reduction flags as a (reduced, split-K) pair: a bare bool would turn split-K on).
- fp32 matmul precision (`torch.get_float32_matmul_precision()`; `torch.set_float32_matmul_precision`)
  and, torch >= 2.9, the fp32 precision tree: `torch.backends.fp32_precision` and the
  `fp32_precision` of `torch.backends.cuda.matmul`, `.cudnn`, `.cudnn.conv`, `.cudnn.rnn`, `.mkldnn`,
  `.mkldnn.matmul`, `.mkldnn.conv`, `.mkldnn.rnn`, each as resolved from its parents
  (`torch._C._set_fp32_precision_setter` per node, after the legacy switches).
- SDPA backends (`torch.backends.cuda.{flash,mem_efficient,math,cudnn}_sdp_enabled()`,
  `fp16_bf16_reduction_math_sdp_allowed()`, and where torch has them FA3, the overrideable backend and
  the priority order in `torch._C`; the matching `enable_*_sdp` and `torch._C._set_sdp_*`).
- deterministic algorithms (`torch.are_deterministic_algorithms_enabled()`,
  `torch.is_deterministic_algorithms_warn_only_enabled()`,
  `torch.utils.deterministic.fill_uninitialized_memory`, and once Inductor is loaded
  `torch._inductor.config.deterministic`, which `torch.use_deterministic_algorithms` also sets; the
  flags through `torch._C._set_deterministic_algorithms`, since the public function imports Inductor,
  seconds, and the attributes set back).
- BLAS and linalg preference (`torch.backends.cuda.preferred_blas_library()`,
  `preferred_linalg_library()`, which neither initialize CUDA nor need it, on a CPU build too; the
  same functions with the old backend).
- current CUDA device and stream, once CUDA is initialized (`torch.cuda.current_device()`,
  `torch.cuda.current_stream()` as (stream_id, device_index, device_type); `torch.cuda.set_device`,
  `torch.cuda.set_stream`; a block that initializes CUDA is compared and restored against device 0's
  default stream).
- Dynamo's cache limit, once Dynamo is loaded (`torch._dynamo.config.cache_size_limit`; set back;
  the request that first loads Dynamo leaves the limit as it set it).

The legacy TF32 switches (`allow_tf32`, `get_float32_matmul_precision`) and the fp32 precision tree
are two views of one state, and since torch 2.9 a legacy getter raises when the new API left them
inconsistent ("mix of the legacy and new APIs"); such a value is recorded as "unreadable: ...", and
restoring sets the legacy switches first and the tree's nodes after, which makes both readable again.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Callable

import torch

THREADS = "threads"
INTEROP_THREADS = "interop_threads"


@dataclass(frozen=True)
class Setting:
    key: str  # the snapshot's key, which cards record (the six settings pinned before keep their old keys)
    label: str  # the expression that reads it: the name `changed` gives it
    # `...`: called with no arguments (read) or the value (write), and many are lambdas that bind a loop's
    # values as default arguments, which mypy cannot match to a fixed signature. What write returns is unused.
    read: Callable[..., Any]  # the current value, JSON-ready
    write: Callable[..., object] | None  # None: torch cannot set it again in this process
    available: Callable[[], bool] = lambda: True  # False: not readable now (CUDA not initialized, ...)
    initial: Callable[[], Any] | None = None  # the value before it became readable, when known


# Inference-mode guards entered to undo a leaked inference mode; dropping one would restore the leak.
_HELD_GUARDS: list[Any] = []


def _attribute(key: str, label: str, owner: Any, name: str, cast: Callable[[Any], Any] = bool) -> Setting:
    return Setting(key, label, lambda: cast(getattr(owner, name)), lambda v: setattr(owner, name, cast(v)))


def _backend_flag(key: str, cast: Callable[[Any], Any] = bool) -> Setting:
    """A flag of a torch.backends module, `key` its path under torch.backends ("cudnn.benchmark")."""
    path, name = key.rsplit(".", 1)
    owner = torch.backends
    for part in path.split("."):
        owner = getattr(owner, part)
    return _attribute(key, f"torch.backends.{key}", owner, name, cast)


def _dtype(name: str) -> torch.dtype:
    return getattr(torch, name.removeprefix("torch."))


def _autocast_devices() -> list[str]:
    """cpu and cuda (CPU builds track cuda's autocast too), and this build's accelerator if another one."""
    devices = ["cpu", "cuda"]
    accelerator = torch.accelerator.current_accelerator() if hasattr(torch, "accelerator") else None
    if accelerator is not None and accelerator.type not in devices:
        devices.append(accelerator.type)
    available = getattr(torch.amp, "is_autocast_available", lambda d: True)
    return [d for d in devices if available(d)]


def _autocast_settings() -> list[Setting]:
    if not hasattr(torch, "get_autocast_dtype"):  # the per-device-type API (torch >= 2.4)
        return []
    out = []
    for d in _autocast_devices():
        out.append(Setting(f"autocast.{d}.enabled", f"torch.is_autocast_enabled('{d}')",
                           lambda d=d: bool(torch.is_autocast_enabled(d)),
                           lambda v, d=d: torch.set_autocast_enabled(d, bool(v))))
        out.append(Setting(f"autocast.{d}.dtype", f"torch.get_autocast_dtype('{d}')",
                           lambda d=d: str(torch.get_autocast_dtype(d)),
                           lambda v, d=d: torch.set_autocast_dtype(d, _dtype(v))))
    return out


def _autocast_nesting() -> int:
    depth = torch.autocast_increment_nesting()  # torch reads the counter only by moving it
    torch.autocast_decrement_nesting()
    return depth - 1


def _set_autocast_nesting(depth: int) -> None:
    current = _autocast_nesting()
    while current < depth:
        current = torch.autocast_increment_nesting()
    while current > depth:
        current = torch.autocast_decrement_nesting()
    if depth == 0:
        torch.clear_autocast_cache()  # what leaving the outermost autocast does


def _set_inference_mode(enabled: bool) -> None:
    guard = torch._C._InferenceMode(bool(enabled))
    guard.__enter__()
    _HELD_GUARDS.append(guard)


def _flush_denormal() -> bool:
    # No getter exists: with FTZ/DAZ on, a float32 denormal reads as 0 when multiplied. Explicit dtype
    # and device, and no Python modes, so that a leaked default dtype (float64: 1e-39 is normal there),
    # default device or mode cannot change the answer (nor run a mode's Python on every snapshot).
    with torch._C._DisableTorchDispatch(), torch._C.DisableTorchFunction():
        return bool((torch.tensor(1e-39, dtype=torch.float32, device="cpu") * 1.0).item() == 0.0)


def _default_device() -> str | None:
    # What torch.set_default_device installed (None: nothing). Not torch.get_default_device(), which
    # reads "cpu" also for an installed cpu device mode, a leak that costs every later torch call time.
    context = getattr(torch._GLOBAL_DEVICE_CONTEXT, "device_context", None)
    return None if context is None else str(context.device)


def _pop_modes(depth: int, length: Callable[[], int], pop: Callable[[], Any]) -> None:
    """Leave the modes above `depth`: those entered after the snapshot and never left, the top first."""
    while length() > depth:
        was = length()
        pop()
        if length() >= was:
            raise RuntimeError("the mode stack does not shrink")


def _pop_dispatch_mode() -> None:
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    mode = _get_current_dispatch_mode()
    if mode is not None:
        mode.__exit__(None, None, None)  # its own exit also resets torch's "inside a dispatch mode" flags
    else:
        torch._C._pop_torch_dispatch_stack(None)  # an infra mode (fake tensors, functionalization) only


def _reduction_setting(name: str) -> Setting:
    """cuBLAS's reduced-precision reduction flag, with its split-K half where torch has one (a bare
    bool written back would turn split-K on)."""
    matmul, key = torch.backends.cuda.matmul, f"cuda.matmul.{name}"
    label = f"torch.backends.{key}"
    if not hasattr(matmul, f"{name}_split_k"):
        return Setting(key, label, lambda: bool(getattr(matmul, name)), lambda v: setattr(matmul, name, bool(v)))
    return Setting(key, label, lambda: [bool(getattr(matmul, name)), bool(getattr(matmul, f"{name}_split_k"))],
                   lambda v: setattr(matmul, name, (bool(v[0]), bool(v[1]))))


_FP32_TREE = (  # parents first; each node as `torch.backends` spells it, and its (backend, op) in torch._C
    # (the snapshot's key: fp32_precision.<backend>.<op>)
    ("torch.backends.fp32_precision", "generic", "all"),
    ("torch.backends.cudnn.fp32_precision", "cuda", "all"),
    ("torch.backends.cuda.matmul.fp32_precision", "cuda", "matmul"),
    ("torch.backends.cudnn.conv.fp32_precision", "cuda", "conv"),
    ("torch.backends.cudnn.rnn.fp32_precision", "cuda", "rnn"),
    ("torch.backends.mkldnn.fp32_precision", "mkldnn", "all"),
    ("torch.backends.mkldnn.matmul.fp32_precision", "mkldnn", "matmul"),
    ("torch.backends.mkldnn.conv.fp32_precision", "mkldnn", "conv"),
    ("torch.backends.mkldnn.rnn.fp32_precision", "mkldnn", "rnn"),
)


def _fp32_tree_settings() -> list[Setting]:
    if not hasattr(torch._C, "_get_fp32_precision_getter"):  # torch < 2.9
        return []
    get, put = torch._C._get_fp32_precision_getter, torch._C._set_fp32_precision_setter
    # Written per node through torch._C: torch.backends.mkldnn.fp32_precision's setter writes "generic".
    return [Setting(f"fp32_precision.{b}.{o}", label, lambda b=b, o=o: str(get(b, o)),
                    lambda v, b=b, o=o: put(b, o, str(v))) for label, b, o in _FP32_TREE]


def _sdp_settings() -> list[Setting]:
    cuda = torch.backends.cuda
    out = [Setting(f"sdp.{name}", f"torch.backends.cuda.{name}_sdp_enabled()",
                   lambda name=name: bool(getattr(cuda, f"{name}_sdp_enabled")()),
                   lambda v, name=name: getattr(cuda, f"enable_{name}_sdp")(bool(v)))
           for name in ("flash", "mem_efficient", "math", "cudnn") if hasattr(cuda, f"{name}_sdp_enabled")]
    if hasattr(cuda, "fp16_bf16_reduction_math_sdp_allowed"):
        out.append(Setting("sdp.math_fp16_bf16_reduction", "torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()",
                           lambda: bool(cuda.fp16_bf16_reduction_math_sdp_allowed()),
                           lambda v: cuda.allow_fp16_bf16_reduction_math_sdp(bool(v))))
    c = torch._C
    for key, getter, setter, cast in (("sdp.fa3", "_get_fa3_sdp_enabled", "_set_sdp_use_fa3", bool),
                                      ("sdp.overrideable", "_get_overrideable_sdp_enabled", "_set_sdp_use_overrideable",
                                       bool),
                                      ("sdp.priority_order", "_get_sdp_priority_order", "_set_sdp_priority_order",
                                       list)):
        if hasattr(c, getter) and hasattr(c, setter):  # private: only torch.nn.attention sets them
            out.append(Setting(key, f"torch._C.{getter}()", lambda g=getter, f=cast: f(getattr(c, g)()),
                               lambda v, s=setter, f=cast: getattr(c, s)(f(v))))
    return out


def _set_deterministic(mode: bool, warn_only: bool) -> None:
    # torch.use_deterministic_algorithms also imports torch._inductor.config (seconds) to set its
    # `deterministic`; that flag is a setting of its own here, restored once Inductor is loaded.
    set_flags = getattr(torch._C, "_set_deterministic_algorithms", None) or torch.use_deterministic_algorithms
    set_flags(bool(mode), warn_only=bool(warn_only))


def _inductor_config() -> Any:
    return sys.modules.get("torch._inductor.config")


def _deterministic_settings() -> list[Setting]:
    out = [
        Setting("deterministic_algorithms", "torch.are_deterministic_algorithms_enabled()",
                lambda: bool(torch.are_deterministic_algorithms_enabled()),
                lambda v: _set_deterministic(v, torch.is_deterministic_algorithms_warn_only_enabled())),
        Setting("deterministic_algorithms.warn_only", "torch.is_deterministic_algorithms_warn_only_enabled()",
                lambda: bool(torch.is_deterministic_algorithms_warn_only_enabled()),
                lambda v: _set_deterministic(torch.are_deterministic_algorithms_enabled(), v)),
        Setting("inductor.deterministic", "torch._inductor.config.deterministic",
                lambda: bool(_inductor_config().deterministic),
                lambda v: setattr(_inductor_config(), "deterministic", bool(v)),
                lambda: _inductor_config() is not None),
    ]
    deterministic = getattr(torch.utils, "deterministic", None)
    if deterministic is not None and hasattr(deterministic, "fill_uninitialized_memory"):
        out.append(_attribute("deterministic.fill_uninitialized_memory",
                              "torch.utils.deterministic.fill_uninitialized_memory", deterministic,
                              "fill_uninitialized_memory"))
    return out


def _library_settings() -> list[Setting]:
    cuda, c = torch.backends.cuda, torch._C
    out = []
    for key, function, enum in (("blas_library", "preferred_blas_library", "_BlasBackend"),
                                ("linalg_library", "preferred_linalg_library", "_LinalgBackend")):
        if hasattr(cuda, function) and hasattr(c, enum):
            out.append(Setting(key, f"torch.backends.cuda.{function}()",
                               lambda f=function: getattr(cuda, f)().name,
                               lambda v, f=function, e=enum: getattr(cuda, f)(getattr(getattr(c, e), v))))
    return out


def stream_value(stream: Any) -> list[int]:
    return [int(stream.stream_id), int(stream.device_index), int(stream.device_type)]


def _set_stream(value: list[int]) -> None:
    stream_id, device_index, device_type = value
    torch.cuda.set_stream(
        torch.cuda.Stream(stream_id=stream_id, device_index=device_index, device_type=device_type))


def _cuda_settings() -> list[Setting]:
    initialized = torch.cuda.is_initialized
    return [
        Setting("cuda.current_device", "torch.cuda.current_device()", lambda: int(torch.cuda.current_device()),
                lambda v: torch.cuda.set_device(int(v)), initialized, lambda: 0),
        Setting("cuda.current_stream", "torch.cuda.current_stream()",
                lambda: stream_value(torch.cuda.current_stream()), _set_stream,
                initialized, lambda: stream_value(torch.cuda.default_stream(0))),
    ]


def loaded_dynamo() -> Any:
    """torch._dynamo when something already imported it (importing it costs seconds; unused, it holds nothing)."""
    return sys.modules.get("torch._dynamo")


def _build() -> tuple[Setting, ...]:
    """Every setting this torch build has, in the order `apply` writes them (inference mode before grad
    mode, which entering its guard sets; the legacy TF32 switches before the fp32 precision tree)."""
    backends = torch.backends
    out = [
        Setting(THREADS, "torch.get_num_threads()", lambda: int(torch.get_num_threads()),
                lambda v: torch.set_num_threads(int(v))),
        Setting(INTEROP_THREADS, "torch.get_num_interop_threads()", lambda: int(torch.get_num_interop_threads()),
                None),
        *_autocast_settings(),
        Setting("autocast.cache_enabled", "torch.is_autocast_cache_enabled()",
                lambda: bool(torch.is_autocast_cache_enabled()), lambda v: torch.set_autocast_cache_enabled(bool(v))),
        Setting("autocast.nesting", "autocast nesting depth", _autocast_nesting,
                lambda v: _set_autocast_nesting(int(v))),
        Setting("inference_mode", "torch.is_inference_mode_enabled()", lambda: bool(torch.is_inference_mode_enabled()),
                _set_inference_mode),
        Setting("grad_enabled", "torch.is_grad_enabled()", lambda: bool(torch.is_grad_enabled()),
                lambda v: torch.set_grad_enabled(bool(v))),
        Setting("default_dtype", "torch.get_default_dtype()", lambda: str(torch.get_default_dtype()),
                lambda v: torch.set_default_dtype(_dtype(v))),
    ]
    if hasattr(torch, "_GLOBAL_DEVICE_CONTEXT"):  # before the mode stacks: it is a torch-function mode itself
        out.append(Setting("default_device", "torch.set_default_device", _default_device, torch.set_default_device))
    c = torch._C
    if hasattr(c, "_len_torch_function_stack") and hasattr(c, "_pop_torch_function_stack"):
        out.append(Setting("torch_function_modes", "torch-function mode stack depth",
                           lambda: int(c._len_torch_function_stack()),
                           lambda v: _pop_modes(int(v), c._len_torch_function_stack, c._pop_torch_function_stack)))
    if hasattr(c, "_len_torch_dispatch_stack") and hasattr(c, "_pop_torch_dispatch_stack"):
        out.append(Setting("torch_dispatch_modes", "torch-dispatch mode stack depth",
                           lambda: int(c._len_torch_dispatch_stack()),
                           lambda v: _pop_modes(int(v), c._len_torch_dispatch_stack, _pop_dispatch_mode)))
    out.append(Setting("flush_denormal", "flush denormal (torch.set_flush_denormal)", _flush_denormal,
                       lambda v: torch.set_flush_denormal(bool(v))))
    out += [_backend_flag(f"mkldnn.{name}") for name in ("enabled", "deterministic") if hasattr(backends.mkldnn, name)]
    if getattr(backends.mkldnn, "allow_tf32", None) is not None:
        out.append(_backend_flag("mkldnn.allow_tf32"))
    out += [_backend_flag(f"cudnn.{name}") for name in ("enabled", "benchmark", "deterministic")]
    if getattr(backends.cudnn, "benchmark_limit", None) is not None:  # None where cuDNN is not available
        out.append(_backend_flag("cudnn.benchmark_limit", int))
    # The legacy TF32 switches: matmul precision first, since allow_tf32 is one half of it.
    out.append(Setting("float32_matmul_precision", "torch.get_float32_matmul_precision()",
                       lambda: str(torch.get_float32_matmul_precision()),
                       lambda v: torch.set_float32_matmul_precision(str(v))))
    out += [_backend_flag("cuda.matmul.allow_tf32"), _backend_flag("cudnn.allow_tf32")]
    out += [_reduction_setting(name) for name in ("allow_fp16_reduced_precision_reduction",
                                                  "allow_bf16_reduced_precision_reduction")]
    if hasattr(backends.cuda.matmul, "allow_fp16_accumulation"):  # torch >= 2.7
        out.append(_backend_flag("cuda.matmul.allow_fp16_accumulation"))
    out += _fp32_tree_settings()
    out += _sdp_settings()
    out += _deterministic_settings()
    out += _library_settings()
    out += _cuda_settings()
    out.append(Setting("dynamo.cache_size_limit", "torch._dynamo.config.cache_size_limit",
                       lambda: int(loaded_dynamo().config.cache_size_limit),
                       lambda v: setattr(loaded_dynamo().config, "cache_size_limit", int(v)),
                       lambda: loaded_dynamo() is not None))
    return tuple(out)


SETTINGS: tuple[Setting, ...] = _build()

_FRESH_FP32_TREE = {  # a fresh process's fp32 precision tree: only cuDNN's convolutions and RNNs in TF32
    f"fp32_precision.{backend}.{op}": ("tf32" if backend == "cuda" and op in ("conv", "rnn") else "none")
    for _, backend, op in _FP32_TREE
}

# torch's defaults (the report's model ran with them: fp32 VAE convolutions in TF32 on cuDNN), on the
# settings this build has. The thread count is pinned too, to the count at the first pin (`_pins`).
PINNED: dict[str, Any] = {
    **{s.key: False for s in SETTINGS if s.key.startswith("autocast.") and s.key.endswith(".enabled")},
    "autocast.cpu.dtype": "torch.bfloat16",
    "autocast.cuda.dtype": "torch.float16",
    "autocast.cache_enabled": True,
    "autocast.nesting": 0,
    "inference_mode": False,
    "grad_enabled": True,
    "default_dtype": "torch.float32",
    "default_device": None,
    "flush_denormal": False,
    "mkldnn.enabled": True,
    "mkldnn.deterministic": False,
    "cudnn.enabled": True,
    "cudnn.benchmark": False,
    "cudnn.deterministic": False,
    "cudnn.benchmark_limit": 10,
    "float32_matmul_precision": "highest",
    "cuda.matmul.allow_tf32": False,
    "cudnn.allow_tf32": True,
    "cuda.matmul.allow_fp16_accumulation": False,
    **_FRESH_FP32_TREE,
    **{f"sdp.{name}": True for name in ("flash", "mem_efficient", "math", "cudnn")},
    "sdp.math_fp16_bf16_reduction": False,
    "deterministic_algorithms": False,
    "deterministic_algorithms.warn_only": False,
    "deterministic.fill_uninitialized_memory": True,
}
for _setting in SETTINGS:  # the reduction flags' default is (allowed, split-K allowed) or plain allowed
    if _setting.key.endswith("_reduced_precision_reduction"):
        PINNED[_setting.key] = [True, True] if isinstance(_setting.read(), list) else True
PINNED = {key: value for key, value in PINNED.items() if key in {s.key for s in SETTINGS}}
