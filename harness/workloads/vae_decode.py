"""vae_decode: the Wan 2.1 VAE decoder on one realtime chunk of latent frames, as the streaming decode runs it.

A chunk card (harness.trial.chunks) stands for the VAE decode of one chunk: `post_quant_conv` over the chunk's
latent frames, then the decoder frame by frame, each frame reading and replacing the causal feature cache
(`feat_cache`: the last two frames each causal conv saw) that the frames before it left, then the clamp to
[-1, 1], exactly as diffusers' `AutoencoderKLWan._decode` does, except that the cache is carried over from
the frames decoded before the chunk instead of starting empty. Those earlier frames (`primed_frames`,
default 2) are decoded once when the workload is built and are not timed: the first frame of a stream
leaves the temporal upsamplers' caches empty (their next call pads with zeros), the second fills them, and
from then on every frame runs the same shapes, the ones the report profiled.

Card shape parameters: `latent` [N, 16, T, H, W] (T latent frames per chunk; H, W the latent slice one
rank decodes), optionally `primed_frames`. The model is diffusers' `AutoencoderKLWan` in its default
config (the Wan 2.1 VAE: 127 M parameters, 73 M of them in the decoder) with seeded random weights:
nothing is downloaded, and the decode's ops and shapes do not depend on the weights' values. diffusers is
imported when the workload is built, never while it is timed; without it the build is a WorkloadError
naming the pip command.

FLOPs, minimum bytes and the reduction length come from `decoder_layers`, the decoder's convolutions
derived from the Wan 2.1 config (the same construction as diffusers' `WanDecoder3d`; the tests check
it against the module): convolutions and the mid-block attention count, elementwise ops (norms,
SiLU, the residual adds, upsampling) do not. Minimum bytes are every convolution's weights and biases
read once, the latent read and the frames written.

Scaling shrinks the latent's H and W and its frames T (never below 1), so a CPU decodes one latent frame
of a small slice; the decoder's channels and kernels, the model itself, stay exact.

The latent is the activation (each chunk decodes its own). The module, with the causal cache the primed
frames left in it, is a constant: another draw decodes another latent from the same state, and
`primed_latent` is kept only as the record of that state. A decode does not batch calls.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import torch

from harness.workloads.base import Bound, Plan
from harness.workloads.inputs import Source
from harness.workloads.params import WorkloadError, element_size, int_list, positive_int, require, scale_dim
from harness.workloads.seeded import derived_seed

KIND = "vae_decode"
REQUIRES = ("diffusers",)  # optional packages building it imports (harness.workloads.registry.required_packages)
PIP_HINT = "pip install -e '.[chunk]' (or pip install 'diffusers>=0.35')"


@dataclass(frozen=True)
class DecoderConfig:
    """The decoder's architecture: diffusers' AutoencoderKLWan default config, which is the Wan 2.1 VAE."""

    z_dim: int = 16
    base_dim: int = 96
    dim_mult: tuple[int, ...] = (1, 2, 4, 4)
    num_res_blocks: int = 2
    temporal_upsample: tuple[bool, ...] = (True, True, False)  # the encoder's temporal_downsample reversed
    out_channels: int = 3

    @property
    def spatial_factor(self) -> int:
        """Output pixels per latent pixel along H and W: one 2x upsampling per up block but the last."""
        return 2 ** (len(self.dim_mult) - 1)

    @property
    def temporal_factor(self) -> int:
        """Output frames per latent frame in the steady state: 2x per temporal upsampler."""
        return 2 ** sum(self.temporal_upsample)


WAN21 = DecoderConfig()


@dataclass(frozen=True)
class Layer:
    """One convolution of the chunk decode, in the stream's steady state.

    `level`: the layer runs at the latent's H and W times 2**level. `frames`: output frames per decoded
    latent frame at that point of the decoder. `per_chunk`: post_quant_conv, which runs once over all of
    the chunk's latent frames instead of once per frame.
    """

    name: str
    op_kind: str  # "conv3d" or "conv2d"
    cin: int
    cout: int
    kernel: tuple[int, ...]
    level: int
    frames: int
    per_chunk: bool = False

    @property
    def causal_frames(self) -> int:
        """Frames a causal conv3d takes from the cache in front of its input (kT - 1); 0 for a conv2d."""
        return self.kernel[0] - 1 if self.op_kind == "conv3d" else 0

    def input_frames(self, chunk_frames: int) -> int:
        """The input's T in the steady state: the cached frames plus the new ones."""
        return chunk_frames if self.per_chunk else self.frames + self.causal_frames

    def first_frame_input_frames(self) -> int:
        """The input's T when the stream's first frame is decoded: no temporal upsampling yet, zero padding
        in place of the cache."""
        return self.kernel[0] if self.op_kind == "conv3d" else 1

    def macs(self, latent: list[int]) -> int:
        """Multiply-adds per chunk for `latent` [N, C, T, H, W]."""
        n, _, t, h, w = latent
        if self.per_chunk:
            outputs = n * t * h * w
        else:
            outputs = n * t * self.frames * (h << self.level) * (w << self.level)
        return self.cout * self.cin * math.prod(self.kernel) * outputs


