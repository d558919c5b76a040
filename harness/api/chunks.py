"""What a chunk experiment (a whole decoder call, a DiT block) says about its measured card: the chunk's kernel
time attributed to the op cards it contains (`attribute`, harness.cards.chunk_breakdown, as harness.trial.chunks
applies it), and the variants earlier rounds adopted on the op cards a chunk contains (`AppliedVariant`,
harness.cards.applied, as harness.trial.rounds carries them; `Workload.adopted`).
"""

from __future__ import annotations

from harness.cards.applied import AppliedVariant
from harness.cards.chunk_breakdown import attribute

__all__ = ["AppliedVariant", "attribute"]
