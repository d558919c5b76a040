"""The report model, lint and normalization, the bottleneck rules, and the before/after diff.

Pure Python: nothing here imports torch, Optuna or Hydra's app.
"""

from harness.cards.model import Card, Kernel, Report, ReportError, load_report, save_report

__all__ = ["Card", "Kernel", "Report", "ReportError", "load_report", "save_report"]
