"""How a value reads in a table cell, alike in the CLI's text tables, diff.md and the HTML pages.

A float gets a fixed number of digits so that columns line up, a missing value a marker that cannot be
mistaken for a number, and a long kernel name an ellipsis where it is cut.
"""

from __future__ import annotations

from typing import Any


def fmt(value: Any, digits: int = 2, missing: str = "n/a") -> str:
    """A float to `digits` places, None as `missing`, anything else as it prints."""
    if value is None:
        return missing
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def shorten(text: str | None, width: int) -> str:
    """`text` cut to `width` characters, the last one an ellipsis when cut; None reads as empty."""
    text = text or ""
    return text if len(text) <= width else text[: width - 1] + "…"
