"""One Wan DiT block (14B dims) as one rank of 4-way Ulysses sequence parallelism runs it (chunk cards).

The model is diffusers' `WanTransformerBlock` with its own forward, modules and initialization (seeded
random weights: nothing is downloaded), in the dims of the Wan 14B config, which are diffusers'
`WanTransformer3DModel` defaults and docs/domain.md's: dim 5120, FFN 13824, 40 heads of 128, qk norm
"rms_norm_across_heads" (one RMSNorm over all 5120 channels of q and of k), cross-attention norm on,
eps 1e-6. The text context is 512 tokens x 5120: 512 is the umT5 text length of the Wan configs (the
length diffusers' WanAttnProcessor hardcodes, and the report's cross-attention card's valid keys,
512 of 512), 5120 because the model's condition embedder projects umT5's 4096 channels to the block
width before the blocks. Weights are bf16 but for the modules diffusers keeps in float32
(`WanTransformer3DModel._keep_in_fp32_modules`: the modulation table and the LayerNorms).

What one rank (rank 0, the rank the report profiled) runs, and what stands in for the other three:

- norms, modulation, every linear and the FFN on the rank's token shard: M = `tokens` rows (1170 at
  480x832, 2640 at 704x1280, as the report's linear cards), each with all 40 heads;
- self-attention: Ulysses' all-to-all gives the rank its 10 heads over all 4 x M tokens of the chunk.
  The all-to-all is replaced by synthetic tensors of the right shape (no process group): the rank's own
  q, k, v (its 10 heads, its M tokens) are concatenated with seeded q, k, v of the other ranks' 3 x M
  tokens; the chunk's 4 x M keys and values are written into a KV cache of `allocated_keys` slots
  behind the cached ones, and the 4 x M queries attend to the first `valid_keys` (the report's
  attention card, e.g. 28080 of 29640). The way back keeps the output rows of the rank's own tokens and
  takes the other 30 heads of those tokens (computed by the other ranks) from seeded tensors;
- cross-attention the same way (the report's cross card: all 4 x M queries, 10 heads, 512 keys): each
  rank projects the whole text context (diffusers' to_k / to_v) and uses its heads' keys and values.
  diffusers' own context parallelism leaves cross-attention unsplit (40 heads over the rank's M
  tokens): the same FLOPs and bytes, in the layout the report's card describes.

The timestep projection is per latent frame (the report's M=3 time-embedding linears: one row per
frame), and the block takes it per token (`temb` [1, M, 6, 5120]: diffusers' per-token path of Wan 2.2
TI2V), each token its frame's row; `timestep_proj` [1, frames, 6, 5120] is the per-frame original.

Activations (what varies from call to call): the rank's `hidden_states` and the step's `timestep_proj`;
`temb` is derived from the latter in every draw (`Bound.derived`). The text context is the video's, the
same for every call, and the other ranks' stand-ins and the KV cache are buffers of the module (its
state): constants. A block does not batch calls.

Each nn.Linear runs under a profiler scope naming its module (`SCOPE` + "attn1.to_q"): the report's
fused QKV card (N = 15360) stands for diffusers' separate to_q / to_k / to_v, which have the shape of
the 5120 x 5120 cards, so only the module tells them apart (harness.trial.dit_chunks).

Card shape parameters: `tokens` (the rank's M), `ranks`, `valid_keys`, `allocated_keys`, `text_tokens`,
`grid` [frames, H / 16, W / 16] (the chunk's token grid, for the rotary embedding). Scaling shrinks
the tokens (never below 8), the cache (never below the chunk's own keys) and the text (never below
16); the model's dims stay exact, so a CPU call still streams all 351 M weights. diffusers is imported
when the workload is built, never while it is timed.

The reference runs a float64 twin (made when it is asked for, then dropped) with diffusers' `.float()`
casts kept at float64 and the attention computed by harness.workloads.attention.reference_attention.
"""

from __future__ import annotations

import copy
import inspect
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch.autograd.profiler import record_function
from torch.overrides import TorchFunctionMode

