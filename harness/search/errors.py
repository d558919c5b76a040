"""The error every part of the search raises for a configuration that cannot work."""


class SearchError(ValueError):
    """A search configuration that cannot work; the message says what to change."""
