"""Which cards a run measures: a list of ids, or a rule that works on any report.

`cards=` (and an experiment's `default_cards`) is either card ids or a rule, a mapping of:

- filters: `stage`, `op`, `op_kind`, `resolution`, `class`. `class` is one class or a list; `none` stands
  for a card the rules leave without a class (taken wherever unresolved cards are), and `experiment` for
  the classes whose counter-experiment the experiment tests (`Experiment.classes`). `resolution` is a
  resolution ("480x832") or `smallest`, `largest`, or `smallest_on_cpu` (the smallest on a CPU, every
  resolution on a GPU: a CPU run stays within its budget, a GPU run covers the report);
- `shape`: shape parameters a card must have, e.g. `{N: 64}` (each named parameter equal to the value);
- `costliest: N` (or `cheapest: N`), the N cards with the largest (smallest) time in the model
  (harness.cards.measures.time_in_model: a capture's share of the forward, else the report's kernel-duration
  sum per invocation times the calls where known, else that sum), then nominal FLOPs for cards the report
  gives no time, in each group of `per` (a key or a list of keys, e.g. `per: op_kind`) when given.

An experiment's own op kinds are applied before `costliest`, so "the 3 costliest" are its 3 costliest.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from harness.cards.fields import UNRESOLVED
from harness.cards.ids import parse_resolution
from harness.cards.measures import time_in_model
from harness.cards.model import Card, Report
from harness.cards.selection_messages import no_card_message
from harness.errors import HarnessError

FILTER_KEYS = ("stage", "op", "op_kind", "resolution", "class")
RANKS = ("costliest", "cheapest")
SHAPE = "shape"  # a filter on shape parameters; not a key to group by
RULE_KEYS = (*FILTER_KEYS, SHAPE, *RANKS, "per")
RELATIVE_RESOLUTIONS = ("smallest", "largest", "smallest_on_cpu")
NO_CLASS = "none"
EXPERIMENT_CLASSES = "experiment"


class SelectionError(HarnessError):
    """A `cards=` value that selects nothing usable; one line, with the fix."""


def card_value(card: Card, key: str) -> str:
    """A card's value for a filter key, as typed on the command line (`class` is the rules' class)."""
    if key == "class":
        return card.primary or NO_CLASS
    return str(getattr(card, key))


def _pixels(resolution: str) -> int:
    parsed = parse_resolution(resolution)
    return parsed[0] * parsed[1] if parsed else 0


def _classes(value: Any, experiment_classes: Sequence[str]) -> set[str]:
    wanted = value if isinstance(value, (list, tuple)) else [value]
    out: set[str] = set()
    for item in wanted:
        out |= set(experiment_classes) if str(item) == EXPERIMENT_CLASSES else {str(item)}
    if UNRESOLVED in out:  # a card the rules leave without a class is as unresolved (harness.run.auto)
        out.add(NO_CLASS)
    return out


def _has_shape(card: Card, wanted: Mapping[str, Any]) -> bool:
    params = card.shape_parameters if isinstance(card.shape_parameters, Mapping) else {}
    return all(key in params and params[key] == value for key, value in wanted.items())


def _resolution(cards: list[Card], value: str, device: str) -> list[Card]:
    if value not in RELATIVE_RESOLUTIONS:
        return [c for c in cards if str(c.resolution) == value]
    if value == "smallest_on_cpu" and device.startswith("cuda"):
        return cards
    sizes = {c.resolution: _pixels(str(c.resolution)) for c in cards}
    if not sizes:
        return cards
    target = (max if value == "largest" else min)(sizes, key=lambda r: sizes[r])
    return [c for c in cards if c.resolution == target]


def model_us(card: Card) -> float:
    """The card's time in the model (0 without one): what `costliest` ranks by."""
    found = time_in_model(card)
    return found.us if found is not None else 0.0


def _ordered(cards: Sequence[Card], costliest: bool) -> list[Card]:
    """By the time in the model, then nominal FLOPs, the costliest or the cheapest first; among equals (the
    report's attention cards have neither), a card the report classified before one it did not (its class is
    what an experiment's check reads), then the report's order."""
    sign = -1.0 if costliest else 1.0
    return sorted(cards, key=lambda c: (sign * model_us(c), sign * (c.nominal_mac_flops or 0.0), c.primary is None))


def _ranked(cards: list[Card], n: int, per: Sequence[str], costliest: bool) -> list[Card]:
    groups: dict[tuple[str, ...], list[Card]] = {}
    for card in cards:
        groups.setdefault(tuple(card_value(card, key) for key in per), []).append(card)
    kept = {id(c) for group in groups.values() for c in _ordered(group, costliest)[:n]}
    return _ordered([c for c in cards if id(c) in kept], costliest)