from harness.workloads.attention import (
    AttentionConfig,
    reference_attention,
    valid_prefix_attention,
)
from harness.workloads.base import Bound, Plan
from harness.workloads.inputs import Source
from harness.workloads.params import WorkloadError, element_size, int_list, positive_int, require, scale_dim
from harness.workloads.seeded import derived_seed
from harness.workloads.vae_decode import PIP_HINT

KIND = "dit_block"
REQUIRES = ("diffusers",)  # optional packages building it imports (harness.workloads.registry.required_packages)
SCOPE = "dit_block/"  # profiler scope of each linear: SCOPE + its module name in the block
TOKEN_FLOOR, TEXT_FLOOR = 8, 16


@dataclass(frozen=True)
class BlockConfig:
    """The Wan 14B block: diffusers' WanTransformer3DModel defaults (checked when the block is built)."""

    dim: int = 5120
    ffn_dim: int = 13824
    heads: int = 40
    head_dim: int = 128
    qk_norm: str = "rms_norm_across_heads"
    cross_attn_norm: bool = True
    eps: float = 1e-6
    text_tokens: int = 512


WAN14B = BlockConfig()
ULYSSES_RANKS = WAN14B.heads // AttentionConfig().heads  # 40 heads, 10 per rank


@dataclass(frozen=True)
class BlockLinear:
    """Linears of the block that one report card shape stands for: rows, N and K of that card."""

    modules: tuple[str, ...]
    n: int
    k: int
    rows: str = "tokens"  # "tokens": the rank's M; "text": the context's tokens
    fused: bool = False  # one GEMM in the report (N = the modules' N summed), several linears in diffusers

    @property
    def calls(self) -> int:
        """The card's calls per block: one fused GEMM, or one per module."""
        return 1 if self.fused else len(self.modules)


def block_linears(config: BlockConfig = WAN14B) -> list[BlockLinear]:
    """The block's linears in the order they run, grouped as the report's cards are (fused QKV: N = 3 x dim)."""
    d, f = config.dim, config.ffn_dim
    return [BlockLinear(("attn1.to_q", "attn1.to_k", "attn1.to_v"), 3 * d, d, fused=True),
            BlockLinear(("attn1.to_out.0",), d, d),
            BlockLinear(("attn2.to_q", "attn2.to_out.0"), d, d),
            BlockLinear(("attn2.to_k", "attn2.to_v"), 2 * d, d, rows="text", fused=True),
            BlockLinear(("ffn.net.0.proj",), f, d),
            BlockLinear(("ffn.net.2",), d, f)]


def _shape(params: dict[str, Any], scale: float) -> dict[str, Any]:
    tokens = positive_int(KIND, "tokens", require(KIND, params, "tokens"))
    ranks = positive_int(KIND, "ranks", params.get("ranks", ULYSSES_RANKS))
    valid = positive_int(KIND, "valid_keys", require(KIND, params, "valid_keys"))
    allocated = positive_int(KIND, "allocated_keys", params.get("allocated_keys", valid))
    text = positive_int(KIND, "text_tokens", params.get("text_tokens", WAN14B.text_tokens))
    grid = int_list(KIND, "grid", require(KIND, params, "grid"), 3, minimum=1)
    if WAN14B.heads % ranks:
        raise WorkloadError(f"{KIND}: {WAN14B.heads} heads do not split over ranks={ranks}")
    if not tokens * ranks <= valid <= allocated:
        raise WorkloadError(f"{KIND}: need tokens x ranks <= valid_keys <= allocated_keys (the chunk's own keys are "
                            f"in the cache), got {tokens} x {ranks}, {valid}, {allocated}")
    if tokens * ranks > math.prod(grid):
        raise WorkloadError(f"{KIND}: {tokens} x {ranks} tokens exceed the grid {grid}")
    tokens_s = scale_dim(tokens, scale, TOKEN_FLOOR)
    valid_s = max(tokens_s * ranks, scale_dim(valid, scale, TOKEN_FLOOR))
    return {"tokens": tokens_s, "ranks": ranks, "valid_keys": valid_s,
            "allocated_keys": max(valid_s, scale_dim(allocated, scale, TOKEN_FLOOR)),
            "text_tokens": scale_dim(text, scale, TEXT_FLOOR), "grid": grid}