def decoder_layers(config: DecoderConfig = WAN21) -> list[Layer]:
    """The convolutions of one chunk decode, in the order they run, with diffusers' module names.

    Mirrors diffusers' WanDecoder3d (non-residual, i.e. Wan 2.1): conv_in, a mid block (residual block,
    attention, residual block), one up block per channel multiplier (num_res_blocks + 1 residual
    blocks, then an upsampler but after the last: a causal time conv doubling the frames where
    temporal_upsample says so, and a 2x spatial upsampling followed by a 3x3 Conv2d halving the
    channels), then conv_out. A residual block is two 3x3x3 causal convs, plus a 1x1x1 shortcut conv
    when its channels change.
    """
    c = config
    dims = [c.base_dim * m for m in (c.dim_mult[-1], *reversed(c.dim_mult))]
    layers = [Layer("post_quant_conv", "conv3d", c.z_dim, c.z_dim, (1, 1, 1), 0, 1, per_chunk=True)]
    level, frames = 0, 1

    def conv3d(name: str, cin: int, cout: int, kernel: tuple[int, int, int] = (3, 3, 3)) -> None:
        layers.append(Layer(f"decoder.{name}", "conv3d", cin, cout, kernel, level, frames))

    def residual_block(name: str, cin: int, cout: int) -> None:
        if cin != cout:
            conv3d(f"{name}.conv_shortcut", cin, cout, (1, 1, 1))
        conv3d(f"{name}.conv1", cin, cout)
        conv3d(f"{name}.conv2", cout, cout)

    conv3d("conv_in", c.z_dim, dims[0])
    residual_block("mid_block.resnets.0", dims[0], dims[0])
    for part, cout in (("to_qkv", 3 * dims[0]), ("proj", dims[0])):
        layers.append(Layer(f"decoder.mid_block.attentions.0.{part}", "conv2d", dims[0], cout, (1, 1), level, frames))
    residual_block("mid_block.resnets.1", dims[0], dims[0])
    for i, (cin, cout) in enumerate(zip(dims[:-1], dims[1:])):
        if i > 0:
            cin //= 2  # the upsampler before this block halved the channels
        for r in range(c.num_res_blocks + 1):
            residual_block(f"up_blocks.{i}.resnets.{r}", cin if r == 0 else cout, cout)
        if i == len(c.dim_mult) - 1:
            continue
        if c.temporal_upsample[i]:
            conv3d(f"up_blocks.{i}.upsamplers.0.time_conv", cout, 2 * cout, (3, 1, 1))
            frames *= 2
        level += 1
        layers.append(Layer(f"decoder.up_blocks.{i}.upsamplers.0.resample.1", "conv2d", cout, cout // 2, (3, 3),
                            level, frames))
    conv3d("conv_out", dims[-1], c.out_channels)
    return layers