def check_rule(rule: Mapping[str, Any]) -> None:
    unknown = sorted(set(rule) - set(RULE_KEYS))
    if unknown:
        raise SelectionError(f"cards rule: unknown key(s) {unknown}; use {', '.join(RULE_KEYS)} or a list of ids")
    if all(key in rule for key in RANKS):
        raise SelectionError("cards rule: give costliest or cheapest, not both")
    for key in RANKS:
        n = rule.get(key)
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise SelectionError(f"cards rule: {key}={n!r}: give a whole number of cards, at least 1")
    shape = rule.get(SHAPE)
    if shape is not None and (not isinstance(shape, Mapping) or not shape
                              or any(isinstance(v, (Mapping, list, tuple)) for v in shape.values())):
        raise SelectionError(f"cards rule: shape={shape!r}: give shape parameters and values, e.g. {{N: 64}}")
    per = rule.get("per")
    for key in ([per] if isinstance(per, str) else per or []):
        if key not in FILTER_KEYS:
            raise SelectionError(f"cards rule: per={key!r}: group by one of {', '.join(FILTER_KEYS)}")


def apply_rule(report: Report, rule: Mapping[str, Any], *, device: str, op_kinds: Iterable[str] | None = None,
               experiment_classes: Sequence[str] = ()) -> list[Card]:
    """The cards `rule` selects from `report`, restricted to `op_kinds` (when given) before `costliest`."""
    check_rule(rule)
    kinds = set(op_kinds) if op_kinds is not None else None
    cards = [c for c in report.cards if (kinds is None or c.op_kind in kinds) and in_scope(c, rule)]
    if "class" in rule:
        wanted = _classes(rule["class"], experiment_classes)
        cards = [c for c in cards if card_value(c, "class") in wanted]
    if "resolution" in rule:
        cards = _resolution(cards, str(rule["resolution"]), device)
    for key in RANKS:
        if rule.get(key):
            per = rule.get("per") or []
            cards = _ranked(cards, int(rule[key]), [per] if isinstance(per, str) else list(per), key == "costliest")
    return cards


def in_scope(card: Card, rule: Any) -> bool:
    """Whether `card` passes the rule's scope filters (stage, op, op kind, shape): for an experiment's
    `default_cards`, which cards it is for at all, whatever its classes, resolution and ranks then pick."""
    if not isinstance(rule, Mapping):
        return True
    if any(key in rule and card_value(card, key) != str(rule[key]) for key in ("stage", "op", "op_kind")):
        return False
    return SHAPE not in rule or _has_shape(card, rule[SHAPE])


def pick_cards(report: Report, selector: Any, *, device: str = "cpu", experiment_classes: Sequence[str] = ()
               ) -> list[Card]:
    """Cards by id (a string or a list of ids) or by a rule (see the module's docstring), of any op kind."""
    if isinstance(selector, str):
        selector = [selector]
    if isinstance(selector, (list, tuple)):
        try:
            return [report.card(str(card_id)) for card_id in selector]
        except Exception as exc:
            raise SelectionError(str(exc)) from None
    if isinstance(selector, Mapping):
        return apply_rule(report, selector, device=device, experiment_classes=experiment_classes)
    raise SelectionError(f"cards={selector!r}: give a list of card ids or a rule like {{stage: vae, costliest: 3}}")


def select_cards(report: Report, selector: Any, experiment: Any, defaults: Any, device: str) -> list[Card]:
    """`cards=`, or the experiment's `default_cards`; every card of an op kind the experiment takes.

    Ids of another op kind are an error naming them; a rule is applied to the experiment's op kinds,
    and a rule that leaves it nothing says what it selected instead (harness.cards.selection_messages).
    """
    if selector is None:
        selector = defaults if defaults else {}
    if not isinstance(selector, Mapping):
        cards = pick_cards(report, selector)
        wrong = [c.id for c in cards if not experiment.applies_to(c.op_kind)]
        if wrong:
            raise SelectionError(f"experiment {experiment.name} applies to {', '.join(experiment.op_kinds)} cards; "
                                 f"not to {', '.join(wrong[:3])}")
        return cards
    chosen = apply_rule(report, selector, device=device, op_kinds=experiment.op_kinds,
                        experiment_classes=experiment.classes)
    if not chosen:
        filters = {k: v for k, v in selector.items() if k in FILTER_KEYS or k == SHAPE}
        wide = apply_rule(report, filters, device=device, experiment_classes=experiment.classes)
        raise SelectionError(no_card_message(filters or selector, wide, experiment.op_kinds, experiment.name,
                                             report.cards))
    return chosen