def _flops(s: dict[str, Any], config: BlockConfig = WAN14B) -> float:
    rows = {"tokens": s["tokens"], "text": s["text_tokens"]}
    linears = sum(2.0 * rows[g.rows] * g.n * g.k * g.calls for g in block_linears(config))
    queries, heads_per_rank = s["tokens"] * s["ranks"], config.heads // s["ranks"]
    return linears + 4.0 * queries * heads_per_rank * config.head_dim * (s["valid_keys"] + s["text_tokens"])


def plan(params: dict[str, Any], *, dtype: torch.dtype, scale: float) -> Plan:
    scaled, original = _shape(params, scale), _shape(params, 1.0)
    c = WAN14B
    # + the modulation table (6 x dim), the q and k RMSNorm weights of both attentions (4 x dim), norm2's affine
    weights = sum((g.n * g.k + g.n) * g.calls for g in block_linears()) + 12 * c.dim
    s = scaled
    activations = (2 * s["tokens"] + s["text_tokens"]) * c.dim + 6 * c.dim * s["tokens"]  # in, out, text, temb
    cache = 2 * s["valid_keys"] * c.heads // s["ranks"] * c.head_dim
    return Plan(
        op_kind=KIND, shape=scaled, original_shape=original, scale=scale, dtype=dtype,
        output_shape=(1, s["tokens"], c.dim), flops=_flops(scaled),
        min_bytes=float((weights + activations + cache) * element_size(dtype)),
        # The longest sum: the FFN's down projection (K = 13824) or the softmax over the valid keys.
        reduction_length=max(c.ffn_dim, s["valid_keys"]),
        notes=(f"Wan 14B block (diffusers WanTransformerBlock), rank 0 of {s['ranks']}-way Ulysses: the all-to-all "
               "replaced by seeded tensors of the other ranks' tokens and heads; seeded random weights",),
    )


def _wan() -> Any:
    try:
        from diffusers.models.transformers import transformer_wan
    except ImportError as exc:
        raise WorkloadError(f"{KIND} needs diffusers for the Wan transformer block ({exc}): {PIP_HINT}") from None
    return transformer_wan


def _check_config(wan: Any) -> None:
    """diffusers' WanTransformer3DModel defaults must still be the 14B block the cards describe."""
    d = {name: p.default for name, p in inspect.signature(wan.WanTransformer3DModel.__init__).parameters.items()}
    found = BlockConfig(dim=d["num_attention_heads"] * d["attention_head_dim"], ffn_dim=d["ffn_dim"],
                        heads=d["num_attention_heads"], head_dim=d["attention_head_dim"], qk_norm=d["qk_norm"],
                        cross_attn_norm=d["cross_attn_norm"], eps=d["eps"])
    if found != WAN14B:
        raise WorkloadError(f"{KIND}: diffusers' WanTransformer3DModel defaults are no longer the Wan 14B block "
                            f"({found}); pin diffusers to a version whose defaults are")