def attention_flops(latent: list[int], config: DecoderConfig = WAN21) -> float:
    """The mid block's single-head attention per chunk: Q K^T and P V over the H*W tokens of each frame."""
    n, _, t, h, w = latent
    channels = config.base_dim * config.dim_mult[-1]
    return 4.0 * channels * (h * w) ** 2 * n * t


def output_shape(latent: list[int], config: DecoderConfig = WAN21) -> list[int]:
    n, _, t, h, w = latent
    return [n, config.out_channels, t * config.temporal_factor, h * config.spatial_factor, w * config.spatial_factor]


def plan(params: dict[str, Any], *, dtype: torch.dtype, scale: float) -> Plan:
    latent = int_list(KIND, "latent", require(KIND, params, "latent"), 5, minimum=1)
    primed = positive_int(KIND, "primed_frames", params.get("primed_frames", 2))
    if latent[1] != WAN21.z_dim:
        raise WorkloadError(f"{KIND}: the Wan 2.1 VAE's latent has {WAN21.z_dim} channels, got latent {latent}")
    if primed < 2:
        raise WorkloadError(f"{KIND}: primed_frames={primed}: the causal cache reaches its steady state after "
                            "2 decoded frames (the first leaves the temporal upsamplers' caches empty)")
    n, c, t, h, w = latent
    scaled = [n, c, scale_dim(t, scale, 1), scale_dim(h, scale, 1), scale_dim(w, scale, 1)]
    layers = decoder_layers()
    flops = 2.0 * sum(layer.macs(scaled) for layer in layers) + attention_flops(scaled)
    weights = sum(layer.cout * layer.cin * math.prod(layer.kernel) + layer.cout for layer in layers)
    out = output_shape(scaled)
    elements = weights + math.prod(scaled) + math.prod(out)

    def shape(lat: list[int]) -> dict[str, Any]:
        return {"latent": lat, "primed_frames": primed, "output": output_shape(lat), "model": "wan2.1_vae"}

    notes = ["Wan 2.1 VAE (diffusers AutoencoderKLWan default config), seeded random weights"]
    return Plan(
        op_kind=KIND,
        shape=shape(scaled),
        original_shape=shape(list(latent)),
        scale=scale,
        dtype=dtype,
        output_shape=tuple(out),
        flops=flops,
        min_bytes=float(elements * element_size(dtype)),
        # The longest sum any output term goes through: a 384-channel 3x3x3 conv (384 * 27 terms).
        reduction_length=max(layer.cin * math.prod(layer.kernel) for layer in layers),
        notes=tuple(notes),
    )


def _wan_vae() -> Any:
    """diffusers' Wan VAE module (imported here: never inside a timed call), or a WorkloadError saying how to get it."""
    try:
        from diffusers.models.autoencoders import autoencoder_kl_wan
    except ImportError as exc:
        raise WorkloadError(f"{KIND} needs diffusers for the Wan VAE ({exc}): {PIP_HINT}") from None
    return autoencoder_kl_wan


class StreamingChunkDecoder(torch.nn.Module):
    """post_quant_conv and the Wan decoder decoding one chunk of latent frames from a primed causal cache.

    The cache tensors are buffers, so `.to(dtype)` and a memory-format conversion of the module take the
    cache along: a variant decodes from the same state as the baseline, in its own dtype and layout.
    """

    def __init__(self, post_quant_conv: torch.nn.Module, decoder: torch.nn.Module, cache_slots: int):
        super().__init__()
        self.post_quant_conv = post_quant_conv
        self.decoder = decoder
        self.cache_slots = cache_slots

    def prime(self, latent: torch.Tensor) -> None:
        """Decode `latent`'s frames as a stream's first frames and keep the causal cache they leave."""
        cache: list[Any] = [None] * self.cache_slots
        x = self.post_quant_conv(latent)
        for i in range(x.shape[2]):
            self.decoder(x[:, :, i:i + 1], feat_cache=cache, feat_idx=[0], first_chunk=i == 0)
        if any(isinstance(entry, str) for entry in cache):  # "Rep": an upsampler that has seen one frame only
            raise WorkloadError(f"{KIND}: the cache is not in its steady state after {x.shape[2]} primed frames")
        for i, entry in enumerate(cache):
            if entry is not None:  # a slot no layer reads (diffusers counts the shortcut conv too) stays None
                self.register_buffer(f"cache_{i}", entry, persistent=False)

    def primed_cache(self) -> list[torch.Tensor | None]:
        return [getattr(self, f"cache_{i}", None) for i in range(self.cache_slots)]

    def forward(self, latent: torch.Tensor) -> torch.Tensor:
        # A fresh list per call: the decoder replaces the list's entries and never writes into the
        # tensors, so every call starts from the same primed state.
        cache = self.primed_cache()
        x = self.post_quant_conv(latent)
        frames = [self.decoder(x[:, :, i:i + 1], feat_cache=cache, feat_idx=[0]) for i in range(x.shape[2])]
        return torch.clamp(torch.cat(frames, dim=2), min=-1.0, max=1.0)


