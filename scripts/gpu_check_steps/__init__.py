"""The GPU check's parts: scripts/gpu_check.py runs them and documents what they do (its steps, budgets,
partial results and outputs). Standard library only at import: the check runs before anything is installed."""
