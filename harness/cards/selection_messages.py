"""The message for a `cards=` selection that leaves an experiment nothing to run on.

"selects no card" was said both when the selector matched nothing and when it matched cards of
another op kind (`cards='{stage: dit}'` with a conv3d experiment selects 21 linear cards), and the user
went looking for a typo that was not there. The message says which of the two happened, what was
selected, and the selector that would work.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Mapping, Protocol, Sequence


class _Selectable(Protocol):
    """What the message reads of a card (harness.cards.model.Card has it)."""

    @property
    def op_kind(self) -> str: ...


def format_selector(selector: Any) -> str:
    """The selector as it is typed on the command line (`{stage: dit}`, `[id, id]`), not as a Python repr."""
    if isinstance(selector, Mapping):
        return "{" + ", ".join(f"{key}: {format_selector(value)}" for key, value in selector.items()) + "}"
    if isinstance(selector, (list, tuple)):
        return "[" + ", ".join(format_selector(value) for value in selector) + "]"
    return str(selector)


def _or(words: Sequence[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def _unmatched_keys(selector: Mapping[str, Any], all_cards: Iterable[Any]) -> list[str]:
    """For each filter key whose value no card has: the values the report does have."""
    cards = list(all_cards)
    notes = []
    for key, value in selector.items():
        if key not in ("stage", "op", "op_kind", "resolution", "class") or isinstance(value, (list, tuple)):
            continue  # costliest, per, a list of classes: not values a card has
        if key == "resolution" and value in ("smallest", "largest", "smallest_on_cpu"):
            continue
        known = sorted({str(card.primary or "none") if key == "class" else str(getattr(card, key, None))
                        for card in cards})
        if str(value) not in known:
            notes.append(f"no card has {key}={value}; the report has {key} {', '.join(known)}")
    return notes


def no_card_message(selector: Any, selected_cards: Sequence[_Selectable], op_kinds: Sequence[str],
                    experiment_name: str, all_cards: Iterable[Any] | None = None) -> str:
    """Why `cards=<selector>` leaves experiment `experiment_name` (which takes `op_kinds`) no card.

    `selected_cards` are the cards the selector picked before the op-kind filter; `all_cards`, when
    given, are the report's cards, used to name the values a filter key could have had.
    """
    shown = f"cards={format_selector(selector)}"
    takes = f"experiment {experiment_name} applies to {_or(list(op_kinds))} cards"
    hint = f"e.g. cards={{op_kind: {op_kinds[0]}}}" if op_kinds else "list them with `python -m harness.report show`"
    if not selected_cards:
        notes = _unmatched_keys(selector, all_cards) if isinstance(selector, Mapping) and all_cards is not None else []
        why = f" ({'; '.join(notes)})" if notes else ""
        return f"{shown} selects no card{why}; {takes} ({hint})"
    kinds = Counter(card.op_kind for card in selected_cards)
    if len(kinds) == 1:
        are = next(iter(kinds))
    else:
        are = ", ".join(f"{n} {kind}" for kind, n in kinds.most_common())
    n = len(selected_cards)
    if n == 1:
        picked = f"selects 1 card, not a {_or(list(op_kinds))} one (it is {are})"
    else:
        picked = f"selects {n} cards, none of them {_or(list(op_kinds))} (they are {are})"
    return f"{shown} {picked}; {takes} ({hint})"
