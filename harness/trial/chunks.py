"""Chunk cards: the report's op cards of one model part, measured together as the model runs them.

Every op card is one op in isolation. A chunk card is the VAE decode of one realtime chunk at one
resolution (op kind `vae_decode`, harness.workloads.vae_decode), derived from the report itself:

- it contains the report's conv3d cards of that resolution whose shapes the Wan 2.1 decoder runs in
  the stream's steady state (`extra["contains"]`, in the order the decoder runs them). A card matches
  a decoder convolution (`decoder_layers`) by channels, kernel and level (its output H over the
  latent's H = resolution H / 8 is 2**level) and by its input frames: the cached frames plus the
  new ones (e.g. 6 = 2 + 4 in the last two up blocks). Cards of the stream's first frame (no
  temporal upsampling yet: T = 3 everywhere, T = 1 for the shortcut) are listed apart, under
  `chunk["first_frame_only"]`;
- its latent is [1, 16, frames, H / 8, W_slice]: frames from the post_quant_conv card's T (the latent
  frames of one chunk), the slice width from the level-0 decoder convs (each rank decodes a slice);
- `extra["chunk"]` records per contained card the decoder layers it stands for and its invocations per
  chunk (layers x latent frames; post_quant_conv runs once per chunk), and the chunk's time as the
  report would put it (each card's kernel-duration sum x its invocations), which is not the chunk's
  `summed_kernel_us`: that stays empty, so the report's stage totals do not count the VAE twice.

A measured chunk card's kernels are attributed to its contained cards, and its diff row's `op_breakdown`
and prediction made, by harness.cards.chunk_breakdown (torch-free: the run's side writes the diff); this module
re-exports them. The DiT block's chunk cards (op kind `dit_block`) are derived by harness.trial.dit_chunks;
`add_chunk_cards` serves both kinds.
"""

from __future__ import annotations

from typing import Any

import torch

from harness.cards.chunk_breakdown import (
    OTHER,
    Key,
    attach_op_breakdowns,
    attribute,
    chunk_card,
    conv3d_key,
    not_carried_over,
    op_breakdown,
    predicted_speedup,
)
from harness.cards.model import Card, Report
from harness.trial.dit_chunks import dit_chunk_cards
from harness.workloads.base import parse_resolution
from harness.workloads.vae_decode import KIND as VAE_DECODE
from harness.workloads.vae_decode import WAN21, Layer, decoder_layers, plan

__all__ = ["OTHER", "add_chunk_cards", "attach_op_breakdowns", "attribute", "not_carried_over", "op_breakdown",
           "predicted_speedup", "vae_chunk_cards"]

PRIMED_FRAMES = 2  # frames decoded before the chunk: the cache's steady state (harness.workloads.vae_decode)
REALTIME_CHUNK_FRAMES = 3  # latent frames per chunk (docs/domain.md) when the report has no post_quant_conv card


def _layer_key(layer: Layer) -> Key:
    return (layer.cin, layer.cout, *layer.kernel, layer.level)


def _plain_conv(params: dict[str, Any]) -> bool:
    """Stride 1, no padding, no dilation, one group: how the decoder's causal convs call conv3d."""
    def all_equal(key: str, value: int) -> bool:
        given = params.get(key, value)
        return all(v == value for v in (given if isinstance(given, list) else [given]))

    return (all_equal("stride", 1) and all_equal("padding", 0) and all_equal("dilation", 1)
            and params.get("groups", 1) == 1)


def _out_width(card: Card) -> int:
    """A plain conv3d card's output W (its input W less kW - 1)."""
    return int(card.shape_parameters["input"][4]) - (int(card.shape_parameters["weight"][4]) - 1)


