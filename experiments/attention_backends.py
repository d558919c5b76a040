"""Attention backends and key ranges for the DiT chunk's attention over its KV cache.

The report ran FlashAttention 2 (flash_fwd_kernel) and 3 (the varlen path: prepare_varlen_num_blocks +
device_kernel) on bf16 q [B, Lq, H, D] over a cache of `allocated_keys` slots of which the first
`valid_keys` are filled. Two levers (docs/domain.md section 5):

- which kernel: torch SDPA with one backend forced (`sdpa_kernel(SDPBackend.X)`: flash, cuDNN,
  memory-efficient, math), or the flash-attn packages themselves (FA2 `flash_attn.flash_attn_func`,
  FA3 `flash_attn_interface.flash_attn_func`, Hopper only);
- which keys: the valid prefix only (a view of the cache, nothing copied), the whole allocation with the
  unfilled slots masked out (every slot is scored, so the kernels execute allocated/valid times the
  nominal FLOPs: `Prepared.executed_flops` says how many), or, for flash-attn, the whole cache with
  its filled length (`cache_seqlens`: the kernel itself stops at the valid keys; the model's own form).

Every output is checked against the workload's float64 reference (harness.trial.correctness): softmax over
the valid keys only, from the same bf16 inputs. So a variant that lets an unfilled slot take part is
wrong, not merely different (the synthetic cache holds random values past the valid prefix, as a reused
cache would). Every variant computes in bf16 as the baseline does: none declares a lower precision.

Dtype: bf16 on every device, as the model runs it. On the CPU bf16 SDPA is slower than float32 (about
1.5x for the flash kernel, 2x for math on a 2-core machine) but not prohibitively so, and it keeps the
CPU run on the same dtype paths, tolerance and byte counts as the GPU run; flash-attn takes fp16/bf16
only anyway.

On a CPU torch has SDPA kernels for flash (a CPU flash kernel) and math only; cuDNN and
memory-efficient are skipped there with torch's own message, and flash-attn needs CUDA.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any, Callable, Literal

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from harness.api.experiment import Experiment, Prepared, VariantSkipped
from harness.api.optional import install_hint, needs_any_module
from harness.cards.fields import COMPUTE_BOUND, UNRESOLVED
from harness.workloads.attention import allocation_mask
from harness.workloads.base import Workload

EXPERIMENT = Experiment(
    name="attention_backends",
    op_kinds=("attention",),
    hypothesis="a faster attention kernel (SDPA flash / cuDNN / memory-efficient / math, flash-attn 2/3) over "
    "the valid keys only raises effective TFLOP/s at the same nominal FLOPs; scoring the whole allocation "
    "with a mask executes allocated/valid times the FLOPs and is slower",
    check="effective_flops",
    classes=(COMPUTE_BOUND, UNRESOLVED),
    workload_dtype="bfloat16",
)

# The values each parameter takes (harness.api.experiment reads them from the annotations; a test holds each table
# to its Literal).
SdpaBackend = Literal["flash", "cudnn", "efficient", "math"]
BACKENDS: dict[str, SDPBackend] = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "math": SDPBackend.MATH,
}
SdpaKeys = Literal["valid_prefix", "masked_allocation"]
FlashAttnKeys = Literal["valid_prefix", "cache_seqlens"]  # flash-attn takes no key mask
FlashAttnVersion = Literal[2, 3]
FLASH_ATTN_MODULES = {2: "flash_attn", 3: "flash_attn_interface"}


def executed_flops(shape: dict[str, Any], keys: int) -> float:
    """FLOPs of QK^T and PV when `keys` keys are scored: 4 * B * H * Lq * keys * D."""
    return 4.0 * shape["batch"] * shape["heads"] * shape["queries"] * keys * shape["head_dim"]


def _probe(fn: Callable[[], torch.Tensor], what: str, device: str) -> None:
    """Call `fn` once; a backend that cannot run the case raises here, with torch's reasons as the skip."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            fn()
        except (RuntimeError, NotImplementedError, ValueError) as exc:
            said = [str(w.message).strip() for w in caught if str(w.message).strip()]
            reason = f"{what} cannot run this case on {device}: {str(exc).strip()}"
            if said:
                reason += " Torch said: " + " | ".join(dict.fromkeys(said))
            elif not device.startswith("cuda"):
                reason += " (torch's CPU SDPA dispatches to its flash and math kernels only)"
            raise VariantSkipped(reason) from None
    if device.startswith("cuda"):
        torch.cuda.synchronize()


@EXPERIMENT.baseline
def sdpa_default(w: Workload) -> Callable[[], torch.Tensor]:
    """The report's op: attention over the valid keys, SDPA choosing its own backend (flash on a GPU)."""
    return w.run


