"""What renders a run for people: the self-contained report.html (and `cards diff --html`), its plots,
each card's Optuna study section, and the summaries' Markdown as HTML.

Reads cards and diffs (harness.cards) and a run directory's files; imports matplotlib and Optuna,
which harness.cards never does.
"""
