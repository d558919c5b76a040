"""Reports for people: `python -m harness.report` (the command line over report files: lint, classify, show,
diff, reproduce, import-ncu), the self-contained report.html of a run or a diff, its plots, each card's Optuna
study section, and the summaries' Markdown as HTML.

Reads cards and diffs (harness.cards) and a run directory's files; the page imports matplotlib and Optuna,
which harness.cards never does, and the command line imports them only for `diff --html`.
"""
