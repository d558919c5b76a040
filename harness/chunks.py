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

A measured chunk card's kernels are every CPU op the chunk ran, one per op, input shapes and the top-level
op it ran under (the CPU profiler's per-shape profile; on a GPU, torch_cuda's kernels with the op and scope
that launched them, read from the trace), and `attribute` names on each the contained card
of its top-level convolution's shape: a conv's own copies count toward its card, as in the op card.
`op_breakdown` puts the two sides of a diff row side by side per contained card, plus `other`
(everything no op card stands for: norms, SiLU, upsampling, the 2-D convs, attention, copies), so the
entries add up to each side's profiled total.

The DiT block's chunk cards (op kind `dit_block`) are derived and their kernels placed by
harness.dit_chunks; `add_chunk_cards`, `attribute`, `op_breakdown` and the prediction serve both kinds.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any, Iterable, Sequence

import torch

from harness.cards.ids import CHUNK_OP_KINDS
from harness.cards.model import Card, Kernel, Report
from harness.dit_chunks import KernelFinder, dit_chunk_cards
from harness.dit_chunks import kernel_finder as dit_kernel_finder
from harness.workloads.base import parse_resolution
from harness.workloads.dit_block import KIND as DIT_BLOCK
from harness.workloads.vae_decode import KIND as VAE_DECODE
from harness.workloads.vae_decode import WAN21, Layer, decoder_layers, plan

OTHER = "other"  # op_breakdown's entry for the ops no contained card stands for
PRIMED_FRAMES = 2  # frames decoded before the chunk: the cache's steady state (harness.workloads.vae_decode)
REALTIME_CHUNK_FRAMES = 3  # latent frames per chunk (docs/domain.md) when the report has no post_quant_conv card

Key = tuple[int, ...]  # (Cin, Cout, kT, kH, kW, level)


def conv3d_key(input_shape: Sequence[int], weight_shape: Sequence[int], latent_h: int) -> Key | None:
    """A conv3d's place in the decoder: (Cin, Cout, kT, kH, kW, level), None when its H is no latent multiple.

    The decoder's causal convs pad with F.pad and convolve unpadded at stride 1, so the output H is the
    input's H less kH - 1, and that is latent_h * 2**level.
    """
    if len(input_shape) != 5 or len(weight_shape) != 5 or latent_h < 1:
        return None
    out_h = int(input_shape[3]) - (int(weight_shape[3]) - 1)
    ratio = out_h / latent_h
    if ratio < 1 or not ratio.is_integer() or int(ratio) & (int(ratio) - 1):
        return None
    return (int(input_shape[1]), int(weight_shape[0]), *(int(k) for k in weight_shape[2:]), int(math.log2(ratio)))


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
    group = f"vae:{VAE_DECODE}:{shape}"
    digest = hashlib.sha256("|".join([group, resolution, *ids]).encode()).hexdigest()[:6]
    notes = [f"derived from the report's vae conv3d cards at {resolution}: the Wan 2.1 decoder's steady-state "
             f"shapes for {frames} latent frames of a {latent_h}x{latent_w} latent slice"]
    if post_quant_w is not None and post_quant_w != latent_w:
        notes.append(f"the report's post_quant_conv ran on the full-width latent (W={post_quant_w}); the chunk "
                     f"decodes one rank's slice (W={latent_w}) throughout")
    return Card(
        group=group, resolution=resolution, stage="vae", op=VAE_DECODE, shape_parameters=shape, kernels=[],
        nominal_mac_flops=plan(shape, dtype=torch.float32, scale=1.0).flops,
        counter_experiment="Compose the op cards' counter-experiments on the whole decode; check that the op "
                           "cards' wins add up (op_breakdown per contained card)",
        extra={"id": f"vae-{resolution.split('x')[0]}-chunk-decode-{digest}", "contains": ids,
               "chunk": {"ops": ops, "first_frame_only": first_frame_only, "report_chunk_us": report_us,
                         "notes": notes}},
    )


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


# ---------------------------------------------------------------------------------------------
# Measured chunk cards


def _latent_h(card: Card) -> int | None:
    latent = ((card.extra.get("workload") or {}).get("shape") or {}).get("latent")
    return int(latent[3]) if isinstance(latent, list) and len(latent) == 5 else None


def _kernel_card(kernel: Kernel, by_key: dict[Key, str], latent_h: int) -> str | None:
    """The contained card a profiled op stands for: it ran within (or is) a convolution whose input and
    weight shapes place it; the CPU profiler names the top-level op of each op (`within`)."""
    op = kernel.extra.get("within") or kernel.name.split("(")[0]
    shapes = kernel.extra.get("within_shapes") or kernel.extra.get("input_shapes") or []
    if "conv" not in op or len(shapes) < 2:
        return None
    key = conv3d_key(shapes[0], shapes[1], latent_h) if all(isinstance(s, list) for s in shapes[:2]) else None
    return by_key.get(key) if key is not None else None


def _vae_kernel_finder(card: Card) -> KernelFinder:
    ops = (card.extra.get("chunk") or {}).get("ops") or {}
    by_key = {tuple(op["key"]): card_id for card_id, op in ops.items()}
    latent_h = _latent_h(card)
    return lambda kernel: _kernel_card(kernel, by_key, latent_h) if latent_h else None


