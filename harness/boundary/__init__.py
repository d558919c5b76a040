"""What crosses the process boundary between the run and its worker child, and nothing else: the pipe's
framing, one JSON line each way (`framing`); the four typed requests (`requests`: Describe, Measure, Retime,
Confirm), the card's spec the card requests share (`spec`), one typed reply per request (`replies`), and
the one vocabulary of outcomes every reply carries (`outcomes`). Pure Python (no torch, no Optuna): both
processes import it."""
