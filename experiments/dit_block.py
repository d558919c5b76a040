"""The DiT op cards' counter-experiments composed on one whole Wan block, as one Ulysses rank runs it.

attention_backends and dit_gemm_tiles change one op in isolation. Here the same changes are made to a
whole Wan 14B block (harness.workloads.dit_block: diffusers' WanTransformerBlock on rank 0's token shard,
its self-attention over the chunk's tokens and the KV cache, cross-attention to the text), timed as
one: whether the op cards' wins hold between the norms, modulation, casts and all-to-all stand-ins,
and whether they add up. The chunk card's diff row breaks the profiled time down per contained op card
(harness.trial.chunks.op_breakdown).

- `sdpa_backend(backend)`: both attentions with one SDPA backend forced (attention_backends' choice);
  on a CPU torch has flash and math only, the others are skipped with torch's reason;
- `fp32_gemms(weight_layout)`: every linear computed in float32 with float32 weights, [N, K] or
  pre-transposed [K, N] (dit_gemm_tiles' dtype_layout applied to each linear of the block): on a CPU
  without bf16 math, where oneDNN emulates bf16 GEMMs, a different kernel; on a GPU the FP32 SIMT path,
  which should lose;
- `compiled(mode)`: torch.compile of the whole block (CUDA: Inductor fuses the norms, modulation and
  casts around the GEMMs). Not drawn on a CPU: measured once on the 2-core CPU at the default scale,
  the compile took 29 s and the compiled bf16 block ran 1.14 s per call against 0.8 s eager;
- `modulation_once`: the block's six modulation vectors computed once from the rank's frame's timestep
  projection (diffusers' [B, 6, dim] path, broadcast over the tokens) instead of per token from a
  [B, M, 6, dim] copy of it (the per-token path). It applies when the rank's tokens lie in one latent
  frame, as rank 0's do at both resolutions (1170 < 1560, 2640 < 3520 tokens per frame).

Dtype: bf16 weights and activations, as the report's DiT ran (its linear cards are bf16 nvjet GEMMs).
"""

from __future__ import annotations

import copy
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch.autograd.profiler import record_function
from torch.nn.attention import sdpa_kernel

from experiments.attention_backends import BACKENDS, SdpaBackend, _probe
from experiments.dit_gemm_tiles import WeightLayout
from harness.api.chunks import attribute
from harness.api.compiled import CompileMode, compile_call
from harness.api.experiment import Experiment, Prepared, VariantSkipped
from harness.workloads.base import Workload
from harness.workloads.dit_block import ScopedLinear, shard_frame

EXPERIMENT = Experiment(
    name="dit_block",
    op_kinds=("dit_block",),
    hypothesis="the DiT op cards' wins hold when the ops run together in one block: an SDPA backend, the GEMMs' "
    "compute dtype and weight layout, a compiled block, and the modulation computed once per frame make the "
    "rank's whole block faster",
    check="effective_flops",
    workload_dtype="bfloat16",
)

CPU_COMPILE_MEASURED = ("torch.compile of the whole block measured once on the 2-core CPU at the default scale: "
                        "29 s to compile, then 1.14 s per call against 0.8 s eager; run it on CUDA")


def _block_call(w: Workload, module: torch.nn.Module, temb: torch.Tensor) -> Callable[[], torch.Tensor]:
    hidden, context = w.inputs["hidden_states"], w.inputs["encoder_hidden_states"]

    def run() -> torch.Tensor:
        with torch.no_grad():
            return module(hidden, context, temb)
    return run


def _module(w: Workload) -> torch.nn.Module:
    if w.module is None:
        raise VariantSkipped(f"a {w.op_kind} workload has no module to convert")
    return w.module


class Float32Linear(ScopedLinear):
    """A block linear computed in float32: the weight stored in float32, [N, K] (F.linear) or pre-transposed
    [K, N] (addmm), the activation cast per call and the output cast back to the activation's dtype."""

    weight_layout: str

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with record_function(self.scope):
            xc = x.to(self.weight.dtype)
            if self.weight_layout == "kn":
                y = torch.addmm(self.bias, xc.flatten(0, -2), self.weight).unflatten(0, x.shape[:-1])
            else:
                y = F.linear(xc, self.weight, self.bias)
            return y.to(x.dtype)