@EXPERIMENT.variant
def sdpa(w: Workload, backend: SdpaBackend = "flash", keys: SdpaKeys = "valid_prefix") -> Prepared:
    """torch SDPA with one backend forced, over the valid prefix or the masked whole allocation."""
    q, k, v = w.inputs["q"], w.inputs["k"], w.inputs["v"]
    s = w.shape
    valid, allocated = s["valid_keys"], s["allocated_keys"]
    which = BACKENDS[backend]
    if keys == "valid_prefix":
        kk, vv = k[:, :, :valid], v[:, :, :valid]  # views of the cache: nothing is copied

        def fn() -> torch.Tensor:
            with sdpa_kernel(which):
                return F.scaled_dot_product_attention(q, kk, vv)

        scored = valid
    else:
        mask = allocation_mask(allocated, valid, q.device)  # built once, outside the timed call

        def fn() -> torch.Tensor:
            with sdpa_kernel(which):
                return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

        scored = allocated
    _probe(fn, f"SDPA backend {backend} (keys={keys})", w.device)
    return Prepared(
        fn,
        executed_flops=executed_flops(s, scored),
        facts={"backend": f"sdpa:{backend}", "keys": keys, "keys_scored": scored, "valid_keys": valid,
               "allocated_keys": allocated},
    )


def _import_flash_attn(version: int) -> Any:
    name = FLASH_ATTN_MODULES[version]
    try:
        return importlib.import_module(name)
    except ImportError as exc:  # also a broken install: an extension built for another torch
        raise VariantSkipped(f"flash-attn {version} not installed (import {name} failed: {exc}): "
                             f"{install_hint(name)}") from None


# Drawn where FA2 or FA3 is installed; a version whose package is missing skips trial by trial.
@EXPERIMENT.variant(needs=("cuda", needs_any_module(*FLASH_ATTN_MODULES.values())))
def flash_attn(w: Workload, version: FlashAttnVersion = 2, keys: FlashAttnKeys = "valid_prefix") -> Prepared:
    """FlashAttention itself: FA2 (package flash_attn) or FA3 (flash_attn_interface, Hopper), [B, L, H, D].

    keys=valid_prefix passes the valid slice of the cache; keys=cache_seqlens passes the whole cache
    with its filled length (flash_attn_with_kvcache), so the kernel stops at the valid keys itself.
    flash-attn has no boolean key mask, so the masked whole allocation is SDPA's form only.
    """
    if not w.device.startswith("cuda"):
        raise VariantSkipped(f"flash-attn {version} needs CUDA (device is {w.device})")
    if version == 3 and torch.cuda.get_device_capability(torch.device(w.device))[0] < 9:
        raise VariantSkipped("flash-attn 3 needs a Hopper GPU (sm_90)")
    q, k, v = w.inputs["q"], w.inputs["k"], w.inputs["v"]
    if q.dtype not in (torch.float16, torch.bfloat16):
        raise VariantSkipped(f"flash-attn runs fp16/bf16 only, the workload is {q.dtype}")
    module = _import_flash_attn(version)
    s = w.shape
    valid = s["valid_keys"]
    # flash-attn's layout is [B, L, H, D]; the model keeps that layout, so it is made here, untimed.
    q_ = q.transpose(1, 2).contiguous()
    k_ = k.transpose(1, 2).contiguous()
    v_ = v.transpose(1, 2).contiguous()

    def first(out: Any) -> torch.Tensor:  # some FA3 builds return (out, softmax_lse)
        return out[0] if isinstance(out, (tuple, list)) else out

    if keys == "valid_prefix":
        kk, vv = k_[:, :valid], v_[:, :valid]  # views; flash-attn needs only the last dim contiguous
        func = module.flash_attn_func

        def fn() -> torch.Tensor:
            return first(func(q_, kk, vv)).transpose(1, 2)
    else:
        func = module.flash_attn_with_kvcache
        seqlens = torch.full((s["batch"],), valid, dtype=torch.int32, device=q.device)

        def fn() -> torch.Tensor:
            return first(func(q_, k_, v_, cache_seqlens=seqlens)).transpose(1, 2)

    _probe(fn, f"flash-attn {version} (keys={keys})", w.device)
    return Prepared(
        fn,
        executed_flops=executed_flops(s, valid),  # key blocks past the filled length are skipped
        facts={"backend": f"flash_attn{version}", "keys": keys, "keys_scored": valid, "valid_keys": valid,
               "allocated_keys": s["allocated_keys"], "layout": "[B, L, H, D]"},
    )
