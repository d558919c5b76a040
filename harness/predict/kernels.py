"""Tiles and kernels: another kernel or tile for the same op (dit_gemm_tiles, vae_conv_kernels).

What another kernel achieves is what these experiments measure: a Triton tile's, cuBLASLt's, Inductor's or a
benchmarked cuDNN algorithm's efficiency is not on the card and no shipped microbenchmark measures it, so those
rows have no number, and say so. What the model derives here is what another family's terms give:

- dit_gemm_tiles' dtype_layout: the GEMM in another compute dtype (precision: each term's roofline ratio; the
  weight's stored layout, [N, K] or [K, N], is not modelled: a GEMM reads either);
- vae_conv_kernels' cudnn_algorithm with benchmark off on channels_last_3d tensors: cuDNN's heuristics on the
  other layout, the conversions removed (layout).
"""

from __future__ import annotations

from typing import Any, Mapping

from harness.predict.context import Context
from harness.predict.layout import predict_layout
from harness.predict.precision import dtype_estimate
from harness.predict.prediction import Estimate, Unpredictable, register

_OTHER_KERNEL = ("{what}: which kernel it runs and how fast is what the variant measures; the card says nothing "
                 "of it and no shipped microbenchmark measures it")
GEMM_KERNELS = {
    "blas_library": "cuBLAS against cuBLASLt",
    "triton_matmul": "a Triton GEMM tile",
    "compiled": "Inductor's generated kernel",
}
CONV_KERNELS = {
    "triton_implicit_gemm": "a Triton implicit-GEMM tile",
    "compiled": "Inductor's generated kernel",
    "native_cpu": "torch's native CPU convolution",
    "im2col_gemm": "an explicit im2col and GEMM",
}
_NOT_MODELLED = {
    "frame_batching": "k streaming calls in one convolution: its fuller last wave and the cached frames read once "
                      "are not modelled",
}


@register("dit_gemm_tiles")
def predict_gemm(ctx: Context, variant: str, params: Mapping[str, Any]) -> Estimate | Unpredictable:
    if variant in GEMM_KERNELS:
        return Unpredictable(_OTHER_KERNEL.format(what=GEMM_KERNELS[variant]))
    if variant != "dtype_layout":
        return Unpredictable(f"{variant}: a variant this model does not know")
    dtype, layout = str(params.get("compute_dtype", "float32")), params.get("weight_layout", "nk")
    if dtype == ctx.dtype.dtype:
        return Unpredictable("the baseline itself (skipped by the experiment)" if layout == "nk" else
                             f"the weight pre-transposed in the same {dtype}: nothing on the card to remove or "
                             "change, and the library's path for it is not on the card")
    found = dtype_estimate(ctx, dtype)
    if isinstance(found, Estimate):
        return Estimate(found.baseline_us, found.variant_us,
                        f"{found.basis}; weight layout {layout}: not modelled", found.outcomes)
    return found


@register("vae_conv_kernels")
def predict_conv_kernels(ctx: Context, variant: str, params: Mapping[str, Any]) -> Estimate | Unpredictable:
    if variant == "cudnn_algorithm":
        if params.get("benchmark", True):
            return Unpredictable("cuDNN's benchmarked algorithm is known only once cuDNN has timed them")
        if params.get("memory_format") != "channels_last_3d":
            return Unpredictable("the baseline itself (skipped by the experiment)")
        return predict_layout(ctx, "channels_last_3d", {})
    if variant in CONV_KERNELS:
        return Unpredictable(_OTHER_KERNEL.format(what=CONV_KERNELS[variant]))
    return Unpredictable(_NOT_MODELLED.get(variant, f"{variant}: a variant this model does not know"))
