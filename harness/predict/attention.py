"""Attention backends (attention_backends): another attention kernel over the keys.

The report's attention cards have no kernel times for FlashAttention 2 and no launch data for 3, and which
backend runs how fast over a cache mostly empty or full is what the experiment measures: no number here. What
the keys parameter changes (the valid prefix against the whole masked allocation) is a FLOP ratio, but over
another backend's kernel of unknown efficiency it does not make a speedup either.
"""

from __future__ import annotations

from typing import Any, Mapping

from harness.predict.context import Context
from harness.predict.prediction import Estimate, Unpredictable, register

BACKENDS = {"sdpa": "a torch SDPA backend", "flash_attn": "a flash-attn version"}


@register("attention_backends")
def predict_attention(ctx: Context, variant: str, params: Mapping[str, Any]) -> Estimate | Unpredictable:
    return Unpredictable(f"{BACKENDS.get(variant, variant)}: another attention kernel's efficiency over these keys "
                         "is what the experiment measures; the report's cards time FlashAttention 3 only (FA2 has "
                         "no kernel times) and no shipped microbenchmark measures the others")
