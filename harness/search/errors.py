"""The error every part of the search raises for a configuration that cannot work."""

from harness.errors import HarnessError


class SearchError(HarnessError):
    """A search configuration that cannot work; the message says what to change."""
