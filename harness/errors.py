"""The one error base of the harness: bad input or configuration, said in one line with the fix.

Every error a user can cause (a report that is not one, an unknown card, a config value out of range, a
workload that cannot be built, a resume of another run) is a `HarnessError`; the app and the CLIs catch
it once and print `error: <message>` with exit status 2, never a traceback. It is a ValueError, so code
that caught the specific errors as ValueError still does. Pure Python: every process imports it.
"""

from __future__ import annotations


class HarnessError(ValueError):
    """Bad input or configuration; the message is one line saying what is wrong and what to do."""


class CorrectnessError(HarnessError):
    """A correctness rule or precision that cannot be used; one line saying why."""
