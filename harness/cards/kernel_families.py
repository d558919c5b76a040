"""Kernels by family: the name a kernel keeps when a variant changes its tile, dtype or template.

Before and after a counter-experiment the "same" kernel rarely has the same name
(`sm90_xmma_fprop_implicit_gemm_f32f32_..._tilesize128x128x32` becomes `..._bf16bf16_..._tilesize256x64x64`),
so the diff, its checks and the page's kernel bars all pair kernels by family, never by full name, and
"the nchwToNhwc transposes are gone" reads as one family removed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness.cards.launches import per_invocation_value
from harness.cards.measures import calls_per_invocation
from harness.cards.model import Card


def kernel_family(name: str) -> str:
    """A name that survives tile, dtype and template changes: 'nchwToNhwcKernel', 'xmma_fprop_implicit_gemm'."""
    text = name.strip()
    if text.startswith("aten::") or text.startswith("harness::"):
        return text.split("(")[0]
    text = re.sub(r"^void\s+", "", text)
    depth, cut = 0, len(text)
    for i, ch in enumerate(text):
        if ch == "<":
            if depth == 0:
                cut = min(cut, i)
            depth += 1
        elif ch == ">":
            depth = max(depth - 1, 0)
        elif ch in "(,= " and depth == 0:  # `,` `=` or a space at depth 0: a damaged name ran into other text
            cut = min(cut, i)
            break
    base = text[:cut].strip().split("::")[-1].strip() or text
    tokens = base.split("_")
    if tokens and re.fullmatch(r"sm\d+", tokens[0]):
        tokens = tokens[1:]
    kept: list[str] = []
    for token in tokens:
        if re.search(r"\d", token) and kept:
            break
        kept.append(token)
    return "_".join(kept) or base


def family_sums(card: Card) -> dict[str, float]:
    """Kernel-duration sum by family, per invocation (as profiled; a batched invocation serves several calls)."""
    out: dict[str, float] = {}
    for kernel in card.kernels:
        family = kernel_family(kernel.name)
        out[family] = out.get(family, 0.0) + (per_invocation_value(card, kernel, kernel.metric("dur_us")) or 0.0)
    return out


@dataclass
class KernelRow:
    """One kernel family's duration sum per invocation on each side (None: absent on that side)."""

    family: str
    before_us: float | None
    after_us: float | None
    names: list[str]
    before_calls: int = 1  # original calls one invocation of that side serves (a batched variant's k)
    after_calls: int = 1

    @property
    def before_per_call_us(self) -> float | None:
        return self.before_us / self.before_calls if self.before_us is not None else None

    @property
    def after_per_call_us(self) -> float | None:
        return self.after_us / self.after_calls if self.after_us is not None else None

    @property
    def status(self) -> str:
        if self.after_us is None:
            return "removed"
        if self.before_us is None:
            return "added"
        return "kept"


def kernel_rows(before: Card, after: Card | None) -> list[KernelRow]:
    """Kernels paired by family (the diff's matching), longest per original call first; None marks an absent side.

    Durations are summed per invocation, as profiled (diff.md's kernel table); each row knows its
    sides' calls per invocation, for the per-call values a batching variant is compared on."""
    calls_b, calls_a = calls_per_invocation(before), calls_per_invocation(after) if after else 1
    rows: dict[str, KernelRow] = {}
    for side, card in (("before", before), ("after", after)):
        if card is None:
            continue
        for kernel in card.kernels:
            family = kernel_family(kernel.name)
            row = rows.setdefault(family, KernelRow(family, None, None, [], calls_b, calls_a))
            dur = per_invocation_value(card, kernel, kernel.metric("dur_us")) or 0.0
            if side == "before":
                row.before_us = (row.before_us or 0.0) + dur
            else:
                row.after_us = (row.after_us or 0.0) + dur
            if kernel.name not in row.names:
                row.names.append(kernel.name)
    if after is None:  # baseline only: nothing was removed, there is just no after side
        return sorted(rows.values(), key=lambda r: -(r.before_per_call_us or 0.0))
    return sorted(rows.values(), key=lambda r: -max(r.before_per_call_us or 0.0, r.after_per_call_us or 0.0))