def _check_config(config: Any) -> None:
    """diffusers' default config must still be the Wan 2.1 VAE that the cards and `decoder_layers` describe."""
    found = DecoderConfig(
        z_dim=config.z_dim, base_dim=config.decoder_base_dim or config.base_dim, dim_mult=tuple(config.dim_mult),
        num_res_blocks=config.num_res_blocks, temporal_upsample=tuple(config.temperal_downsample[::-1]),
        out_channels=config.out_channels,
    )
    if found != WAN21 or config.is_residual or config.patch_size is not None:
        raise WorkloadError(f"{KIND}: diffusers' AutoencoderKLWan default config is no longer the Wan 2.1 VAE "
                            f"({found}); pin diffusers to a version whose default is")


def _exact_upsampling(module: torch.nn.Module, wan: Any) -> None:
    """Swap each WanUpsample for the plain nn.Upsample it extends: WanUpsample computes in float32 whatever
    its input's dtype, which would round the float64 reference to float32 three times."""
    for name, child in module.named_children():
        if isinstance(child, wan.WanUpsample):
            setattr(module, name, torch.nn.Upsample(scale_factor=child.scale_factor, mode=child.mode))
        else:
            _exact_upsampling(child, wan)


def build(plan_: Plan, source: Source, layout: str | None) -> dict[str, Any]:
    if layout not in (None, "contiguous"):
        raise WorkloadError(f"{KIND}: the decoder is built contiguous; a memory format is a variant's choice")
    wan = _wan_vae()
    s, o, dtype = plan_.shape, plan_.original_shape, plan_.dtype
    latent = source.take("latent", tuple(o["latent"]), tuple(s["latent"]), dtype, primary=True)
    primed_shape = [*s["latent"][:2], s["primed_frames"], *s["latent"][3:]]
    primed = source.take("primed_latent", tuple(primed_shape), tuple(primed_shape), dtype)
    with torch.random.fork_rng(devices=[]):  # seeded weights without touching the caller's RNG
        torch.manual_seed(derived_seed(source.seed, "wan_vae_weights"))
        vae = wan.AutoencoderKLWan()
    _check_config(vae.config)
    slots = sum(isinstance(m, wan.WanCausalConv3d) for m in vae.decoder.modules())
    module = StreamingChunkDecoder(vae.post_quant_conv, vae.decoder, slots)
    del vae  # the encoder is not needed
    module = module.to(device=source.device, dtype=dtype).eval().requires_grad_(False)
    with torch.no_grad():
        module.prime(primed)

    def bind(activations: dict[str, torch.Tensor]) -> Bound:
        chunk = activations["latent"]

        def run() -> torch.Tensor:
            with torch.no_grad():
                return module(chunk)

        def reference(wide: torch.dtype) -> torch.Tensor:
            twin = copy.deepcopy(module).to(wide)  # the cache buffers too: the same primed state, widened
            _exact_upsampling(twin, wan)
            with torch.no_grad():
                return twin(chunk.to(wide))

        return Bound(run, reference)

    # primed_latent is what the stream decoded before the chunk: only its cache is used, kept for the record.
    return {"inputs": {"latent": latent, "primed_latent": primed}, "activations": ("latent",), "bind": bind,
            "module": module}
