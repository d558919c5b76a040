"""The report model, lint and normalization, the bottleneck rules, and the before/after diff.

Pure Python: nothing here imports torch, Optuna or Hydra's app, but for the run's report page, which
reads the run's Optuna studies (harness.cards.studies, through harness.cards.html).
"""

from harness.cards.model import Card, Kernel, Report, ReportError, load_report, save_report

__all__ = ["Card", "Kernel", "Report", "ReportError", "load_report", "save_report"]
