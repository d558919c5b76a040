"""`report lint`'s text: findings grouped per (code, field), and one closing line whose counts add up.

The shipped report has about two hundred findings, most of them the same defect on many kernels
(117 `unit_scaled`); one line per finding buries the three codes that mean lost data. Grouped, each
defect is one line with its severity, how often it occurs and one example to look at; `--verbose`
(every finding) and `--json` (every finding with its severity) keep the full list.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from harness.cards.cells import shorten
from harness.cards.findings import REPORT_LEVEL, SEVERITIES, Finding
from harness.cards.lint import LintResult


@dataclass(frozen=True)
class FindingGroup:
    """The findings that share a code and a field: one defect, however many kernels carry it."""

    code: str
    field: str | None
    severity: str
    findings: tuple[Finding, ...]

    @property
    def cards(self) -> int:
        """Cards touched; 0 for a defect of the report as a whole (its findings' card is `(report)`)."""
        return len({f.card for f in self.findings if f.card != REPORT_LEVEL})

    @property
    def example(self) -> Finding:
        return self.findings[0]


def group_findings(findings: list[Finding]) -> list[FindingGroup]:
    """Groups worst severity first, then by code and field, each keeping its findings in report order."""
    groups: dict[tuple[str, str | None], list[Finding]] = {}
    for finding in findings:
        groups.setdefault((finding.code, finding.field), []).append(finding)
    out = [FindingGroup(code, field, items[0].severity, tuple(items)) for (code, field), items in groups.items()]
    return sorted(out, key=lambda g: (SEVERITIES.index(g.severity), g.code, g.field or ""))


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 or word == "info" else f"{n} {word}s"


def finding_line(finding: Finding) -> str:
    """One finding on one line (`--verbose`, and `show`'s lint notes)."""
    where = finding.card + (f" / {shorten(finding.kernel, 48)}" if finding.kernel else "")
    return f"{finding.severity:8s} {finding.code:24s} {where}: {finding.detail}"


def grouped_lines(findings: list[Finding]) -> list[str]:
    """A table: one row per (code, field) with its count, the cards it touches and one example."""
    groups = group_findings(findings)
    if not groups:
        return []
    rows = [[g.severity, g.code, g.field or "-", str(len(g.findings)), str(g.cards) if g.cards else "-",
             f"{g.example.card}: {g.example.detail}"] for g in groups]
    header = ["severity", "code", "field", "count", "cards", "example"]
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header) - 1)]
    lines = []
    for row in [header] + rows:
        cells = [c.rjust(w) if i in (3, 4) else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells + [row[-1]]))
    return lines


def closing_line(result: LintResult) -> str:
    """The totals: findings by severity (they sum to the findings) and corrections by kind (they sum
    to the corrections); a correction is not a finding, so the two totals differ on purpose."""
    by_severity = Counter(f.severity for f in result.findings)
    severities = ", ".join(_plural(by_severity[s], s) for s in SEVERITIES)
    corrections = [c for cs in result.corrections.values() for c in cs]
    kinds = Counter(c.code for c in corrections)
    per_kind = ", ".join(f"{n} {code}" for code, n in kinds.most_common())
    recorded = f" (each recorded under normalization: {per_kind})" if per_kind else ""
    return (f"{_plural(len(result.findings), 'finding')}: {severities}; "
            f"{_plural(len(corrections), 'value')} corrected in the normalized view{recorded}")


def render(result: LintResult, verbose: bool = False) -> str:
    """`report lint`'s whole text output."""
    cal = result.calibration
    references = (f"SM clock {cal.clock_mhz:.0f} MHz" if cal.clock_mhz else "no SM clock") + ", " + (
        f"DRAM {cal.dram_tb_s:.2f} TB/s" if cal.dram_tb_s else "no DRAM bandwidth")
    lines = [f"{result.normalized.source}: {len(result.normalized.cards)} cards; cross-check references from "
             f"the report itself: {references}", ""]
    if verbose:
        lines += [finding_line(f) for f in result.findings]
    else:
        lines += grouped_lines(result.findings)
    if result.findings:
        lines.append("")
    lines.append(closing_line(result))
    if result.findings and not verbose:
        lines.append("Every finding: --verbose (one line each) or --json (with its severity).")
    return "\n".join(lines)
