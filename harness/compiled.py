"""Moved to harness.api.compiled; this import path stays for experiments written against it."""

import sys

from harness.api import compiled

sys.modules[__name__] = compiled
