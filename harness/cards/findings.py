"""What `lint` finds and corrects: one finding per defect, each code with one severity, and the exit
status the severities give (the reasons are in harness.cards.lint's docstring)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Iterable

ERROR, WARNING, INFO = "error", "warning", "info"
SEVERITY: dict[str, str] = {
    "damaged_entry": ERROR,
    "merged_name": ERROR,
    "dominant_missing": ERROR,
    "unit_scaled": WARNING,
    "unit_suspect": WARNING,
    "impossible_percent": WARNING,
    "sum_mismatch": WARNING,
    "dominant_mismatch": WARNING,
    "classification_mismatch": WARNING,
    "summary_mismatch": WARNING,
    "primary_missing": WARNING,
    "duplicate_id": WARNING,
    "null_field": INFO,
    "missing_field": INFO,
    "null_metrics": INFO,
    "missing_metrics": INFO,
    "shape_parameters_encoded": INFO,
    "duplicate_group": INFO,
}
SEVERITIES = (ERROR, WARNING, INFO)  # worst first
EXIT_BY_SEVERITY = {ERROR: 3, WARNING: 1, INFO: 0}
REPORT_LEVEL = "(report)"  # the `card` of a finding about the report as a whole (its summary, its groups)


@dataclass(frozen=True)
class Finding:
    card: str
    kernel: str | None
    code: str
    detail: str
    field: str | None = None

    @property
    def severity(self) -> str:
        return SEVERITY[self.code]

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "severity": self.severity}


def exit_status(findings: Iterable[Finding]) -> int:
    """`lint`'s exit status: that of the worst severity found (0 when there is nothing to report)."""
    return max((EXIT_BY_SEVERITY[f.severity] for f in findings), default=0)


@dataclass(frozen=True)
class Correction:
    """One value the normalized view changed; `code` is the finding it answers (or `dur_us_inferred`
    for a duration inferred from summed_kernel_us), so that corrections can be counted per kind."""

    kernel: str | None
    field: str
    before: Any
    after: Any
    reason: str
    code: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