def _chunk_card(resolution: str, contains: list[tuple[Card, list[Layer]]], first_frame_only: list[str],
                frames: int, latent_h: int, latent_w: int, post_quant_w: int | None) -> Card:
    """The chunk card of one resolution from its matched op cards: [(card, the decoder layers it stands for)]."""
    latent = [1, WAN21.z_dim, frames, latent_h, latent_w]
    ops: dict[str, dict[str, Any]] = {}
    report_us = 0.0
    for card, layers in contains:
        calls = len(layers) * (1 if layers[0].per_chunk else frames)
        ops[card.id] = {"key": list(_layer_key(layers[0])), "layers": [layer.name for layer in layers],
                        "calls_per_chunk": calls, "report_us": card.summed_kernel_us}
        report_us += (card.summed_kernel_us or 0.0) * calls
    ids = [card.id for card, _ in contains]
    shape = {"latent": latent, "primed_frames": PRIMED_FRAMES}
    notes = [f"derived from the report's vae conv3d cards at {resolution}: the Wan 2.1 decoder's steady-state "
             f"shapes for {frames} latent frames of a {latent_h}x{latent_w} latent slice"]
    if post_quant_w is not None and post_quant_w != latent_w:
        notes.append(f"the report's post_quant_conv ran on the full-width latent (W={post_quant_w}); the chunk "
                     f"decodes one rank's slice (W={latent_w}) throughout")
    return chunk_card(stage="vae", op=VAE_DECODE, part="decode", resolution=resolution, shape=shape, contains=ids,
                      flops=plan(shape, dtype=torch.float32, scale=1.0).flops,
                      chunk={"ops": ops, "first_frame_only": first_frame_only, "report_chunk_us": report_us,
                             "notes": notes})


def vae_chunk_cards(report: Report) -> list[Card]:
    """One chunk card per resolution whose vae conv3d cards include shapes the Wan decoder runs."""
    layers = [layer for layer in decoder_layers() if layer.op_kind == "conv3d"]
    by_key: dict[Key, list[Layer]] = {}
    for layer in layers:
        by_key.setdefault(_layer_key(layer), []).append(layer)
    order = {key: min(layers.index(layer) for layer in group) for key, group in by_key.items()}
    resolutions = sorted({c.resolution for c in report.cards if c.stage == "vae" and c.op_kind == "conv3d"
                          and c.resolution}, key=lambda r: (parse_resolution(r) or (0, 0)))
    chunks = []
    for resolution in resolutions:
        size = parse_resolution(resolution)
        if size is None or size[0] % WAN21.spatial_factor:
            continue
        latent_h = size[0] // WAN21.spatial_factor
        matched: list[tuple[Key, Card, list[Layer], int]] = []  # (key, card, layers, input T)
        for card in report.cards:
            params = card.shape_parameters
            if card.resolution != resolution or card.stage != "vae" or card.op_kind != "conv3d":
                continue
            if not isinstance(params, dict) or not _plain_conv(params):
                continue
            key = conv3d_key(params.get("input") or [], params.get("weight") or [], latent_h)
            if key in by_key:
                matched.append((key, card, by_key[key], int(params["input"][2])))
        post_quant = [m for m in matched if m[2][0].per_chunk]
        frames = post_quant[0][3] if post_quant else REALTIME_CHUNK_FRAMES
        contains = [(key, card, group) for key, card, group, t in matched if t == group[0].input_frames(frames)]
        first_frame = [card.id for key, card, group, t in matched
                       if t != group[0].input_frames(frames) and t == group[0].first_frame_input_frames()]
        level0 = [card for key, card, group in contains if key[5] == 0 and not group[0].per_chunk]
        if not contains or not level0:
            continue
        contains.sort(key=lambda item: order[item[0]])
        post_quant_w = _out_width(post_quant[0][1]) if post_quant else None
        chunks.append(_chunk_card(resolution, [(card, group) for _, card, group in contains], first_frame, frames,
                                  latent_h, _out_width(level0[0]), post_quant_w))
    return chunks


def add_chunk_cards(report: Report) -> Report:
    """The report with its chunk cards appended (for `cards=[vae-480-chunk-decode-...]`); returns the same object."""
    known = {c.id for c in report.cards}
    report.cards.extend(c for c in [*vae_chunk_cards(report), *dit_chunk_cards(report)] if c.id not in known)
    return report
