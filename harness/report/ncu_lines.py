"""What `show` prints of kernels an ncu import read: their launches, why ncu failed on one, their dominant warp
stall, ncu's rule results.

An imported report's kernel entry may stand for several launches (harness.cards.launches), may be a launch
ncu failed to profile (`ncu_failed`), and keeps ncu's own rule results with their estimated speedups
(`ncu_rules`: harness.profile.ncu.rule_results' shape). These lines say so under the card's kernel table.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from harness.cards.cells import fmt, shorten
from harness.cards.fields import NCU_FAILED
from harness.cards.launches import LAUNCH_STATS, launches
from harness.cards.model import Card, Kernel
from harness.cards.stalls import stall_phrase

RULES_KEY = "ncu_rules"
# Most pressing first: what ncu could not evaluate, then its warnings and suggestions, then what it found fine.
_TYPE_ORDER = ("error", "warning", "optimization", "ok", "none")


def _launch_line(kernel: Kernel) -> str | None:
    count = launches(kernel)
    if count == 1:
        return None
    stats = kernel.extra.get(LAUNCH_STATS)
    spread = ""
    if isinstance(stats, dict) and stats.get("dur_us_min") is not None:
        cv = stats.get("dur_us_cv")
        spread = (f" (min {fmt(stats['dur_us_min'], 3)}, max {fmt(stats['dur_us_max'], 3)}"
                  + (f", cv {cv:.1%})" if isinstance(cv, float) else ")"))
    return f"{count} launches: metrics per launch, their mean; dur_us {fmt(kernel.metric('dur_us'), 3)}{spread}"


def _rule_key(rule: dict[str, Any]) -> tuple[float, int]:
    speedup = rule.get("speedup")
    kind = rule.get("message_type")
    order = _TYPE_ORDER.index(kind) if kind in _TYPE_ORDER else len(_TYPE_ORDER)
    return (-(speedup if isinstance(speedup, (int, float)) else -1.0), order)


def rule_line(rule: dict[str, Any]) -> str:
    """'warning      LaunchStats/LaunchConfiguration: Small Grid; est. speedup 96.9% (global)'."""
    speedup = rule.get("speedup")
    estimate = (f"; est. speedup {speedup:.1f}% ({rule.get('speedup_type') or 'type not given'})"
                if isinstance(speedup, (int, float)) else "")
    title = rule.get("title") or rule.get("name") or ""
    return f"{str(rule.get('message_type') or '-'):12s} {rule.get('section')}/{rule.get('id')}: {title}{estimate}"


def kernel_lines(card: Card) -> list[str]:
    """Per kernel: its launches and their spread, why ncu failed on it, its dominant warp stall, its rule results
    (estimates first; a result ncu gives several times, one per source location, once with its count)."""
    lines: list[str] = []
    for kernel in card.kernels:
        rules = kernel.extra.get(RULES_KEY)
        found = [text for text in (_launch_line(kernel), _failure_line(kernel), _stall_line(kernel)) if text]
        if isinstance(rules, list) and rules:
            found.append(f"ncu rules ({len(rules)}):")
            counted = Counter(rule_line(r) for r in sorted(rules, key=_rule_key) if isinstance(r, dict))
            found += [f"  {line}" + (f" (x{n})" if n > 1 else "") for line, n in counted.items()]
        if found:
            lines.append(shorten(kernel.name, 100))
            lines += ["  " + text for text in found]
    return lines


def _failure_line(kernel: Kernel) -> str | None:
    failed = kernel.extra.get(NCU_FAILED)
    return f"no numbers: {failed}" if failed else None


def _stall_line(kernel: Kernel) -> str | None:
    stall = (kernel.evidence or {}).get("dominant_stall")
    return f"dominant warp stall: {stall_phrase(stall)}" if isinstance(stall, dict) else None
