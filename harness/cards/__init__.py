"""The report model, lint and normalization, the bottleneck rules, and the before/after diff.

Pure Python: nothing here imports torch, Optuna, matplotlib or Hydra. What renders pages from cards
(report.html, plots, the Optuna studies' section) is harness.report.
"""

from harness.cards.model import Card, Kernel, Report, ReportError, load_report, save_report

__all__ = ["Card", "Kernel", "Report", "ReportError", "load_report", "save_report"]
