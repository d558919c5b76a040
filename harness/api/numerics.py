"""The numerics a variant runs and is judged in: a dtype's unit roundoff, the unit of the correctness bound
(`unit_roundoff`, harness.trial.correctness), and the value a process-global torch setting is pinned to for
the card being measured, e.g. the math mode its baseline runs under (`pinned_value`, harness.trial.torch_state).
"""

from __future__ import annotations

from harness.trial.correctness import unit_roundoff
from harness.trial.torch_state import pinned_value

__all__ = ["pinned_value", "unit_roundoff"]
