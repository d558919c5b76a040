"""Whether a re-profiled card ran the report card's kernel: its dominant kernel's family against the report's.

Evidence read from a profile (a warp-stall breakdown, a class) speaks for the report's op only when the
kernel that ran is the one the report profiled. On the H200 the report's bf16 `nvjet` GEMM of 500175 ran
as an fp32 FFMA `sm80_xmma_gemm` and its stalls were read as the report card's. Families (harness.cards.
kernel_families) survive tile and dtype changes within a library's kernel, so a different family is a
different kernel. The report's names are taken as it wrote them: a damaged entry (a `<...>` cut ate the
rest) is compared by its surviving stem, and when nothing matches and some names are damaged, merged or
missing from the list, the answer is "cannot tell", never a guess.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from harness.cards.kernel_families import kernel_family
from harness.cards.kernel_names import damaged_stem, is_damaged_name, is_merged_name

SAME = "same"
DIFFERENT = "different"
UNKNOWN = "unknown"


@dataclass(frozen=True)
class KernelMatch:
    verdict: str  # SAME, DIFFERENT or UNKNOWN
    profiled: str  # the profiled dominant kernel's family
    report: tuple[str, ...]  # the report card's kernel families
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "profiled_family": self.profiled, "report_families": list(self.report),
                "reason": self.reason}


def report_names(card: Any) -> dict[str, Any]:
    """What the comparison needs of a report card, as the report wrote it (a recovered entry's original name)."""
    return {"kernels": [k.extra.get("recovered_from", k.name) for k in card.kernels],
            "dominant_kernel": card.dominant_kernel}


def _family(name: str) -> str:
    return kernel_family(damaged_stem(name) if is_damaged_name(name) else name)


def match_report(profiled: str, report: Mapping[str, Any]) -> KernelMatch:
    """The profiled dominant kernel's family against the report card's (`report_names`' fields)."""
    listed = [str(name) for name in report.get("kernels") or []]
    dominant = report.get("dominant_kernel")
    names = listed + ([str(dominant)] if dominant and dominant not in listed else [])
    doubts = [f"damaged entry {name[:60]!r} (a `<...>` cut ate the rest of its name)"
              for name in names if is_damaged_name(name)]
    doubts += [f"merged entry {name[:60]!r} (two kernels' names ran together)" for name in names
               if is_merged_name(name)]
    if dominant and dominant not in listed:
        doubts.append(f"its dominant kernel {str(dominant)[:60]!r} is not in its kernel list (list truncated)")
    families = tuple(dict.fromkeys(_family(name) for name in names))
    mine = kernel_family(profiled)
    if mine in families:
        via = [name for name in names if _family(name) == mine]
        stem = " (by the surviving stem of a damaged name)" if all(is_damaged_name(n) for n in via) else ""
        return KernelMatch(SAME, mine, families, f"the report's kernel family {mine}{stem}")
    if not names:
        return KernelMatch(UNKNOWN, mine, families, "the report card lists no kernel to compare with")
    if doubts:
        return KernelMatch(UNKNOWN, mine, families,
                           f"cannot tell whether {mine} is the report's kernel: the report's names are damaged or "
                           f"truncated ({'; '.join(doubts)})")
    return KernelMatch(DIFFERENT, mine, families,
                       f"profiled {mine}, not the report's kernel ({', '.join(families)}): "
                       "the profile describes another kernel")
