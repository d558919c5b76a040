"""Kernel names the report damaged: rule text leaked into a name (its metrics lost with the `<...>` cut),
or two cuDNN entries run together."""

from __future__ import annotations

import re

from harness.cards.rules import CLASS_TEXT

# The rule texts of the classes, to recognise text that leaked into a damaged kernel name.
_RULE_FRAGMENTS = tuple(text.rule[-24:] for text in CLASS_TEXT.values())


def is_damaged_name(name: str) -> bool:
    """Rule text inside a kernel name: the `<...>` cut that ate the entry's metrics."""
    return any(fragment in name for fragment in _RULE_FRAGMENTS) or bool(
        re.search(r"=\s?\d+(\.\d+)?%\s(and|of|while)", name)
    )


def damaged_stem(name: str) -> str:
    """The part of a damaged name that is still the kernel's own (before the leaked rule text)."""
    cut = re.search(r"(>?=|<) ?\d+(\.\d+)?% ", name)
    return name[: cut.start()].rstrip() if cut else name


_CUDNN_PARAMS = re.compile(r"(\w+)\(cudnn::(\w+)_params_t")


def _squash(text: str) -> str:
    return re.sub(r"(kernel|to|2|_)", "", text.lower())


def is_merged_name(name: str) -> bool:
    """A cuDNN function whose parameter struct belongs to another kernel: two entries ran together."""
    match = _CUDNN_PARAMS.search(name)
    if not match:
        return False
    function, params = match.group(1), match.group(2)
    return _squash(function) != _squash(params)
