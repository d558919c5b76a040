"""DiT block chunk cards: the report's DiT op cards that one Wan block runs on one Ulysses rank, measured together.

One chunk card per resolution (op kind `dit_block`, harness.workloads.dit_block), derived from the report:

- the rank's tokens M are the chunk's tokens (attention's queries_for_resolution: 4680 at 480x832) over the
  Ulysses ranks (the model's 40 heads over the attention cards' 10 per rank: 4), i.e. 1170 (2640);
- it contains the report's linear cards of that M whose (N, K) a block linear has (`block_linears`: the
  fused QKV card, N = 3 x 5120, stands for diffusers' separate to_q / to_k / to_v; the 5120 x 5120 cards
  for the self-attention output and the cross-attention query and output projections; the FFN's up and
  down projections). Cards of one shape are assigned to the block's linears of that shape in report
  order: the report names no module, so which 5120 x 5120 card is the self-attention output is a guess;
- and the attention cards of the chunk's queries: the self-attention card with the most valid keys (the
  cache's steady state; one with valid keys = the chunk's own tokens, an empty cache, is the stream's
  first chunk: `chunk["first_chunk_only"]`) and the cross-attention card. Of cards with the same shape
  (FlashAttention 2 and 3) the one with kernel durations is contained, the others are listed under
  `chunk["same_shape"]`;
- the M=4680 linears (patch and camera embeddings, the head) and the M=3 time-embedding linears run
  outside the blocks, and the cross-attention's text K/V projections (M = 512) have no card: `other`.

`extra["chunk"]["ops"]` records per contained card its modules (linears) or attention role, its calls per
block and the block time as the report would put it (`report_chunk_us`); `summed_kernel_us` stays empty
so the report's stage totals do not count the DiT twice.

A measured kernel is attributed by module scope and by the attention's shape (harness.cards.chunk_breakdown).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from harness.cards.chunk_breakdown import chunk_card
from harness.cards.measures import kernel_sum_us
from harness.cards.model import Card, Report
from harness.workloads.attention import AttentionConfig, queries_for_resolution
from harness.workloads.base import parse_resolution
from harness.workloads.dit_block import KIND as DIT_BLOCK
from harness.workloads.dit_block import (
    ULYSSES_RANKS,
    WAN14B,
    block_linears,
    plan,
)
from harness.workloads.params import WorkloadError, decode_parameters


def _attention_params(card: Card) -> dict[str, Any] | None:
    try:
        params = decode_parameters("attention", card.shape_parameters)
    except WorkloadError:
        return None
    return params if params.get("role") in ("self", "cross") and params.get("valid_keys") else None


def _known_attention_params(card: Card) -> dict[str, Any]:
    """_attention_params of a card already found to have them."""
    params = _attention_params(card)
    assert params is not None
    return params


def _by_shape(cards: list[Card], key: Callable[[Card], Any]) -> dict[Any, list[Card]]:
    """Cards grouped by `key`, the ones with a kernel-duration sum first (then in report order)."""
    groups: dict[Any, list[Card]] = {}
    for card in cards:
        groups.setdefault(key(card), []).append(card)
    return {k: sorted(v, key=lambda c: kernel_sum_us(c) is None) for k, v in groups.items()}


def _linear_ops(cards: list[Card], tokens: int) -> dict[str, dict[str, Any]]:
    rows = [c for c in cards if c.op_kind == "linear" and isinstance(c.shape_parameters, dict)
            and c.shape_parameters.get("M") == tokens]
    by_nk: dict[tuple[Any, Any], list[Card]] = {}  # by the cards' N and K (JSON values)
    for card in rows:
        by_nk.setdefault((card.shape_parameters.get("N"), card.shape_parameters.get("K")), []).append(card)
    ops: dict[str, dict[str, Any]] = {}
    for linear in block_linears():
        candidates = by_nk.get((linear.n, linear.k)) if linear.rows == "tokens" else None
        if candidates:
            card = candidates.pop(0)  # report order among cards of one shape
            ops[card.id] = {"kind": "linear", "modules": list(linear.modules), "calls_per_chunk": linear.calls,
                            "report_us": kernel_sum_us(card)}
    return ops


def _dit_chunk_card(resolution: str, cards: list[Card]) -> Card | None:
    size = parse_resolution(resolution)
    try:
        queries = queries_for_resolution(resolution)
    except WorkloadError:
        return None
    if size is None or queries is None or queries % ULYSSES_RANKS:
        return None
    tokens = queries // ULYSSES_RANKS
    ops = _linear_ops(cards, tokens)
    if not ops:
        return None
    attention = [(c, p) for c in cards if c.op_kind == "attention" and (p := _attention_params(c)) is not None]
    groups = _by_shape([c for c, _ in attention], lambda c: tuple(sorted(_known_attention_params(c).items())))
    same_shape = {group[0].id: [c.id for c in group[1:]] for group in groups.values() if len(group) > 1}
    first = {group[0].id: _known_attention_params(group[0]) for group in groups.values()}
    selfs = sorted((p["valid_keys"], cid) for cid, p in first.items() if p["role"] == "self")
    steady = [cid for valid, cid in selfs if valid > queries]
    shape = {"tokens": tokens, "ranks": ULYSSES_RANKS, "valid_keys": queries, "allocated_keys": queries,
             "text_tokens": WAN14B.text_tokens, "grid": [AttentionConfig().frames_per_chunk,
                                                         size[0] // AttentionConfig().pixels_per_token,
                                                         size[1] // AttentionConfig().pixels_per_token]}
    if steady:
        params = first[steady[-1]]
        shape.update(valid_keys=params["valid_keys"], allocated_keys=params.get("allocated_keys", params["valid_keys"]))
        ops[steady[-1]] = {"kind": "attention", "role": "self", "calls_per_chunk": 1,
                           "report_us": kernel_sum_us(next(c for c in cards if c.id == steady[-1]))}
    cross = [cid for cid, p in first.items() if p["role"] == "cross"]
    if cross:
        shape["text_tokens"] = first[cross[0]]["valid_keys"]
        ops[cross[0]] = {"kind": "attention", "role": "cross", "calls_per_chunk": 1,
                         "report_us": kernel_sum_us(next(c for c in cards if c.id == cross[0]))}
    first_chunk = [cid for valid, cid in selfs if valid == queries]
    first_chunk += [other for cid in first_chunk for other in same_shape.get(cid, [])]
    ids = list(ops)
    report_us = sum((op["report_us"] or 0.0) * op["calls_per_chunk"] for op in ops.values())
    notes = [f"derived from the report's DiT linear and attention cards at {resolution}: one Wan 14B block on "
             f"Ulysses rank 0 of {ULYSSES_RANKS} ({tokens} of the chunk's {queries} tokens)",
             "cards of one shape are assigned to the block's linears of that shape in report order (the report "
             "names no module); the fused QKV card stands for diffusers' separate to_q, to_k, to_v"]
    if not cross:
        notes.append(f"no cross-attention card at {resolution}: the cross-attention counts as other")
    return chunk_card(stage="dit", op=DIT_BLOCK, part="block", resolution=resolution, shape=shape, contains=ids,
                      flops=plan(shape, dtype=torch.bfloat16, scale=1.0).flops,
                      chunk={"ops": ops, "first_chunk_only": first_chunk,
                             "same_shape": {k: v for k, v in same_shape.items() if k in ops},
                             "report_chunk_us": report_us, "notes": notes})


def dit_chunk_cards(report: Report) -> list[Card]:
    """One chunk card per resolution whose DiT linear cards include the block's shapes at the rank's M."""
    resolutions = sorted({c.resolution for c in report.cards if c.stage == "dit" and c.resolution},
                         key=lambda r: parse_resolution(r) or (0, 0))
    chunks = [_dit_chunk_card(r, [c for c in report.cards if c.resolution == r]) for r in resolutions]
    return [chunk for chunk in chunks if chunk is not None]
