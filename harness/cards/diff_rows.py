"""A diff's rows as data: one card's before/after row (`CardDiff`) and the rows of two reports (`ReportDiff`).

Apart from harness.cards.diff, which builds them: the checks that judge a row (harness.cards.checks) and the
Markdown that prints one (harness.cards.diff_markdown) read these types, and the builder imports both.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from harness.cards.measures import NOT_MEASURABLE


@dataclass
class CardDiff:
    card: str
    before_us: float | None
    after_us: float | None
    speedup: float | None
    time_basis: str
    timing_verdict: str | None
    class_before: str | None
    class_after: str | None
    kernels_added: list[str]
    kernels_removed: list[str]
    # {family, before_us, after_us}: kernel-duration sums per invocation (KERNEL_SUM_BASIS); divide by
    # `calls` for per original call.
    kernels_matched: list[dict[str, Any]]
    metric_deltas: dict[str, dict[str, float | None]]
    hypothesis: str
    check: str
    verdict: str = NOT_MEASURABLE
    verdict_detail: str = ""
    fair: bool = True
    fairness_note: str = ""
    notes: list[str] = field(default_factory=list)
    # How the time verdict was reached: the paired rounds' interval and band, or why there is none.
    speedup_ci: list[float] | None = None
    verdict_rule: str = ""
    # The SAME band the verdict was judged against (relative: 0.05 is [1/1.05, 1.05]; None: no band
    # decided it), and the row's short account of the numbers that decided it.
    same_band: float | None = None
    verdict_numbers: str = ""
    # The profiler's kernel-duration sums per invocation {before, after}, and each side's original
    # calls per invocation (a batched variant's k): a second, differently labelled quantity beside the time.
    kernel_sum_us: dict[str, float | None] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    # The after side's variant {experiment, name, params, label}, and whether it was adopted
    # (None: not a run's baseline-vs-best comparison, e.g. a baseline-only run or two stored reports).
    variant: dict[str, Any] | None = None
    adopted: bool | None = None
    # Each side's variant when both are measured cards (a diff of two runs' files): which is which.
    variant_before: dict[str, Any] | None = None
    variant_after: dict[str, Any] | None = None
    # The report card's own check (its counter_experiment's last clause), judged on this pair.
    card_check: str = ""
    card_verdict: str = NOT_MEASURABLE
    card_verdict_detail: str = ""
    # Where each side's class comes from: ncu, cpu estimate, trace estimate (harness.cards.labels).
    class_source: dict[str, str] = field(default_factory=dict)
    # The class change as it may honestly be printed: one arrow only within one source on one machine.
    class_transition: str = ""
    # A chunk card's row: per contained op card, then "other", {card, before_us, after_us} (harness.trial.chunks).
    op_breakdown: list[dict[str, Any]] | None = None
    # Each side's layout-conversion kernels {kernels, dur_us, dram_mb} (harness.cards.layout_conversions).
    layout_conversions: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Each side's launches {before, after}: an imported report's kernel entries may stand for several
    # (harness.cards.launches); its card's time is per invocation, one launch for a card of one kernel name.
    launches: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ReportDiff:
    cards: list[CardDiff]
    only_before: list[str]
    only_after: list[str]
    # Per card, the variants the search refused and why, by the summary's list they are in (skipped,
    # infeasible, failed): what was tried and is not the best, with the check that refused it.
    refused: dict[str, dict[str, dict[str, str]]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "cards": [c.as_dict() for c in self.cards],
            "only_before": self.only_before,
            "only_after": self.only_after,
            "refused": self.refused,
        }
