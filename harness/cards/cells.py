"""How a value reads in a table cell, alike in the CLI's text tables, diff.md and the HTML pages.

A float gets a fixed number of digits so that columns line up, a missing value a marker that cannot be
mistaken for a number, and a long kernel name an ellipsis where it is cut.
"""

from __future__ import annotations

import math
from typing import Any


def fmt(value: Any, digits: int = 2, missing: str = "n/a") -> str:
    """A float to `digits` places, None as `missing`, anything else as it prints."""
    if value is None:
        return missing
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def fmt_noisy(value: float | None, uncertainty: float | None, missing: str = "n/a") -> str:
    """`value` to the digits its absolute `uncertainty` allows: rounded to the second significant digit of the
    uncertainty, never finer than 0.1 (15497.8 with an uncertainty of 4649 reads 15500; with 0.2, 15497.8)."""
    if value is None:
        return missing
    if not uncertainty or not math.isfinite(uncertainty) or uncertainty <= 0:
        return f"{value:.1f}"
    decimals = min(1, 1 - math.floor(math.log10(uncertainty)))
    return f"{round(value, decimals):.{max(decimals, 0)}f}"


def shorten(text: str | None, width: int) -> str:
    """`text` cut to `width` characters, the last one an ellipsis when cut; None reads as empty."""
    text = text or ""
    return text if len(text) <= width else text[: width - 1] + "…"