def attribute(card: Card) -> dict[str, float]:
    """Name on each kernel of a measured chunk card the contained card it stands for (`extra["report_card"]`);
    return the kernel-duration sums per contained card and `other`, per chunk call."""
    find = dit_kernel_finder(card) if card.op_kind == DIT_BLOCK else _vae_kernel_finder(card)
    times = {card_id: 0.0 for card_id in card.extra.get("contains") or []}
    times[OTHER] = 0.0
    for kernel in card.kernels:
        found = find(kernel)
        if found is not None:
            kernel.extra["report_card"] = found
        times[found or OTHER] += kernel.metric("dur_us") or 0.0
    return times


def op_breakdown(before: Card, after: Card) -> list[dict[str, Any]]:
    """Per contained card, then `other`: {card, before_us, after_us}, the profiler's kernel-duration sums per
    chunk call; each side's entries add up to its kernel-duration sum."""
    b, a = attribute(before), attribute(after)
    return [{"card": card_id, "before_us": b.get(card_id, 0.0), "after_us": a.get(card_id, 0.0)}
            for card_id in [*(k for k in b if k != OTHER), OTHER]]


def op_speedups(diff_json: str | Path) -> dict[str, float]:
    """Each op card's speedup (baseline / variant, per original call) in an earlier run's diff.json."""
    rows = json.loads(Path(diff_json).read_text()).get("cards") or []
    return {row["card"]: float(row["speedup"]) for row in rows if isinstance(row.get("speedup"), (int, float))}


def predicted_speedup(breakdown: list[dict[str, Any]], speedups: dict[str, float]) -> tuple[float, float]:
    """The chunk's speedup if each contained card sped up as its op card did alone, the rest not at all:
    total before / sum(before_i / speedup_i); and the share of the chunk's time the op results cover."""
    total = sum(entry["before_us"] for entry in breakdown)
    after = sum(entry["before_us"] / speedups.get(entry["card"], 1.0) for entry in breakdown)
    covered = sum(entry["before_us"] for entry in breakdown if entry["card"] in speedups)
    return (total / after if after > 0 else float("nan")), (covered / total if total > 0 else 0.0)


def not_carried_over(breakdown: list[dict[str, Any]], speedups: dict[str, float], band: float) -> list[str]:
    """The contained cards faster alone (beyond the SAME band) but not inside the chunk, each with both ratios."""
    lost = []
    for entry in breakdown:
        alone = speedups.get(entry["card"])
        inside = entry["before_us"] / entry["after_us"] if entry["after_us"] > 0 else None
        if alone is not None and alone > 1.0 + band and (inside is None or inside <= 1.0 + band):
            lost.append(f"{entry['card']} {alone:.2f}x -> " + ("n/a" if inside is None else f"{inside:.2f}x"))
    return lost


def _breakdown_text(breakdown: list[dict[str, Any]]) -> str:
    return ", ".join(f"{entry['card']} {entry['before_us']:.0f} -> {entry['after_us']:.0f}" for entry in breakdown)


def _collapse_over_peak(notes: list[str]) -> list[str]:
    """One line per side for the diff's per-kernel "estimate above peak" notes: a chunk has many small ops
    whose working set fits in the cache, and a note for each would bury the row's other notes."""
    over = {side: [n for n in notes if n.startswith(f"{side}: ") and "an estimate above peak" in n]
            for side in ("before", "after")}
    kept = [n for n in notes if not any(n in flagged for flagged in over.values())]
    return kept + [f"{side}: {len(flagged)} kernels' estimated percentages of peak exceed 100 (small ops whose "
                   "working set fits in the cache): estimates, not measurements"
                   for side, flagged in over.items() if flagged]


def attach_op_breakdowns(diffs: Iterable[Any], outcomes: Iterable[Any], predict_from: Any = None) -> None:
    """On each chunk card's diff row: `op_breakdown` (baseline vs the variant tried) and a note with it; with
    `predict_from` (an earlier run's diff.json, or a list of them), a note with the speedup its op cards
    predict against the one measured."""
    rows = {d.card: d for d in diffs}
    paths = [predict_from] if isinstance(predict_from, (str, Path)) else list(predict_from or [])
    speedups: dict[str, float] = {}
    for path in paths:
        speedups.update(op_speedups(path))
    for outcome in outcomes:
        row = rows.get(outcome.card_id)
        if row is None or outcome.tried is None or outcome.report_card.op_kind not in CHUNK_OP_KINDS:
            continue
        row.op_breakdown = op_breakdown(outcome.baseline, outcome.tried)
        row.notes = _collapse_over_peak(row.notes)
        row.notes.append(f"op breakdown (profiler kernel-duration sums per chunk call, us, before -> after): "
                         f"{_breakdown_text(row.op_breakdown)}")
        if not paths:
            row.notes.append("no speedup predicted from the op cards: give experiment.predict_from=<an op-card "
                             "run's diff.json>, or run the op cards and the chunk card in one experiment=auto run")
            continue
        predicted, covered = predicted_speedup(row.op_breakdown, speedups)
        measured = "n/a" if row.speedup is None else f"{row.speedup:.2f}x"
        found = sum(entry["card"] in speedups for entry in row.op_breakdown)
        row.notes.append(
            f"predicted from the op cards' results in {', '.join(str(p) for p in paths)}: {predicted:.2f}x "
            f"({found} of {len(row.op_breakdown) - 1} op cards measured there, {covered:.0%} of the chunk's "
            f"profiled time; the rest counted unchanged) vs measured {measured}")
        lost = not_carried_over(row.op_breakdown, speedups, row.same_band or 0.0)
        if lost:
            row.notes.append("op cards whose win did not carry over into the chunk (alone -> inside the chunk, "
                             "kernel-duration sums): " + ", ".join(lost))
