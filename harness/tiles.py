"""Moved to harness.api.tiles; this import path stays for experiments written against it."""

import sys

from harness.api import tiles

sys.modules[__name__] = tiles
