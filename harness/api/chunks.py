"""What a chunk experiment (a whole decoder call, a DiT block) says about its measured card: the chunk's kernel
time attributed to the op cards it contains (`attribute`, harness.cards.chunk_breakdown, as harness.trial.chunks
applies it), and the one-line label of a variant an earlier round adopted (`label_text`, harness.cards.applied,
as harness.trial.rounds carries it).
"""

from __future__ import annotations

from harness.cards.applied import label_text
from harness.cards.chunk_breakdown import attribute

__all__ = ["attribute", "label_text"]