@EXPERIMENT.baseline
def bf16_eager(w: Workload) -> Callable[[], torch.Tensor]:
    """The block as the report ran it: bf16 weights and activations, eager, SDPA choosing its backend."""
    return w.run


@EXPERIMENT.variant
def sdpa_backend(w: Workload, backend: SdpaBackend = "flash") -> Prepared:
    """Both attentions of the block with one SDPA backend forced (torch.nn.attention.sdpa_kernel)."""
    which = BACKENDS[backend]

    def run() -> torch.Tensor:
        with sdpa_kernel(which):
            return w.run()

    _probe(run, f"SDPA backend {backend}", w.device)
    return Prepared(run, facts={"backend": f"sdpa:{backend}"},
                    recipe=f"with torch.nn.attention.sdpa_kernel(SDPBackend.{which.name}): block(...)")


@EXPERIMENT.variant
def fp32_gemms(w: Workload, weight_layout: WeightLayout = "nk") -> Prepared:
    """Every linear of the block in float32 with float32 weights, [N, K] (F.linear) or [K, N] (addmm)."""
    module = copy.deepcopy(_module(w))
    stored = 0
    for linear in module.modules():
        if isinstance(linear, ScopedLinear):
            linear.__class__ = Float32Linear
            assert isinstance(linear, Float32Linear)  # (for mypy: reclassed in place)
            linear.weight_layout = weight_layout
            weight = linear.weight.data.float()
            linear.weight.data = weight.t().contiguous() if weight_layout == "kn" else weight
            linear.bias.data = linear.bias.data.float()
            stored += weight.numel() * weight.element_size()
    # float32 is above the baseline's bf16: held to the same-precision bound (no Prepared.precision).
    return Prepared(_block_call(w, module, w.inputs["temb"]),
                    facts={"compute_dtype": "float32", "weight_layout": weight_layout, "weight_bytes_stored": stored})


def _cuda_only_here(device: str) -> str | None:
    return None if device.startswith("cuda") else CPU_COMPILE_MEASURED


@EXPERIMENT.variant(needs=_cuda_only_here)
def compiled(w: Workload, mode: CompileMode = "default") -> Prepared:
    """torch.compile of the whole block (Inductor: the norms, modulation and casts fused around the GEMMs)."""
    hidden, context = w.inputs["hidden_states"], w.inputs["encoder_hidden_states"]
    # Not fullgraph: a graph break in diffusers' block runs that part eagerly instead of failing the variant.
    run, compile_s = compile_call(_module(w), (hidden, context, w.inputs["temb"]), mode, w.device, fullgraph=False)
    return Prepared(run, facts={"compile_mode": mode, "compile_s": round(compile_s, 2)})


@EXPERIMENT.variant
def modulation_once(w: Workload) -> Prepared:
    """The six modulation vectors from the rank's frame's timestep projection [1, 6, dim], once per call,
    instead of from a per-token [1, M, 6, dim] copy of it."""
    frame = shard_frame(w.shape)
    if frame is None:
        raise VariantSkipped(f"the rank's {w.shape['tokens']} tokens span more than one latent frame of the grid "
                             f"{w.shape['grid']}: their timestep projections differ")
    per_frame = w.inputs["timestep_proj"][:, frame]
    return Prepared(_block_call(w, _module(w), per_frame), facts={"modulation": f"frame {frame}, [1, 6, dim]"},
                    recipe="temb = timestep_proj.unflatten(1, (6, -1))  # [B, 6, dim] for the rank's frame, "
                           "not [B, seq, 6, dim]; block(hidden_states, context, temb, rotary_emb)")


@EXPERIMENT.annotate
def name_report_cards(card: Any, workload: Workload) -> None:
    """Each profiled op gets the contained report card of its module or shape (kernel extra `report_card`)."""
    attribute(card)
