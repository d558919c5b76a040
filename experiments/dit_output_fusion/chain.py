"""The DiT's output head as one workload: final norm, modulation and projection, extended from the card's op.

The card is `proj_out` alone (aten.linear, [M, 5120] bf16 -> [M, 64]). In diffusers'
WanTransformer3DModel.forward its producer is

    shift, scale = (scale_shift_table + temb).chunk(2)                  # float32 (table kept in fp32)
    hidden = (norm_out(hidden.float()) * (1 + scale) + shift).type_as(hidden)
    hidden = proj_out(hidden)                                            # nn.Linear(5120, 64), bf16

with norm_out an FP32LayerNorm without affine (eps 1e-6): the activation goes bf16 -> fp32, is
normalized, modulated in fp32, cast back to bf16 and read by the projection. Measured alone, the
projection hides the passes its producer makes over the same [M, 5120] activation.

Modulation per latent frame: the report's time embedding runs with M=3 rows, one timestep per latent
frame of the chunk (diffusion forcing), so temb, shift and scale are per frame ([frames, K], diffusers'
`temb.ndim == 3` branch) and each frame's tokens (M / frames contiguous rows: tokens are frame-major) get
their frame's shift and scale. A card whose M does not split into LATENT_FRAMES equal groups gets one
shift/scale pair for every row (diffusers' `temb.ndim == 2` branch); its note says so.

Seeded shift ~ N(0, 1) and scale ~ N(0, 0.5^2) (1 + scale mostly positive, as a trained model keeps it):
every term of the output is of the order of the output itself, so a variant that drops the shift, the
scale or the norm errs by tens of percent.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from harness.api.experiment import VariantSkipped
from harness.workloads.base import Workload

EPS = 1e-6  # WanTransformer3DModel's norm_out
LATENT_FRAMES = 3  # rows of the report's time-embedding cards (M=3): one timestep per latent frame
PROJ_OUT_FEATURES = 64  # out_channels 16 x patch 1x2x2
SHIFT_STD, SCALE_STD = 1.0, 0.5
MODULATION_BYTES = 4  # shift and scale are float32 (scale_shift_table is kept in fp32)
# FLOPs per activation element besides the GEMM: the norm's mean (1 add), centring (1), square and sum
# (2), normalizing (1); the modulation's multiply and add (2).
ELEMENTWISE_FLOPS = 7


@dataclass(frozen=True)
class Pass:
    """One pass of a variant over the [M, K] activation: what it reads and writes per element."""

    op: str
    read_bytes: int
    write_bytes: int

    @property
    def bytes(self) -> int:
        return self.read_bytes + self.write_bytes


# The chain as diffusers runs it (the baseline), op by op; every intermediate is a full [M, K] tensor.
EAGER_PASSES = (
    Pass("hidden.float()", 2, 4),
    Pass("layer_norm (fp32)", 4, 4),
    Pass("* (1 + scale)", 4, 4),
    Pass("+ shift", 4, 4),
    Pass(".type_as(hidden) (bf16)", 4, 2),
    Pass("proj_out reads its input", 2, 0),
)
FUSED_PASSES = (Pass("one kernel reads the activation once", 2, 0),)


def frames_of(rows: int) -> int:
    """How many shift/scale pairs the rows split into: LATENT_FRAMES when they divide evenly, else 1."""
    return LATENT_FRAMES if rows % LATENT_FRAMES == 0 else 1


def per_row(table: torch.Tensor, rows: int) -> torch.Tensor:
    """[frames, K] -> [rows, K]: each frame's row for its rows / frames contiguous tokens."""
    return table.repeat_interleave(rows // table.shape[0], dim=0)


def modulated(hidden: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """diffusers' norm_out then modulation, in its dtypes: fp32 norm and modulation, cast back to hidden's."""
    rows = hidden.shape[0]
    normed = F.layer_norm(hidden.float(), (hidden.shape[-1],), eps=EPS)
    return (normed * (1 + per_row(scale, rows)) + per_row(shift, rows)).type_as(hidden)


def eager_chain(hidden: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor, weight: torch.Tensor,
                bias: torch.Tensor | None) -> torch.Tensor:
    """norm_out -> modulation -> proj_out, op by op, as WanTransformer3DModel.forward runs them."""
    return F.linear(modulated(hidden, shift, scale), weight, bias)


def chain_reference(hidden: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor, weight: torch.Tensor,
                    bias: torch.Tensor | None, wide: torch.dtype) -> torch.Tensor:
    """The whole chain in `wide` from the definitions (mean, biased variance, eps), no rounding between steps."""
    h = hidden.to(wide)
    centred = h - h.mean(dim=-1, keepdim=True)
    normed = centred / torch.sqrt((centred * centred).mean(dim=-1, keepdim=True) + EPS)
    rows = h.shape[0]
    mod = normed * (1 + per_row(scale.to(wide), rows)) + per_row(shift.to(wide), rows)
    out = mod @ weight.to(wide).T
    return out if bias is None else out + bias.to(wide)


def min_bytes(rows: int, k: int, n: int, frames: int, passes: tuple[Pass, ...], has_bias: bool = True,
              elem: int = 2) -> float:
    """Minimum DRAM bytes of one call: the activation passes, plus W, b, shift/scale read once and y written."""
    activation = rows * k * sum(p.bytes for p in passes)
    fixed = n * k * elem + (n * elem if has_bias else 0) + 2 * frames * k * MODULATION_BYTES + rows * n * elem
    return float(activation + fixed)


def is_extended(w: Workload) -> bool:
    return "shift" in w.inputs


def chain_inputs(w: Workload) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(hidden, shift, scale, weight, bias) of an extended workload; VariantSkipped on any other card."""
    if not is_extended(w):
        raise VariantSkipped(
            f"this card is not the DiT output projection (N={w.original_shape.get('N')}, not {PROJ_OUT_FEATURES}): "
            "its producer is not the final norm and modulation, so there is nothing to fuse; "
            "dit_output_fusion measures the N=64 proj_out cards only")
    i = w.inputs
    return i["hidden"], i["shift"], i["scale"], i["weight"], i.get("bias")


def extend_with_producer(w: Workload) -> Workload:
    """The card's proj_out extended with norm_out and the modulation: the chain this experiment measures.

    A linear card whose N is not 64 is returned as built: its variants then skip with the reason.
    """
    # The card's N, not the scaled one: scaling shrinks N down to 64 (harness.workloads.base.scale_dim).
    if w.op_kind != "linear" or w.original_shape.get("N") != PROJ_OUT_FEATURES:
        return w
    hidden, weight, bias = w.inputs["x"], w.inputs["weight"], w.inputs.get("bias")
    rows, k = hidden.shape
    n = weight.shape[0]
    frames = frames_of(rows)
    generator = torch.Generator(device="cpu").manual_seed(2_000_003 + int(w.seed or 0))
    shift = (torch.randn(frames, k, generator=generator) * SHIFT_STD).to(hidden.device)
    scale = (torch.randn(frames, k, generator=generator) * SCALE_STD).to(hidden.device)
    frames_note = (f"shift/scale per latent frame: {frames} x [{k}] float32, each for {rows // frames} rows"
                   if frames > 1 else f"one shift/scale pair for all rows ({rows} rows do not split into "
                   f"{LATENT_FRAMES} frames)")
    return dataclasses.replace(
        w,
        inputs={"hidden": hidden, "shift": shift, "scale": scale, "weight": weight,
                **({"bias": bias} if bias is not None else {})},
        run=lambda: eager_chain(hidden, shift, scale, weight, bias),
        _reference=lambda wide: chain_reference(hidden, shift, scale, weight, bias, wide),
        flops=2.0 * rows * n * k + ELEMENTWISE_FLOPS * rows * k,
        min_bytes=min_bytes(rows, k, n, frames, FUSED_PASSES, bias is not None, hidden.element_size()),
        notes=[*w.notes,
               ("the card's op (proj_out) was extended with its producer (norm_out + modulation): unfused, "
                "they pass over the same [M, K] activation; FLOPs and minimum bytes are the whole chain's, "
                "the bytes with the activation read once (the fused minimum)"),
               frames_note, f"hidden is the card's x; shift/scale seeded (seed {w.seed})"],
    )
