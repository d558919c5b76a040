"""The config: its dataclasses (schema) and the checks before measuring."""
