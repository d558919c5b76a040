"""Card ids: stable, readable ids from a card's stage, resolution, op kind and shape, and the lookups a
person typing one needs (an id without its hash suffix, the most similar ids to a typo).

`vae-480-conv3d-96to96k333t6-13c157`: stage, resolution height, op kind, shape tag, then six hex digits of
the sha256 of the card's group, resolution and input hash, so that two cards of one shape stay apart.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from typing import Any, Protocol

SIMILAR_CUTOFF = 0.6  # difflib ratio below which an id is not offered as "similar"


_OP_KINDS = {
    "aten.linear.default": "linear",
    "aten.conv3d.default": "conv3d",
    "aten.conv2d.default": "conv2d",
    "aten.to.dtype": "cast",
    "flash_attn_v2": "attention",
    "flash_attn_v3": "attention",
    "aten.scaled_dot_product_attention.default": "attention",
}
# A captured op no workload family models: replayed as captured (harness.workloads.replay). Such a card
# says so by its `op_kind` field (Card.op_kind), since its op name alone is any aten op.
REPLAY = "replay"
# Op kinds that run a whole model chunk (many ops) rather than one op: their profile keeps each op's
# shapes apart, so every op can be attributed to the report card of the same op and shape.
CHUNK_OP_KINDS = ("vae_decode", "dit_block")


def op_kind(op: str) -> str:
    """The workload family of an op name: linear, conv3d, attention, cast (else the op itself)."""
    if op in _OP_KINDS:
        return _OP_KINDS[op]
    lowered = op.lower()
    for needle, kind in (("linear", "linear"), ("conv3d", "conv3d"), ("attn", "attention"), (".to", "cast")):
        if needle in lowered:
            return kind
    return "".join(ch if ch.isalnum() else "_" for ch in op)[:24] or "op"


class IdParts(Protocol):
    """What a card's id is made of (harness.cards.model.Card has it): the id is derived from these alone, so
    this module needs nothing of the model, which names its cards with `derive_card_id`."""

    @property
    def group(self) -> str: ...

    @property
    def resolution(self) -> str | None: ...

    @property
    def stage(self) -> str: ...

    @property
    def op(self) -> str: ...

    @property
    def op_kind(self) -> str: ...

    @property
    def shape_parameters(self) -> dict[str, Any]: ...

    @property
    def input_sha256(self) -> str | None: ...


def _shape_tag(card: IdParts) -> str:
    p = card.shape_parameters
    kind = card.op_kind
    try:
        if kind == "linear":
            return f"m{p['M']}n{p['N']}k{p['K']}"
        if kind == "conv3d":
            cin, t = p["input"][1], p["input"][2]
            cout, kt, kh, kw = p["weight"][0], p["weight"][2], p["weight"][3], p["weight"][4]
            return f"{cin}to{cout}k{kt}{kh}{kw}t{t}"
        if kind == "conv2d":
            cin, cout, kh, kw = p["input"][1], p["weight"][0], p["weight"][2], p["weight"][3]
            return f"{cin}to{cout}k{kh}{kw}"
        if kind == "attention":
            version = {"flash_attn_v3": "fa3", "flash_attn_v2": "fa2"}.get(card.op, "sdpa")
            return f"{version}-{p['role']}-{p['valid_keys']}of{p['allocated_keys']}"
        if kind == REPLAY:
            return replay_tag(card.op, p)
    except (KeyError, IndexError, TypeError):
        pass
    return ""


def replay_tag(op: str, params: dict[str, Any]) -> str:
    """`aten.group_norm.default` on a [1, 96, 3, 8, 6] input -> `group_norm-1x96x3x8x6`."""
    name = op.split(".")[1] if op.startswith("aten.") and op.count(".") >= 2 else op.rsplit(".", 1)[-1]
    tensors = params.get("tensors")
    first = next(iter(tensors.values()), None) if isinstance(tensors, dict) else None
    shape = first.get("shape") if isinstance(first, dict) else None
    dims = "x".join(str(d) for d in shape) if isinstance(shape, list) and shape else ""
    return "-".join(part for part in (name.strip("_"), dims) if part)


_HASH_SUFFIX = re.compile(r"-[0-9a-f]{6}$")


def id_stem(card_id: str) -> str:
    """A card id without its hash suffix: `vae-480-conv3d-96to96k333t6-13c157` -> `vae-480-conv3d-96to96k333t6`."""
    return _HASH_SUFFIX.sub("", card_id)


def similar_ids(wanted: str, ids: list[str], n: int = 5) -> list[str]:
    """Up to `n` ids most like `wanted`, best first: each scored on the whole id and on its stem (a
    typo in an id typed without its suffix still finds it). Only ids alike at all are offered; when
    none is, the ids of the same stage (the first word: `vae-...`), still best first."""
    def score(card_id: str) -> float:
        return max(difflib.SequenceMatcher(None, wanted, text).ratio() for text in (card_id, id_stem(card_id)))

    ranked = sorted(((score(i), i) for i in ids), key=lambda pair: -pair[0])
    alike = [card_id for value, card_id in ranked if value >= SIMILAR_CUTOFF]
    if not alike:
        stage = wanted.split("-")[0]
        alike = [card_id for _, card_id in ranked if card_id.split("-")[0] == stage]
    return alike[:n]


def derive_card_id(card: IdParts) -> str:
    height = card.resolution.split("x")[0] if card.resolution else "any"
    digest = hashlib.sha256(
        "|".join([card.group, card.resolution or "", card.input_sha256 or ""]).encode()
    ).hexdigest()[:6]
    kind = "" if card.op_kind == card.stage else card.op_kind
    parts = [card.stage, height, kind, _shape_tag(card), digest]
    text = "-".join(p for p in parts if p)
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in text)


def parse_resolution(value: Any) -> tuple[int, int] | None:
    """A card's resolution as (height, width): "480x832" -> (480, 832); None or unparsable -> None.

    Here, torch-free, for the run's side (card selection); harness.workloads.base has the same parser for
    the workloads (tests/app/test_torch_free_parent.py holds the two equal)."""
    if isinstance(value, (list, tuple)) and len(value) == 2:
        try:
            return int(value[0]), int(value[1])
        except (TypeError, ValueError):
            return None
    if not isinstance(value, str):
        return None
    parts = value.lower().replace("*", "x").split("x")
    if len(parts) != 2:
        return None
    try:
        height, width = int(parts[0]), int(parts[1])
    except ValueError:
        return None
    return (height, width) if height > 0 and width > 0 else None