def rotary(q_or_k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """diffusers' WanAttnProcessor rotary embedding (a closure there): pairs (x1, x2) rotated by the angle."""
    x1, x2 = q_or_k.unflatten(-1, (-1, 2)).unbind(-1)
    cos, sin = cos[..., 0::2], sin[..., 1::2]
    out = torch.empty_like(q_or_k)
    out[..., 0::2] = x1 * cos - x2 * sin
    out[..., 1::2] = x1 * sin + x2 * cos
    return out.type_as(q_or_k)


class UlyssesAttnProcessor:
    """diffusers' WanAttnProcessor (no image context) as Ulysses rank 0 runs it: the rank's heads over the
    whole chunk's tokens, the all-to-all replaced by the seeded buffers on the attention module
    (`others_q/k/v`: the other ranks' tokens, `others_out`: the other ranks' heads of this rank's tokens;
    self-attention also `cache_k/v`). `exact`: the float64 reference's blockwise attention."""

    def __init__(self, heads_per_rank: int, valid_keys: int | None) -> None:
        self.heads_per_rank = heads_per_rank
        self.valid_keys = valid_keys  # None: cross-attention, every context key
        self.exact = False

    def __call__(self, attn: Any, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor | None = None,
                 attention_mask: torch.Tensor | None = None,
                 rotary_emb: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        source = hidden_states if encoder_hidden_states is None else encoder_hidden_states
        query, key, value = attn.to_q(hidden_states), attn.to_k(source), attn.to_v(source)
        query, key = attn.norm_q(query), attn.norm_k(key)
        query, key, value = (t.unflatten(2, (attn.heads, -1)) for t in (query, key, value))
        if rotary_emb is not None:
            query, key = rotary(query, *rotary_emb), rotary(key, *rotary_emb)
        h, tokens = self.heads_per_rank, hidden_states.shape[1]
        # all-to-all: this rank's heads, over its own tokens then the other ranks' (seeded)
        q = torch.cat([query[:, :, :h], attn.others_q], dim=1).transpose(1, 2)
        if self.valid_keys is None:
            k, v, valid = key[:, :, :h].transpose(1, 2), value[:, :, :h].transpose(1, 2), key.shape[1]
        else:
            valid, chunk = self.valid_keys, q.shape[2]
            # The chunk's keys and values go into the cache behind the cached ones.
            attn.cache_k[:, :, valid - chunk:valid] = torch.cat([key[:, :, :h], attn.others_k], dim=1).transpose(1, 2)
            attn.cache_v[:, :, valid - chunk:valid] = torch.cat([value[:, :, :h], attn.others_v], dim=1).transpose(1, 2)
            k, v = attn.cache_k, attn.cache_v
        if self.exact:
            out = reference_attention(q, k, v, valid, dtype=q.dtype)
        else:
            out = valid_prefix_attention(q, k, v, valid)
        # all-to-all back: this rank's tokens, its heads then the other ranks' (seeded)
        out = torch.cat([out[:, :, :tokens].transpose(1, 2), attn.others_out], dim=2)
        out = out.flatten(2, 3).type_as(query)
        return attn.to_out[1](attn.to_out[0](out))


class ScopedLinear(torch.nn.Linear):
    """nn.Linear whose call is a profiler scope named after its module: `scope`."""

    scope: str

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with record_function(self.scope):
            return super().forward(x)


class UlyssesRankBlock(torch.nn.Module):
    """diffusers' WanTransformerBlock on the rank's tokens, with the rotary tables of those tokens."""

    def __init__(self, block: torch.nn.Module, cos: torch.Tensor, sin: torch.Tensor) -> None:
        super().__init__()
        self.block = block
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def forward(self, hidden_states: torch.Tensor, context: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        return self.block(hidden_states, context, temb, (self.rope_cos, self.rope_sin))


class _Float64Kept(TorchFunctionMode):
    """`.float()` leaves float64 tensors alone: diffusers' block casts its norms, modulation and residuals
    to float32, which would round the float64 reference to float32 there."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if func is torch.Tensor.float and args[0].dtype == torch.float64:
            return args[0]
        return func(*args, **(kwargs or {}))


def _model_dtype(block: torch.nn.Module, dtype: torch.dtype, keep_fp32: list[str]) -> None:
    """The block in `dtype` but the parameters diffusers keeps in float32 (matched by module name)."""
    for name, param in block.named_parameters():
        wide = any(part in keep_fp32 for part in name.split("."))
        param.data = param.data.to(torch.float32 if wide else dtype)


def build(plan_: Plan, source: Source, layout: str | None) -> dict[str, Any]:
    if layout not in (None, "contiguous"):
        raise WorkloadError(f"{KIND}: layout {layout!r} does not apply (only contiguous)")
    wan = _wan()
    _check_config(wan)
    c, s, dtype = WAN14B, plan_.shape, plan_.dtype
    m, ranks, h = s["tokens"], s["ranks"], c.heads // s["ranks"]
    frames, gh, gw = s["grid"]
    with torch.random.fork_rng(devices=[]):  # seeded weights without touching the caller's RNG
        torch.manual_seed(derived_seed(source.seed, "wan_block_weights"))
        block = wan.WanTransformerBlock(c.dim, c.ffn_dim, c.heads, c.qk_norm, c.cross_attn_norm, c.eps)
    _model_dtype(block, dtype, list(wan.WanTransformer3DModel._keep_in_fp32_modules))
    for name, module in block.named_modules():
        if type(module) is torch.nn.Linear:
            module.__class__ = ScopedLinear
            module.scope = SCOPE + name
    others, others_out = [1, (ranks - 1) * m, h, c.head_dim], [1, m, c.heads - h, c.head_dim]
    cache = [1, h, s["allocated_keys"], c.head_dim]
    for role, attn, valid in (("self", block.attn1, s["valid_keys"]), ("cross", block.attn2, None)):
        attn.set_processor(UlyssesAttnProcessor(h, valid))
        buffers = {"others_q": others, "others_out": others_out}
        if valid is not None:
            buffers.update(others_k=others, others_v=others, cache_k=cache, cache_v=cache)
        for name, shape in buffers.items():
            attn.register_buffer(name, source.take(f"{role}_{name}", tuple(shape), tuple(shape), dtype),
                                 persistent=False)
    rope = wan.WanRotaryPosEmbed(c.head_dim, (1, 2, 2), 1024)
    cos, sin = rope(torch.empty(1, 1, frames, 2 * gh, 2 * gw, device="meta"))
    module = UlyssesRankBlock(block, cos[:, :m], sin[:, :m]).to(source.device).eval().requires_grad_(False)

    hidden = source.take("hidden_states", (1, m, c.dim), (1, m, c.dim), dtype, primary=True)
    context = source.take("encoder_hidden_states", (1, s["text_tokens"], c.dim), (1, s["text_tokens"], c.dim), dtype)
    per_frame = source.take("timestep_proj", (1, frames, 6, c.dim), (1, frames, 6, c.dim), dtype)
    token_frame = torch.arange(m, device=per_frame.device) // (gh * gw)  # rank 0's tokens are the chunk's first M

    def bind(activations: dict[str, torch.Tensor]) -> Bound:
        tokens, projection = activations["hidden_states"], activations["timestep_proj"]
        temb = projection[:, token_frame].contiguous()  # token i lies in frame i // (tokens per frame)

        def run() -> torch.Tensor:
            with torch.no_grad():
                return module(tokens, context, temb)

        def reference(wide: torch.dtype) -> torch.Tensor:
            twin = copy.deepcopy(module).to(wide)
            # diffusers' attention modules (nn.Module's __getattr__ types them as Tensor | Module)
            attns: tuple[Any, ...] = (twin.block.attn1, twin.block.attn2)
            for attn in attns:
                attn.processor.exact = True
            with torch.no_grad(), _Float64Kept():
                return twin(tokens.to(wide), context.to(wide), temb.to(wide))

        return Bound(run, reference, derived={"temb": temb})

    # The rank's tokens and the denoising step's timestep projection vary per call; the text context is the
    # video's, the same for every call, and the other ranks' stand-ins and the KV cache are the module's state.
    return {"inputs": {"hidden_states": hidden, "encoder_hidden_states": context, "timestep_proj": per_frame},
            "activations": ("hidden_states", "timestep_proj"), "bind": bind, "module": module}


def shard_frame(shape: dict[str, Any]) -> int | None:
    """The latent frame all of rank 0's tokens lie in (one timestep projection serves them all), or None."""
    _, gh, gw = shape["grid"]
    return 0 if shape["tokens"] <= gh * gw else None
